"""This rank's place on the grid of graph parts × feature slices, and the
slices' bounds."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyg_dist.runtime import distributed
from pyg_dist.runtime.grids import process_grid

#: The strategy's name (``--strategy feature-parallel``).
NAME = "feature-parallel"


@dataclass(frozen=True)
class FeatureGrid:
    """This rank's place in the grid of graph parts × feature slices.

    Attributes:
        parts: :math:`D`, graph parts.
        slices: :math:`T`, feature slices.
        part: The part this rank holds (global rank // slices).
        slice: The slice of columns it holds (global rank % slices).
        part_group: The :math:`T` ranks of its part (all-to-alls).
        slice_group: The :math:`D` ranks of its slice (halo exchanges; rank
            :math:`d` of the group holds part :math:`d`).
    """

    parts: int
    slices: int
    part: int
    slice: int
    part_group: Any = None
    slice_group: Any = None

    @property
    def gradient_group(self) -> Any:
        """The group every parameter's gradient is summed over: all ranks.
        A parameter used on row blocks gets one partial sum per row block,
        and the :math:`P` row blocks are disjoint and cover every node; one
        used on a column slice (a bias added there, GIN's :math:`\\epsilon`)
        gets partial sums from the :math:`D` ranks of each slice, zero on the
        other slices' entries. The part's ranks alone would miss the other
        parts' rows, the slice's ranks alone the other row blocks."""
        return None

    def bounds(self, size: int, index: int | None = None) -> tuple[int, int]:
        """Rows or columns ``[lo, hi)`` of slice ``index`` (default: this
        rank's) when ``size`` of them are cut into :math:`T` near-equal runs."""
        return bounds(size, self.slices, self.slice if index is None else index)


def bounds(size: int, pieces: int, index: int) -> tuple[int, int]:
    """``[lo, hi)`` of run ``index`` of ``size`` items cut into ``pieces``
    near-equal runs (the first ones shorter when they do not divide).

    Args:
        size (int): The items (rows or columns).
        pieces (int): The runs.
        index (int): The run.
    """
    return size * index // pieces, size * (index + 1) // pieces


def grid_parts(world_size: int, slices: int) -> int:
    """The graph parts of a grid of ``world_size`` ranks and ``slices``
    slices; raises :class:`ValueError`, naming the fix, when ``slices`` does
    not divide the ranks.

    Args:
        world_size (int): The ranks.
        slices (int): :math:`T`, feature slices.
    """
    if world_size % slices:
        divisors = [t for t in range(1, world_size + 1) if world_size % t == 0]
        raise ValueError(f"--slices {slices} does not divide the {world_size} ranks; "
                         f"the grid is ranks / slices graph parts x slices, so use "
                         f"--slices {'|'.join(map(str, divisors))}")
    return world_size // slices


def feature_grid(slices: int) -> FeatureGrid:
    """This rank's :class:`FeatureGrid` of world size / ``slices`` parts ×
    ``slices`` slices, on :func:`~pyg_dist.runtime.grids.process_grid`'s
    grid of shape ``(parts, slices)``. Collective the first time per
    ``slices`` (it creates the part and slice groups).

    Args:
        slices (int): :math:`T`, which must divide the world size.
    """
    parts = grid_parts(distributed.world_size(), slices)
    place = process_grid((parts, slices))
    part, piece = place.coords
    return FeatureGrid(parts, slices, part, piece, place.group(1), place.group(0))
