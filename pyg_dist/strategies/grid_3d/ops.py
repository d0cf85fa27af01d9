r"""The autograd operations of the 3D grid: the sums of partial products
over one axis of the grid (both ways) and the adjacency blocks'
coefficients.

A partial product (:math:`\mathbf{A}_{rc}\mathbf{H}_{c}` or
:math:`\mathbf{H}_{b}\mathbf{W}_{b}`) is summed over the ranks of one axis.
Kept **scattered** (``sums="scatter"``), each rank of the axis keeps one
piece of the sum's rows (``distributed.row_piece``: near-equal runs), and
what reads the sum gathers the pieces where it reads them: an aggregation
(:class:`Aggregate`) a chunk of :data:`COLUMNS` columns at a time (the
chunk's input rows gathered, multiplied by the block, the partial sums
reduce-scattered into the output's piece, the chunk dropped), a transform
(:class:`Transform`) a range of :data:`ROWS` rows at a time (gathered,
multiplied by the weight's block, reduced into the ranks whose pieces hold
them); their backwards run the same way, and a transform, whose weight's
gradient needs its input, gathers it again instead of keeping it. No rank
holds a whole block of an input or of partial sums. Kept **whole**
(``sums="whole"``), the sum is all-reduced and replicated over the axis;
each replica is used differently by what follows (another block of the
adjacency or of a weight), so the backward sums the replicas' gradients with
the same all-reduce.

Bytes are booked as a ring sends them: in an all-reduce of an
:math:`n`-element tensor rank :math:`i` of :math:`g` sends and receives
:math:`2 (n - n_i)` elements, :math:`n_i` its own run of the :math:`g`
runs (:func:`ring_bytes`); in a reduce-scatter or an all-gather of
:math:`r` rows of width :math:`w`, :math:`(r - r_i) w` elements,
:math:`r_i` its own piece's rows (:func:`piece_bytes`), however the rows
or columns are chunked: each chunk books its own share.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from pyg_dist.halo.ledger import Ledger
from pyg_dist.ops import spmm
from pyg_dist.runtime import distributed
from pyg_dist.strategies.grid_3d.grid import Grid3DPlace, bounds
from pyg_dist.strategies.grid_3d.load import Block, Grid3DData
from pyg_dist.utils.dropout import DroppedInput

__all__ = ["COLUMNS", "ROWS", "SumOver", "Aggregation", "Dropping", "Aggregate", "Transform",
           "ReLU",
           "sum_over", "aggregate", "transform", "gather_rows", "products", "ring_bytes",
           "piece_bytes", "Coefficients"]

#: Columns of an aggregation's input gathered, multiplied and reduce-scattered
#: at a time. The resident size of each rank sampled while it trained the
#: memory benchmark's model on its 400k-node graph (2x2x2: blocks of 200,000 x
#: 1.37M edges, 64 columns a rank) peaked at 229 MiB above the imports 8 at a
#: time against 246 MiB 16 at a time (a chunk's gathered rows and partial sums,
#: 2 x rows x COLUMNS floats, are live beside the layer's pieces); the CPU
#: kernel took 0.13 s for the 64 columns 8 at a time, 0.08 s 16 at a time,
#: 0.45 s 4 at a time.
COLUMNS = 8
#: Rows of a transform's input gathered, multiplied and reduced at a time
#: (4 MiB of 64 float32 columns).
ROWS = 16384


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


@dataclass(frozen=True)
class Aggregation:
    r"""One aggregation's adjacency block: its CSR and entries, and the
    diagonal (the positions that are both a target and a source of the
    block), which carries GCN's self-loops, GIN's root and SAGE's.

    Attributes:
        rowptr (torch.Tensor): ``[targets + 1]`` the block's row pointers.
        col (torch.Tensor): ``[nnz]`` its sources (from the input run's first).
        entry (torch.Tensor): ``[nnz]`` its entries.
        sources (int): The input run's rows (the block's columns).
        start (int): The diagonal's first row among the targets.
        first (int): Its first row among the sources.
        length (int): Its rows.
        diagonal (torch.Tensor, optional): ``[length]`` GCN's entries on it.
        apart (bool): Whether the diagonal's rows go beside the sums
            (SAGE's root: ``[A H, I H]``) rather than into them.
    """

    rowptr: Tensor
    col: Tensor
    entry: Tensor
    sources: int
    start: int
    first: int
    length: int
    diagonal: Tensor | None = None
    apart: bool = False
    _transpose: list[Tensor] = field(default_factory=list, compare=False, repr=False)

    def partial(self, h: Tensor, root: Tensor | None) -> Tensor:
        """``[targets, width]`` (twice as wide ``apart``) this rank's partial
        sums of the whole run's rows ``h`` (some of their columns)."""
        out = spmm(self.rowptr, self.col, h, self.entry.to(h.dtype), "sum")
        own, rows = self._own(h), out.narrow(0, self.start, self.length)
        if self.diagonal is not None:
            rows.add_(own * self.diagonal.to(h.dtype).unsqueeze(1))
        if root is not None:
            rows.add_(own * root)
        if self.apart:
            eye = F.pad(own, (0, 0, self.start, out.size(0) - self.start - self.length))
            out = torch.cat([out, eye], dim=1)
        return out

    def partial_grad(self, grad: Tensor, root: Tensor | None) -> Tensor:
        """``[sources, width]`` the gradient of :meth:`partial`'s ``h``
        from its output's ``grad`` (the transposed block, made once)."""
        width = grad.size(1) // (2 if self.apart else 1)
        summed = grad[:, :width].contiguous()
        colptr, row, entry = self.transposed()
        out = spmm(colptr, row, summed, entry.to(grad.dtype), "sum")
        rows, diagonal = out.narrow(0, self.first, self.length), self._own(summed, self.start)
        if self.diagonal is not None:
            rows.add_(diagonal * self.diagonal.to(grad.dtype).unsqueeze(1))
        if root is not None:
            rows.add_(diagonal * root)
        if self.apart:
            rows.add_(grad[self.start : self.start + self.length, width:])
        return out

    def transposed(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(colptr, row, entry)``: the block's transpose as CSR, made at the
        first call and kept (its indices in the block's dtype and its
        entries; the permutation that made it is not kept)."""
        if not self._transpose:
            targets = self.rowptr.numel() - 1
            perm = torch.sort(self.col, stable=True).indices
            colptr = torch.zeros(self.sources + 1, dtype=torch.long)
            torch.cumsum(torch.bincount(self.col.long(), minlength=self.sources), 0,
                         out=colptr[1:])
            counts = (self.rowptr[1:] - self.rowptr[:-1]).long()
            row = torch.repeat_interleave(torch.arange(targets, dtype=self.col.dtype), counts)
            self._transpose.extend([colptr.to(self.col.dtype), row[perm], self.entry[perm]])
        colptr, row, entry = self._transpose
        return colptr, row, entry

    def _own(self, h: Tensor, first: int | None = None) -> Tensor:
        first = self.first if first is None else first
        return h[first : first + self.length]


@dataclass(frozen=True)
class Dropping:
    """Dropout of an aggregation's input, applied where the aggregation reads
    each chunk of it (no dropped copy of the input is made, and no mask kept:
    the backward draws the chunk's mask again). The masks are those of
    ``made`` (keyed on global node and global column).

    Attributes:
        made (DroppedInput): The draw: its ``p``, seed, call and the global
            columns of the input's block.
        ids (torch.Tensor): ``[run]`` global id of each row of the input's run.
        lo (int): This rank's first row of the run (its piece's).
        hi (int): The row after its piece's last.
    """

    made: DroppedInput
    ids: Tensor
    lo: int
    hi: int

    def apply(self, chunk: Tensor, a: int, b: int, piece: bool = False,
              inplace: bool = False) -> Tensor:
        """``chunk`` (columns ``[a, b)`` of the whole run, or of this rank's
        piece) dropped: scaled by :math:`1 / (1 - p)`, then masked (in place
        with ``inplace``); a piece's gradient in the backward's order (masked,
        then scaled), in place."""
        made = self.made
        columns = None if made.columns is None else made.columns[a:b]
        ids = self.ids[self.lo : self.hi] if piece else self.ids
        keep = DroppedInput(made.source, made.p, made.seed, made.call, None,
                            columns).keep(ids, b - a)
        scale = 1.0 / (1.0 - made.p)
        if piece:
            return chunk.mul_(keep).mul_(scale)
        return (chunk.mul_(scale) if inplace else chunk * scale).mul_(keep)


class Aggregate(torch.autograd.Function):
    r""":math:`\mathbf{A}\mathbf{H}` (:class:`Aggregation`) of a sum kept
    in pieces over axis ``split`` (or of a whole run), summed over axis
    ``axis`` into this rank's piece, ``columns`` columns at a time: each
    chunk's input rows gathered, multiplied and reduce-scattered in turn,
    so no whole block of the input or of the partial sums is held. The
    backward the same way: each chunk's gradient gathered, multiplied by
    the transposed block and reduce-scattered into the input's piece.
    A dropout of the input (``drop``) is applied to each chunk as it is
    read, and to each chunk of the input's gradient. Keeps nothing but the
    diagonal's input rows when ``root`` (GIN's :math:`1 + \epsilon`) takes a
    gradient."""

    @staticmethod
    def forward(ctx: Any, h: Tensor, root: Tensor | None,  # type: ignore[override]
                agg: Aggregation, place: Grid3DPlace, split: int | None, axis: int,
                booking: _Booking, columns: int, drop: Dropping | None) -> Tensor:
        ctx.agg, ctx.place, ctx.split, ctx.axis = agg, place, split, axis
        ctx.booking, ctx.columns, ctx.shape, ctx.drop = booking, columns, h.shape, drop
        width, copies = h.size(1), 2 if agg.apart else 1
        lo, hi = _piece(agg.rowptr.numel() - 1, place, axis)
        out = h.new_empty(hi - lo, copies * width)
        keep = root is not None and ctx.needs_input_grad[1]
        owns = []
        for a, b in _chunks(width, columns):
            chunk = _read_columns(h, a, b, place, split, agg.sources, booking,
                                  booking.direction)
            if drop is not None:  # in place unless the chunk is h itself
                fresh = chunk.untyped_storage().data_ptr() != h.untyped_storage().data_ptr()
                chunk = drop.apply(chunk, a, b, inplace=fresh)
            if keep:
                owns.append(chunk[agg.first : agg.first + agg.length].clone())
            piece = _scatter_to(agg.partial(chunk, root), place, axis, booking,
                                booking.direction)
            del chunk
            _write_columns(out, piece, a, b, width)
        ctx.save_for_backward(torch.cat(owns, dim=1) if keep else None, root)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        own, root = ctx.saved_tensors
        agg, place, booking = ctx.agg, ctx.place, ctx.booking
        need_h, need_root = ctx.needs_input_grad[:2]
        width = ctx.shape[1]
        grad_h = grad.new_empty(ctx.shape) if need_h else None
        grad_root = torch.zeros_like(root) if need_root else None
        targets = agg.rowptr.numel() - 1
        for a, b in _chunks(width, ctx.columns):
            chunk = grad[:, a:b] if not agg.apart else torch.cat(
                [grad[:, a:b], grad[:, width + a : width + b]], dim=1)
            full = _gather_from(chunk, place, ctx.axis, targets, booking)
            if grad_root is not None:
                grad_root += (full[agg.start : agg.start + agg.length, : b - a]
                              * own[:, a:b]).sum()
            if grad_h is not None:
                part = agg.partial_grad(full, root)
                del full
                grad_h[:, a:b] = _scatter_to(part, place, ctx.split, booking, "bwd")
                if ctx.drop is not None:
                    ctx.drop.apply(grad_h[:, a:b], a, b, piece=True)
        return grad_h, grad_root, None, None, None, None, None, None, None


class Transform(torch.autograd.Function):
    r""":math:`\sum_j \mathbf{H}_j \mathbf{W}_j^\top` of a sum kept in
    pieces over axis ``split`` (or of a whole run; :math:`\mathbf{H}_j` its
    ``len(weights)`` equal column blocks), summed over axis ``axis`` into
    this rank's piece, ``rows`` rows at a time: each range of rows gathered,
    multiplied and reduced into the ranks whose pieces hold them, so no
    whole block of the input or of the partial sums is held. Keeps the
    piece and the weights: the backward gathers each range of the
    gradient's rows and of the input's again (the weights' gradients read
    them), and reduces the input's gradient into each rank's piece."""

    @staticmethod
    def forward(ctx: Any, h: Tensor, place: Grid3DPlace,  # type: ignore[override]
                split: int | None, axis: int, run: int, booking: _Booking, rows: int,
                *weights: Tensor) -> Tensor:
        ctx.place, ctx.split, ctx.axis, ctx.run = place, split, axis, run
        ctx.booking, ctx.rows = booking, rows
        ctx.save_for_backward(h, *weights)
        lo, hi = _piece(run, place, axis)
        out = h.new_empty(hi - lo, weights[0].size(0))
        for s, e in _chunks(run, rows):
            part = products(_read_rows(h, s, e, place, split, run, booking,
                                        booking.direction), weights)
            _reduce_to(out, part, s, place, axis, run, booking, booking.direction)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        h, *weights = ctx.saved_tensors
        place, booking, run = ctx.place, ctx.booking, ctx.run
        need = ctx.needs_input_grad
        grads = [torch.zeros_like(w) if need[7 + j] else None for j, w in enumerate(weights)]
        grad_h = h.new_empty(h.shape) if need[0] else None
        for s, e in _chunks(run, ctx.rows):
            rows = _read_rows(grad, s, e, place, ctx.axis, run, booking, "bwd")
            full = _read_rows(h, s, e, place, ctx.split, run, booking, "bwd")
            for grad_w, chunk in zip(grads, full.chunk(len(weights), dim=1)):
                if grad_w is not None:
                    grad_w.addmm_(rows.t(), chunk)
            del full
            if grad_h is not None:
                part = (rows @ weights[0] if len(weights) == 1
                        else torch.cat([rows @ weight for weight in weights], dim=1))
                _reduce_to(grad_h, part, s, place, ctx.split, run, booking, "bwd")
        return (grad_h, None, None, None, None, None, None, *grads)


class ReLU(torch.autograd.Function):
    r""":math:`\max(x, 0)` that keeps a byte an entry for its backward (where
    the output is positive) instead of its float output."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:  # type: ignore[override]
        out = torch.relu(x)
        ctx.save_for_backward(out > 0)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:  # type: ignore[override]
        (positive,) = ctx.saved_tensors
        return torch.where(positive, grad, grad.new_zeros(()))


def _chunks(size: int, step: int) -> list[tuple[int, int]]:
    """``[a, b)`` of ``size`` items ``step`` at a time."""
    return [(a, min(size, a + step)) for a in range(0, size, step)]


def _split(place: Grid3DPlace, axis: int | None) -> bool:
    """Whether a matrix is cut in pieces over ``axis`` (a real split)."""
    return axis is not None and place.shape[axis] > 1


def _piece(rows: int, place: Grid3DPlace, axis: int | None) -> tuple[int, int]:
    """``[lo, hi)`` of this rank's piece of ``rows`` rows cut over ``axis``."""
    if not _split(place, axis):
        return 0, rows
    assert axis is not None, "a real split"
    return distributed.row_piece(rows, place.shape[axis], place.coords[axis])


def _read_columns(h: Tensor, a: int, b: int, place: Grid3DPlace, split: int | None, rows: int,
                  booking: _Booking, direction: str) -> Tensor:
    """``[rows, b - a]`` columns ``[a, b)`` of the whole run of ``h``'s rows
    (its pieces gathered over ``split``)."""
    chunk = h[:, a:b].contiguous()
    if not _split(place, split):
        return chunk
    assert split is not None, "a real split"
    return _gather(chunk, place, split, rows, booking, direction)


def _write_columns(out: Tensor, piece: Tensor, a: int, b: int, width: int) -> None:
    """Columns ``[a, b)`` of ``out`` from ``piece`` (and ``[width + a,
    width + b)`` from its second half when ``out`` is twice as wide)."""
    out[:, a:b] = piece[:, : b - a]
    if out.size(1) > width:
        out[:, width + a : width + b] = piece[:, b - a :]


def _scatter_to(x: Tensor, place: Grid3DPlace, axis: int | None, booking: _Booking,
                direction: str) -> Tensor:
    """This rank's piece over ``axis`` of ``x``'s rows summed over it (``x``
    the buffer); ``x`` on no split."""
    if not _split(place, axis):
        return x
    assert axis is not None, "a real split"
    return _scatter(x, place, axis, booking, direction, inplace=True)


def _gather_from(piece: Tensor, place: Grid3DPlace, axis: int | None, rows: int,
                 booking: _Booking) -> Tensor:
    """``[rows, ...]`` the pieces over ``axis`` joined (the backward's)."""
    if not _split(place, axis):
        return piece
    assert axis is not None, "a real split"
    return _gather(piece.contiguous(), place, axis, rows, booking, "bwd")


def _read_rows(h: Tensor, s: int, e: int, place: Grid3DPlace, split: int | None, run: int,
               booking: _Booking, direction: str) -> Tensor:
    """``[e - s, width]`` rows ``[s, e)`` of the run of ``run`` rows whose
    pieces over ``split`` the ranks hold (``h`` this rank's)."""
    if not _split(place, split):
        return h[s:e]
    assert split is not None, "a real split"
    start = time.perf_counter()
    out = distributed.gather_row_range(h, run, s, e, group=place.group(split))
    lo, hi = _piece(run, place, split)
    sent = ((e - s) - max(0, min(e, hi) - max(s, lo))) * math.prod(out.shape[1:])
    sent *= out.element_size()
    booking.ledger.record(booking.name, direction, bytes_sent=sent, bytes_recv=sent,
                          exchanges=1, seconds=time.perf_counter() - start)
    return out


def _reduce_to(out: Tensor, part: Tensor, s: int, place: Grid3DPlace, axis: int | None,
               run: int, booking: _Booking, direction: str) -> None:
    """Rows ``[s, s + len(part))`` of the run of ``run`` rows summed over
    ``axis`` (``part`` the buffer), this rank's written into its piece
    ``out``; on no split, written as they are."""
    if not _split(place, axis):
        out[s : s + part.size(0)] = part
        return
    assert axis is not None, "a real split"
    start = time.perf_counter()
    at, mine = distributed.reduce_row_range(part, run, s, group=place.group(axis))
    out[at : at + mine.size(0)] = mine
    sent = (part.size(0) - mine.size(0)) * math.prod(part.shape[1:]) * part.element_size()
    booking.ledger.record(booking.name, direction, bytes_sent=sent, bytes_recv=sent,
                          exchanges=1, seconds=time.perf_counter() - start)


def products(full: Tensor, weights: tuple[Tensor, ...] | list[Tensor]) -> Tensor:
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


def aggregate(h: Tensor, agg: Aggregation, place: Grid3DPlace, split: int | None, axis: int,
              ledger: Ledger, name: str, training: bool, root: Tensor | None = None,
              columns: int = COLUMNS, drop: Dropping | None = None) -> Tensor:
    r"""This rank's piece over ``axis`` (``distributed.row_piece`` by its
    coordinate there; all rows on an axis of one rank) of
    :math:`\mathbf{A}\mathbf{H}` summed over ``axis`` (differentiably,
    :class:`Aggregate`: ``columns`` columns at a time), booked as
    :func:`sum_over` books.

    Args:
        h (torch.Tensor): This rank's piece of the input over ``split``, or
            its whole run.
        agg (Aggregation): The adjacency block.
        place (Grid3DPlace): The grid.
        split (int, optional): The axis ``h`` lies in pieces over;
            :obj:`None`: ``h`` holds the whole run.
        axis (int): The axis summed over.
        ledger (Ledger): Where bytes are booked.
        name (str): The entry's name (the layer's).
        training (bool): Whether the model trains.
        root (torch.Tensor, optional): GIN's :math:`1 + \epsilon` times the
            diagonal's rows added. (default: :obj:`None`)
        columns (int, optional): Columns at a time. (default: :data:`COLUMNS`)
        drop (Dropping, optional): A dropout of ``h`` to apply as it is read.
            (default: :obj:`None`)

    Shapes:
        - **output:** ``[piece, width]`` (``[piece, 2 width]`` for
          ``agg.apart``).
    """
    if columns < 1:
        raise ValueError(f"'aggregate' takes columns >= 1 at a time (got {columns})")
    booking = _Booking(ledger, name, "fwd" if training else "eval")
    return Aggregate.apply(h, root, agg, place, split, axis, booking, columns, drop)


def gather_rows(piece: Tensor, place: Grid3DPlace, axis: int, rows: int, ledger: Ledger,
                name: str, training: bool) -> Tensor:
    """``[rows, width]`` the whole run of a matrix that takes no gradient
    (the input features) from its pieces over ``axis``, booked as
    :func:`sum_over` books.

    Args:
        piece (torch.Tensor): This rank's piece.
        place (Grid3DPlace): The grid.
        axis (int): The axis the pieces lie over.
        rows (int): The rows of all pieces.
        ledger (Ledger): Where bytes are booked.
        name (str): The entry's name (the layer's).
        training (bool): Whether the model trains.
    """
    assert not piece.requires_grad, "gathered whole: a matrix that takes no gradient"
    booking = _Booking(ledger, name, "fwd" if training else "eval")
    return _read_columns(piece, 0, piece.size(1), place, axis, rows, booking, booking.direction)


def transform(h: Tensor, weights: list[Tensor], place: Grid3DPlace, split: int | None,
              axis: int, run: int, ledger: Ledger, name: str, training: bool,
              rows: int = ROWS) -> Tensor:
    r"""This rank's piece over ``axis`` of :math:`\sum_j \mathbf{H}_j
    \mathbf{W}_j^\top` summed over ``axis`` (differentiably,
    :class:`Transform`: ``rows`` rows at a time), :math:`\mathbf{H}_j` the
    ``len(weights)`` equal column blocks of the whole run's rows, booked as
    :func:`sum_over` books.

    Args:
        h (torch.Tensor): This rank's piece of the input over ``split``, or
            its whole run.
        weights (list[torch.Tensor]): ``[f_out, width / len(weights)]`` each.
        place (Grid3DPlace): The grid.
        split (int, optional): The axis ``h`` lies in pieces over;
            :obj:`None`: ``h`` holds the whole run.
        axis (int): The axis summed over.
        run (int): The run's rows (of all pieces).
        ledger (Ledger): Where bytes are booked.
        name (str): The entry's name (the layer's).
        training (bool): Whether the model trains.
        rows (int, optional): Rows at a time. (default: :data:`ROWS`)

    Shapes:
        - **output:** ``[piece, f_out]``.
    """
    if rows < 1:
        raise ValueError(f"'transform' takes rows >= 1 at a time (got {rows})")
    booking = _Booking(ledger, name, "fwd" if training else "eval")
    return Transform.apply(h, place, split, axis, run, booking, rows, *weights)


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
        if self.weighted:
            assert sums.loop_weight is not None and sums.weight_other is not None, (
                "a weighted graph's node sums hold its weights")
            own, other = sums.loop_weight, sums.weight_other
        else:
            own = torch.ones(sums.loop.numel(), dtype=torch.float64)
            other = sums.in_other.double()
        loop = torch.where(sums.loop, own, torch.full_like(own, fill))
        return loop, other + loop

    def _inverse_sqrt(self, data: Grid3DData, axis: int) -> Tensor:
        degree = self._loops(data, axis)[1]
        out = degree.pow(-0.5)
        return torch.where(torch.isinf(out), torch.zeros_like(out), out)
