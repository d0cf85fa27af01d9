r"""The autograd operations of the 3D grid: the sum of partial products over
one axis of the grid (both ways), and the adjacency blocks' coefficients.

A partial product (:math:`\mathbf{A}_{rc}\mathbf{H}_{c}` or
:math:`\mathbf{H}_{b}\mathbf{W}_{b}`) is summed over the ranks of one axis
by an all-reduce; its result is replicated over that axis and each replica
is used differently by what follows (another block of the adjacency or of a
weight), so the backward sums the replicas' gradients with the same
all-reduce. Bytes are booked as a ring all-reduce sends them: rank :math:`i`
of :math:`g` sends and receives :math:`2 (n - n_i)` elements of an
:math:`n`-element tensor, :math:`n_i` its own run of the :math:`g` runs.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pyg_dist.halo.ledger import Ledger
from pyg_dist.runtime import distributed
from pyg_dist.strategies.grid_3d.grid import Grid3DPlace, bounds
from pyg_dist.strategies.grid_3d.load import Block, Grid3DData

__all__ = ["SumOver", "sum_over", "ring_bytes", "Coefficients"]


def ring_bytes(numel: int, size: int, index: int, element: int = 4) -> int:
    """Bytes rank ``index`` of ``size`` sends (as many it receives) in a
    ring all-reduce of ``numel`` elements of ``element`` bytes."""
    lo, hi = bounds(numel, size, index)
    return 2 * (numel - (hi - lo)) * element if size > 1 else 0


@dataclass(frozen=True)
class _Booking:
    ledger: Ledger
    name: str
    direction: str


class SumOver(torch.autograd.Function):
    """A partial product summed over the ranks of one axis of the grid;
    the backward sums the gradients of the replicas the same way."""

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


def sum_over(x: Tensor, place: Grid3DPlace, axis: int, ledger: Ledger, name: str,
             training: bool) -> Tensor:
    """``x`` summed over the ranks of ``axis`` (differentiably), booked in
    ``ledger`` under ``name`` (``fwd`` and ``bwd``; ``eval`` outside training).
    ``x`` itself holds the sum afterwards: it must be a partial sum nothing
    else reads (autograd refuses one saved for a backward).

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
