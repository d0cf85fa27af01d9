r"""The autograd operations of the 3D grid: the sum of partial products over
one axis of the grid (both ways), the gathers that read a scattered sum, and
the adjacency blocks' coefficients.

A partial product (:math:`\mathbf{A}_{rc}\mathbf{H}_{c}` or
:math:`\mathbf{H}_{b}\mathbf{W}_{b}`) is summed over the ranks of one axis.
Kept **scattered** (``sums="scatter"``), each rank of the axis keeps one
piece of the sum's rows (``distributed.row_piece``: near-equal runs) from a
reduce-scatter, and what reads the sum gathers the pieces (an all-gather)
and drops the gathered copy after use: the backward of the reduce-scatter is
an all-gather of the pieces' gradients, that of the gather a reduce-scatter
of the gradients of every replica; a transform, whose weight's gradient
needs its input, gathers the pieces again in the backward instead of keeping
them (:class:`GatherLinear`). Kept **whole** (``sums="whole"``), the sum is
all-reduced and replicated over the axis; each replica is used differently
by what follows (another block of the adjacency or of a weight), so the
backward sums the replicas' gradients with the same all-reduce.

Bytes are booked as a ring sends them: in an all-reduce of an
:math:`n`-element tensor rank :math:`i` of :math:`g` sends and receives
:math:`2 (n - n_i)` elements, :math:`n_i` its own run of the :math:`g`
runs (:func:`ring_bytes`); in a reduce-scatter or an all-gather of
:math:`r` rows of width :math:`w`, :math:`(r - r_i) w` elements,
:math:`r_i` its own piece's rows (:func:`piece_bytes`).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pyg_dist.halo.ledger import Ledger
from pyg_dist.runtime import distributed
from pyg_dist.strategies.grid_3d.grid import Grid3DPlace, bounds
from pyg_dist.strategies.grid_3d.load import Block, Grid3DData

__all__ = ["SumOver", "ScatterOver", "GatherOver", "GatherLinear", "sum_over", "scatter_over",
           "gather_over", "gather_linear", "ring_bytes", "piece_bytes", "Coefficients"]


def ring_bytes(numel: int, size: int, index: int, element: int = 4) -> int:
    """Bytes rank ``index`` of ``size`` sends (as many it receives) in a
    ring all-reduce of ``numel`` elements of ``element`` bytes."""
    lo, hi = bounds(numel, size, index)
    return 2 * (numel - (hi - lo)) * element if size > 1 else 0


def piece_bytes(rows: int, width: int, size: int, index: int, element: int = 4) -> int:
    """Bytes rank ``index`` of ``size`` sends (as many it receives) in a
    reduce-scatter or an all-gather of ``rows`` rows of ``width`` elements
    of ``element`` bytes, in the pieces of ``distributed.row_piece``."""
    lo, hi = distributed.row_piece(rows, size, index)
    return (rows - (hi - lo)) * width * element if size > 1 else 0


@dataclass(frozen=True)
class _Booking:
    ledger: Ledger
    name: str
    direction: str


class SumOver(torch.autograd.Function):
    """A partial product summed over the ranks of one axis of the grid and
    kept whole; the backward sums the gradients of the replicas the same way."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, place: Grid3DPlace, axis: int,  # type: ignore[override]
                booking: _Booking) -> Tensor:
        ctx.place, ctx.axis, ctx.booking = place, axis, booking
        if not x.is_contiguous():
            x = x.contiguous()
        else:  # a partial sum nothing else reads: summed where it lies
            ctx.mark_dirty(x)
        return _all_reduce(x, place, axis, booking, booking.direction)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        return (_all_reduce(grad.contiguous().clone(), ctx.place, ctx.axis, ctx.booking, "bwd"),
                None, None, None)


