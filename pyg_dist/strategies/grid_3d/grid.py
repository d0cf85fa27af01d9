r"""This rank's place on the 3D grid, and the layouts of node matrices on it.

The ranks form a grid of :math:`X \times Y \times Z` (global rank
:math:`(x Y + y) Z + z`, :func:`~pyg_dist.runtime.grids.process_grid`'s
numbering). A node matrix (:math:`N \times F`, nodes in the permuted order of
``permute.py``) lies in a **layout**
``(rows, cols)`` of two distinct axes: the rank at coordinate :math:`i` on
axis ``rows`` and :math:`j` on axis ``cols`` holds row block :math:`i` of the
nodes (cut in as many runs as the axis has ranks) and column block
:math:`j`, replicated over the third axis.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyg_dist.runtime import distributed
from pyg_dist.runtime.grids import process_grid

__all__ = ["NAME", "AXES", "SUMS", "Layout", "Grid3DPlace", "grid_place", "bounds", "third",
           "parse_grid", "INPUT"]

#: The strategy's name (``--strategy grid-3d``).
NAME = "grid-3d"
#: The axes' names, in the order of the grid's shape.
AXES = ("x", "y", "z")
#: How each sum over an axis is kept: reduce-scattered (each rank of the axis
#: keeps a piece of its rows, gathered where it is read) or all-reduced whole.
SUMS = ("scatter", "whole")


def bounds(size: int, pieces: int, index: int) -> tuple[int, int]:
    """``[lo, hi)`` of run ``index`` of ``size`` items cut into ``pieces``
    near-equal runs.

    Args:
        size (int): The items (rows or columns).
        pieces (int): The runs.
        index (int): The run.
    """
    return size * index // pieces, size * (index + 1) // pieces


def third(a: int, b: int) -> int:
    """The axis that is neither ``a`` nor ``b``."""
    assert a != b and {a, b} <= {0, 1, 2}, f"two distinct axes, got {a}, {b}"
    return 3 - a - b


@dataclass(frozen=True)
class Layout:
    """Where a node matrix lies: rows cut over axis ``rows``, columns over
    axis ``cols``, replicated over the third axis.

    Attributes:
        rows (int): The axis its rows are cut over.
        cols (int): The axis its columns are cut over.
    """

    rows: int
    cols: int

    @property
    def spare(self) -> int:
        """The axis it is replicated over."""
        return third(self.rows, self.cols)

    def aggregated(self) -> Layout:
        """The layout of :math:`\\mathbf{A}\\mathbf{H}`: the adjacency's
        columns run over this layout's rows axis, its rows over the spare
        axis, and the partial sums are summed over the rows axis."""
        return Layout(self.spare, self.cols)

    def transformed(self) -> Layout:
        """The layout of :math:`\\mathbf{H}\\mathbf{W}`: the weight's rows run
        over this layout's cols axis, its columns over the spare axis, and
        the partial sums are summed over the cols axis."""
        return Layout(self.rows, self.spare)

    def __str__(self) -> str:
        return f"{AXES[self.rows]}{AXES[self.cols]}"


#: The layout of the input features: rows over y, columns over z (layer 0
#: aggregates with the adjacency block of rows over x, columns over y).
INPUT = Layout(1, 2)


@dataclass(frozen=True)
class Grid3DPlace:
    """This rank's place on the grid.

    Attributes:
        shape (tuple[int, int, int]): :math:`(X, Y, Z)`.
        coords (tuple[int, int, int]): This rank's coordinates.
    """

    shape: tuple[int, int, int]
    coords: tuple[int, int, int]
    _grid: Any = field(default=None, compare=False, repr=False)

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1] * self.shape[2]

    def group(self, *axes: int) -> Any:
        """The process group along ``axes`` (:obj:`None`: every rank), made
        by :func:`grid_place` with every other."""
        if self._grid is None:  # a place made without ranks (one process)
            return None
        return self._grid.group(*axes)

    def block(self, size: int, axis: int) -> tuple[int, int]:
        """This rank's run ``[lo, hi)`` of ``size`` items cut over ``axis``."""
        return bounds(size, self.shape[axis], self.coords[axis])

    def __str__(self) -> str:
        return "x".join(map(str, self.shape))


def parse_grid(text: str | tuple[int, int, int]) -> tuple[int, int, int]:
    """``(X, Y, Z)`` of ``"XxYxZ"``; raises :class:`ValueError` naming the
    spelling otherwise.

    Args:
        text (str or tuple): ``"2x2x1"`` or ``(2, 2, 1)``.
    """
    parts = text.lower().split("x") if isinstance(text, str) else list(text)
    try:
        shape = tuple(int(p) for p in parts)
    except (TypeError, ValueError):
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"--grid {text!r} is not a grid of three axes; spell it XxYxZ with "
                         f"positive sizes whose product is the number of ranks, e.g. 2x2x1")
    return shape  # type: ignore[return-value]


def grid_place(shape: tuple[int, int, int]) -> Grid3DPlace:
    """This rank's :class:`Grid3DPlace` on the grid ``shape``; raises
    :class:`ValueError`, naming the fix, when its product is not the world
    size.

    Args:
        shape (tuple[int, int, int]): :math:`(X, Y, Z)`.
    """
    world = distributed.world_size()
    if shape[0] * shape[1] * shape[2] != world:
        raise ValueError(f"Grid3D(x={shape[0]}, y={shape[1]}, z={shape[2]}) holds "
                         f"{shape[0] * shape[1] * shape[2]} ranks, not the {world} of the "
                         f"world; choose x, y, z whose product is {world} (CLI: --grid XxYxZ)")
    place = process_grid(shape)
    # Every group the layouts use, made now by every rank together: made in a
    # step instead, a rank whose peer failed meanwhile would wait in
    # new_group, which no peer's failure interrupts, until the timeout.
    for axes in ((0,), (1,), (2,), (0, 1), (0, 2), (1, 2)):
        place.group(*axes)
    return Grid3DPlace(shape, place.coords, place)  # type: ignore[arg-type]
