"""Which grid to use: bytes per epoch of every (parts, stages) layout.

For a model of ``layers`` convolutions of width :math:`w` whose stage
boundaries carry :math:`w_s` values per row (:math:`w`, or :math:`2w` for GCNII,
which carries its initial rows too), on a graph of :math:`N` nodes cut into
:math:`D` parts with :math:`H_D` halo rows in all, one training epoch moves

.. math::
    \\underbrace{2 L H_D w b}_{\\text{halo rows and their gradients}}
    + \\underbrace{2 (S - 1) N w_s b}_{\\text{stage boundaries, both ways}}

bytes (:math:`b` bytes per value), whatever the number of chunks: each halo
row crosses once per layer per epoch with one chunk or many. Graph
parallelism's cost grows with depth; the pipeline's does not.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from pyg_dist.partitioning.io import read_meta

__all__ = ["LayoutCost", "layout_costs", "best_layout", "halo_rows"]


@dataclass(frozen=True)
class LayoutCost:
    """Predicted training bytes per epoch (all ranks) of one layout.

    Args:
        parts (int): Parts the graph is cut into (ranks per stage).
        stages (int): Pipeline stages the layers are split into.
        halo_bytes (int): Bytes of halo rows and their gradients.
        stage_bytes (int): Bytes of activations and gradients between stages.
    """

    parts: int
    stages: int
    halo_bytes: int
    stage_bytes: int

    @property
    def total(self) -> int:
        return self.halo_bytes + self.stage_bytes

    @property
    def name(self) -> str:
        return f"{self.parts}x{self.stages}"


def layout_costs(world_size: int, num_nodes: int, halo_rows: dict[int, int], layers: int,
                 width: int, state_width: int | None = None,
                 bytes_per_value: int = 4) -> list[LayoutCost]:
    """The cost of every layout of ``world_size`` ranks with at most
    ``layers`` stages, fewest stages first. ``halo_rows[D]`` is the total halo
    rows of the graph cut into ``D`` parts (:func:`halo_rows`; 0 for one part).

    Args:
        world_size (int): Number of ranks.
        num_nodes (int): Nodes of the graph.
        halo_rows (dict[int, int]): The total halo rows of each cut into
            ``D > 1`` parts that a layout uses.
        layers (int): Message-passing layers (the most stages).
        width (int): Values per halo row.
        state_width (int, optional): Values per node sent between stages;
            :obj:`None` for ``width``. (default: :obj:`None`)
        bytes_per_value (int, optional): Bytes of one value.
            (default: :obj:`4`)
    """
    state_width = width if state_width is None else state_width
    out = []
    for stages in range(1, world_size + 1):
        if world_size % stages or stages > layers:
            continue
        parts = world_size // stages
        if parts > 1 and parts not in halo_rows:
            raise ValueError(f"layout_costs needs the halo rows of a {parts}-part cut "
                             f"(halo_rows[{parts}])")
        halo = 0 if parts == 1 else halo_rows[parts]
        out.append(LayoutCost(parts, stages, 2 * layers * halo * width * bytes_per_value,
                              2 * (stages - 1) * num_nodes * state_width * bytes_per_value))
    return out


def best_layout(costs: list[LayoutCost]) -> LayoutCost:
    """The layout moving the fewest bytes (fewer stages on a tie).

    Args:
        costs (list[LayoutCost]): The candidate layouts (:func:`layout_costs`).
    """
    return min(costs, key=lambda c: (c.total, c.stages))


def halo_rows(folder: str | os.PathLike) -> int:
    """Halo rows of all parts of a partition folder.

    Args:
        folder (str or os.PathLike): The partition folder.
    """
    return sum(read_meta(folder).halo_sizes)