class ScatterOver(torch.autograd.Function):
    """A partial product summed over the ranks of one axis of the grid, each
    rank keeping its piece of the rows; the backward gathers the pieces'
    gradients."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, place: Grid3DPlace, axis: int,  # type: ignore[override]
                booking: _Booking) -> Tensor:
        ctx.place, ctx.axis, ctx.booking, ctx.rows = place, axis, booking, x.size(0)
        return _scatter(x, place, axis, booking, booking.direction, inplace=True)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        return (_gather(grad, ctx.place, ctx.axis, ctx.rows, ctx.booking, "bwd"),
                None, None, None)


class GatherOver(torch.autograd.Function):
    """The whole rows of a sum scattered over one axis, from every rank's
    piece; the backward sums the gradients of the ranks' copies, each rank
    keeping its piece's. Keeps nothing: what reads the rows must not keep
    them either (the aggregation's ``spmm`` keeps their shape alone)."""

    @staticmethod
    def forward(ctx: Any, piece: Tensor, place: Grid3DPlace, axis: int,  # type: ignore[override]
                rows: int, booking: _Booking) -> Tensor:
        ctx.place, ctx.axis, ctx.booking = place, axis, booking
        return _gather(piece, place, axis, rows, booking, booking.direction)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        # autograd's gradient may be shared with another input's: not overwritten
        return (_scatter(grad, ctx.place, ctx.axis, ctx.booking, "bwd", inplace=False),
                None, None, None, None)


class GatherLinear(torch.autograd.Function):
    r""":math:`\sum_j \mathbf{H}_j \mathbf{W}_j^\top` of the whole rows
    :math:`\mathbf{H}` of a sum scattered over one axis (gathered from every
    rank's piece, then dropped), :math:`\mathbf{H}_j` its ``len(weights)``
    equal column blocks. Keeps the piece and the weights: the backward
    gathers the rows again for the weights' gradients, and sums the rows'
    gradient over the axis into each rank's piece."""

    @staticmethod
    def forward(ctx: Any, piece: Tensor, place: Grid3DPlace, axis: int,  # type: ignore[override]
                rows: int, booking: _Booking, *weights: Tensor) -> Tensor:
        ctx.place, ctx.axis, ctx.rows, ctx.booking = place, axis, rows, booking
        ctx.save_for_backward(piece, *weights)
        return _products(_gather(piece, place, axis, rows, booking, booking.direction),
                         weights)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        piece, *weights = ctx.saved_tensors
        need = ctx.needs_input_grad
        full = _gather(piece, ctx.place, ctx.axis, ctx.rows, ctx.booking, "bwd")
        chunks = full.chunk(len(weights), dim=1)
        grads = [grad.t() @ chunk if need[5 + j] else None for j, chunk in enumerate(chunks)]
        del full, chunks
        grad_piece = None
        if need[0]:
            grad_full = (grad @ weights[0] if len(weights) == 1
                         else torch.cat([grad @ weight for weight in weights], dim=1))
            grad_piece = _scatter(grad_full, ctx.place, ctx.axis, ctx.booking, "bwd",
                                  inplace=True)
        return (grad_piece, None, None, None, None, *grads)


def _products(full: Tensor, weights: tuple[Tensor, ...] | list[Tensor]) -> Tensor:
    r""":math:`\sum_j \mathbf{H}_j \mathbf{W}_j^\top` over ``full``'s
    equal column blocks."""
    out = None
    for chunk, weight in zip(full.chunk(len(weights), dim=1), weights):
        product = chunk @ weight.t()
        out = product if out is None else out.add_(product)
    assert out is not None, "at least one weight"
    return out


def _all_reduce(x: Tensor, place: Grid3DPlace, axis: int, booking: _Booking,
                direction: str) -> Tensor:
    size = place.shape[axis]
    if size == 1:
        return x
    start = time.perf_counter()
    out = distributed.all_reduce(x, group=place.group(axis))
    sent = ring_bytes(x.numel(), size, place.coords[axis], x.element_size())
    booking.ledger.record(booking.name, direction, bytes_sent=sent, bytes_recv=sent,
                          exchanges=1, seconds=time.perf_counter() - start)
    return out


def _scatter(x: Tensor, place: Grid3DPlace, axis: int, booking: _Booking, direction: str,
             inplace: bool) -> Tensor:
    start = time.perf_counter()
    out = distributed.reduce_scatter_rows(x, group=place.group(axis), inplace=inplace)
    sent = piece_bytes(x.size(0), math.prod(x.shape[1:]), place.shape[axis],
                       place.coords[axis], x.element_size())
    booking.ledger.record(booking.name, direction, bytes_sent=sent, bytes_recv=sent,
                          exchanges=1, seconds=time.perf_counter() - start)
    return out


def _gather(piece: Tensor, place: Grid3DPlace, axis: int, rows: int, booking: _Booking,
            direction: str) -> Tensor:
    start = time.perf_counter()
    out = distributed.all_gather_rows(piece.contiguous(), rows, group=place.group(axis))
    sent = piece_bytes(rows, math.prod(out.shape[1:]), place.shape[axis],
                       place.coords[axis], out.element_size())
    booking.ledger.record(booking.name, direction, bytes_sent=sent, bytes_recv=sent,
                          exchanges=1, seconds=time.perf_counter() - start)
    return out


def sum_over(x: Tensor, place: Grid3DPlace, axis: int, ledger: Ledger, name: str,
             training: bool) -> Tensor:
    """``x`` summed over the ranks of ``axis`` and kept whole
    (differentiably), booked in ``ledger`` under ``name`` (``fwd`` and
    ``bwd``; ``eval`` outside training). ``x`` itself holds the sum
    afterwards: it must be a partial sum nothing else reads (autograd refuses
    one saved for a backward).

    Args:
        x (torch.Tensor): This rank's partial sum.
        place (Grid3DPlace): The grid.
        axis (int): The axis summed over.
        ledger (Ledger): Where bytes are booked.
        name (str): The entry's name (the layer's).
        training (bool): Whether the model trains.
    """
    if place.shape[axis] == 1:
        return x
    booking = _Booking(ledger, name, "fwd" if training else "eval")
    return SumOver.apply(x, place, axis, booking)


def scatter_over(x: Tensor, place: Grid3DPlace, axis: int, ledger: Ledger, name: str,
                 training: bool) -> Tensor:
    """This rank's piece (``distributed.row_piece`` by its coordinate on
    ``axis``) of the rows of ``x`` summed over the ranks of ``axis``
    (differentiably), booked as :func:`sum_over` books; ``x`` itself on an
    axis of one rank. ``x``'s rows hold partial sums afterwards: it must be a
    partial sum nothing else reads.

    Args:
        x (torch.Tensor): This rank's partial sum, ``[rows, width]``.
        place (Grid3DPlace): The grid.
        axis (int): The axis summed over.
        ledger (Ledger): Where bytes are booked.
        name (str): The entry's name (the layer's).
        training (bool): Whether the model trains.
    """
    if place.shape[axis] == 1:
        return x
    return ScatterOver.apply(x, place, axis, _Booking(ledger, name,
                                                      "fwd" if training else "eval"))


def gather_over(piece: Tensor, place: Grid3DPlace, axis: int, rows: int, ledger: Ledger,
                name: str, training: bool) -> Tensor:
    """``[rows, width]`` the whole rows of a sum :func:`scatter_over` left
    in pieces over ``axis`` (differentiably; nothing kept for the backward),
    booked as :func:`sum_over` books; ``piece`` itself on an axis of one rank.

    Args:
        piece (torch.Tensor): This rank's piece.
        place (Grid3DPlace): The grid.
        axis (int): The axis the pieces lie over.
        rows (int): The rows of all pieces.
        ledger (Ledger): Where bytes are booked.
        name (str): The entry's name (the layer's).
        training (bool): Whether the model trains.
    """
    if place.shape[axis] == 1:
        return piece
    return GatherOver.apply(piece, place, axis, rows,
                            _Booking(ledger, name, "fwd" if training else "eval"))


def gather_linear(piece: Tensor, weights: list[Tensor], place: Grid3DPlace, axis: int | None,
                  rows: int, ledger: Ledger, name: str, training: bool) -> Tensor:
    r""":math:`\sum_j \mathbf{H}_j \mathbf{W}_j^\top` of the whole rows
    of a sum :func:`scatter_over` left in pieces over ``axis``,
    :math:`\mathbf{H}_j` their ``len(weights)`` equal column blocks
    (:class:`GatherLinear`: the rows gathered again in the backward, not
    kept), booked as :func:`sum_over` books.

    Args:
        piece (torch.Tensor): This rank's piece.
        weights (list[torch.Tensor]): ``[f_out, width / len(weights)]`` each.
        place (Grid3DPlace): The grid.
        axis (int, optional): The axis the pieces lie over; :obj:`None`:
            ``piece`` holds the whole rows.
        rows (int): The rows of all pieces.
        ledger (Ledger): Where bytes are booked.
        name (str): The entry's name (the layer's).
        training (bool): Whether the model trains.

    Shapes:
        - **output:** ``[rows, f_out]``.
    """
    if axis is None or place.shape[axis] == 1:
        return _products(piece, weights)
    return GatherLinear.apply(piece, place, axis, rows,
                              _Booking(ledger, name, "fwd" if training else "eval"), *weights)


@dataclass(frozen=True)
class Coefficients:
    r"""The entries of one aggregation's adjacency: ``kind`` ``"gcn"``
    (:math:`\hat{w}_{ij} = w_{ij} / \sqrt{d_i d_j}` on the edges that are
    no self-loop, :math:`s_i / d_i` on the diagonal, :math:`s_i` the
    self-loop's weight or the fill value, :math:`d_i` the weighted in-degree
    with it, as PyG's ``gcn_norm``), ``"mean"`` (:math:`1 / \deg_i` on every
    edge, self-loops and duplicates included), ``"sum"`` (ones).

    Attributes:
        kind (str): ``"gcn"``, ``"mean"`` or ``"sum"``.
        weighted (bool): Whether the graph's edge weights enter (gcn only).
        improved (bool): GCN's fill value 2 instead of 1.
    """

    kind: str
    weighted: bool = False
    improved: bool = False

    def edges(self, data: Grid3DData, block: Block, r: int, c: int) -> Tensor:
        """``[nnz]`` the entry of each edge of ``block``, in its CSR order
        (float32, worked out in float64)."""
        if self.kind == "sum":
            return torch.ones(block.nnz, dtype=torch.float32)
        row = block.row
        if self.kind == "mean":
            count = data.sums(r).in_edges.clamp(min=1).double()
            return (1.0 / count[row]).float()
        target, source = self._inverse_sqrt(data, r), self._inverse_sqrt(data, c)
        value = target[row] * source[block.col.long()]
        if self.weighted and block.weight is not None:
            value *= block.weight.double()
        value.masked_fill_(block.loop(row), 0.0)
        return value.float()

    def diagonal(self, data: Grid3DData, axis: int, lo: int, hi: int) -> Tensor:
        """``[hi - lo]`` the diagonal entries of positions ``[lo, hi)`` (in
        this rank's run on ``axis``), for ``"gcn"``."""
        start = data.run(axis)[0]
        loop, degree = self._loops(data, axis)
        return (loop / degree)[lo - start : hi - start]

    def _loops(self, data: Grid3DData, axis: int) -> tuple[Tensor, Tensor]:
        sums = data.sums(axis)
        fill = 2.0 if self.improved else 1.0
        own = sums.loop_weight if self.weighted else torch.ones_like(sums.loop_weight)
        loop = torch.where(sums.loop, own, torch.full_like(own, fill))
        other = sums.weight_other if self.weighted else sums.in_other.double()
        return loop, other + loop

    def _inverse_sqrt(self, data: Grid3DData, axis: int) -> Tensor:
        degree = self._loops(data, axis)[1]
        out = degree.pow(-0.5)
        return torch.where(torch.isinf(out), torch.zeros_like(out), out)
