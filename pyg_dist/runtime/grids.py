"""Process grids: the one place that lays the ranks on a grid and makes (and
keeps) the process groups along its axes, for every strategy that trains on
one (a layer pipeline's parts × stages, feature parallelism's parts ×
slices, ...).

A grid of shape :math:`(n_0, \\dots, n_{k-1})` numbers its ranks row-major:
rank :math:`r` sits at the coordinates whose last axis varies fastest
(:math:`r = \\sum_i c_i s_i`, :math:`s_{k-1} = 1`). The group along an axis
holds the ranks that share every other coordinate with this one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pyg_dist.runtime import distributed

__all__ = ["ProcessGrid", "process_grid"]

#: Groups made, by (shape, axes, the default group they were made in): this
#: rank's group along those axes (:obj:`None`: every rank, the default group).
_GROUPS: dict[tuple[tuple[int, ...], tuple[int, ...], int], Any] = {}


@dataclass(frozen=True)
class ProcessGrid:
    """This rank's place on a grid of ranks.

    Attributes:
        shape (tuple): Ranks along each axis; their product is the world size.
        coords (tuple): This rank's coordinate on each axis.
    """

    shape: tuple[int, ...]
    coords: tuple[int, ...]

    def rank_at(self, coords: tuple[int, ...]) -> int:
        """The global rank at ``coords``.

        Args:
            coords (tuple): A coordinate on each axis.
        """
        rank = 0
        for size, coord in zip(self.shape, coords):
            rank = rank * size + coord
        return rank

    def members(self, *axes: int) -> list[int]:
        """The global ranks that share this rank's coordinates on every axis
        but ``axes``, in rank order.

        Args:
            *axes (int): The axes the group runs along.
        """
        ranges = [range(size) if i in axes else (c,)
                  for i, (size, c) in enumerate(zip(self.shape, self.coords))]
        out = [0]
        for size, values in zip(self.shape, ranges):
            out = [r * size + v for r in out for v in values]
        return out

    def group(self, *axes: int) -> Any:
        """This rank's process group along ``axes``: :obj:`None` (the default
        group) when it holds every rank. Collective the first time per grid
        shape and ``axes``: every rank makes every group along them, in the
        same order; the same group afterwards.

        Args:
            *axes (int): The axes the group runs along.
        """
        axes = tuple(sorted(set(axes)))
        if math.prod(self.shape[a] for a in axes) == math.prod(self.shape):
            return None
        key = (self.shape, axes, distributed.group_id())
        if key not in _GROUPS:
            mine = None
            for start in _starts(self.shape, axes):
                ranks = ProcessGrid(self.shape, start).members(*axes)
                made = distributed.new_group(ranks)
                if distributed.rank() in ranks:
                    mine = made
            _GROUPS[key] = mine
        return _GROUPS[key]


def _starts(shape: tuple[int, ...], axes: tuple[int, ...]) -> list[tuple[int, ...]]:
    """One coordinate per group along ``axes``: the groups' first ranks, in rank order."""
    out: list[tuple[int, ...]] = [()]
    for i, size in enumerate(shape):
        out = [c + (v,) for c in out for v in ((0,) if i in axes else range(size))]
    return out


def process_grid(shape: tuple[int, ...] | list[int]) -> ProcessGrid:
    """This rank's place on the grid of ``shape`` over the world; raises
    :class:`ValueError` when the shape's product is not the world size.

    Args:
        shape (tuple): Ranks along each axis.
    """
    shape = tuple(int(n) for n in shape)
    world = distributed.world_size()
    if math.prod(shape) != world or min(shape, default=0) < 1:
        raise ValueError(f"a grid of shape {'x'.join(map(str, shape))} holds "
                         f"{math.prod(shape)} ranks, not the {world} of the world; choose "
                         f"sizes whose product is {world}")
    coords, rank = [], distributed.rank()
    for size in reversed(shape):
        coords.append(rank % size)
        rank //= size
    return ProcessGrid(shape, tuple(reversed(coords)))

