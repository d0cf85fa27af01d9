"""The autograd operations of the grid: moving a matrix between layouts
(all-to-alls among a part's ranks), the loss on the columns, and the
aggregations' coefficients on column slices."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pyg_dist.data.dist_data import DistEdgeIndex
from pyg_dist.halo import HaloRows, LayerHalo
from pyg_dist.halo.comm import exchange_rows
from pyg_dist.halo.ledger import ALL_TO_ALL, Ledger
from pyg_dist.metrics import mean_over_ranks
from pyg_dist.nn.gcn_norm import gcn_adjacency
from pyg_dist.ops.csr import csr_row
from pyg_dist.runtime import distributed
from pyg_dist.strategies.feature_parallel.grid import FeatureGrid, bounds


class Mover:
    """All-to-alls among the ranks of this rank's part, booked in the graph's
    ledger (``<layer>/rows``, ``<layer>/columns``)."""

    #: The message tag of the part group's exchanges (one at a time).
    TAG = 1

    def __init__(self, grid: FeatureGrid, graph: DistEdgeIndex) -> None:
        self.grid, self.graph = grid, graph

    def move(self, x: Tensor, to_rows: bool, width: int, name: str, direction: str) -> Tensor:
        """``x`` (``[part rows, slice columns]`` to rows, ``[row block,
        width]`` to columns) in the other layout."""
        grid = self.grid
        slices, mine = grid.slices, grid.slice
        if slices == 1:
            return x
        n = self.graph.num_owned
        rows = [bounds(n, slices, s) for s in range(slices)]
        cols = [bounds(width, slices, s) for s in range(slices)]
        if to_rows:
            pieces = [x[lo:hi] for lo, hi in rows]
            shapes = [(rows[mine][1] - rows[mine][0], hi - lo) for lo, hi in cols]
        else:
            pieces = [x[:, lo:hi] for lo, hi in cols]
            shapes = [(hi - lo, cols[mine][1] - cols[mine][0]) for lo, hi in rows]
        send_counts = [0 if s == mine else p.numel() for s, p in enumerate(pieces)]
        recv_counts = [0 if s == mine else r * c for s, (r, c) in enumerate(shapes)]
        send = torch.cat([p.reshape(-1) for s, p in enumerate(pieces) if s != mine])
        start = time.perf_counter()
        received = exchange_rows(send.view(-1, 1), send_counts, recv_counts, grid.part_group,
                                 tag=self.TAG)
        assert isinstance(received, Tensor), "a synchronous exchange returns a tensor"
        seconds = time.perf_counter() - start
        blocks, offset = [], 0
        for s in range(slices):
            if s == mine:
                blocks.append(pieces[s])
                continue
            blocks.append(received[offset : offset + recv_counts[s]].view(shapes[s]))
            offset += recv_counts[s]
        size = x.element_size()
        self.graph.ledger.record(name, direction, bytes_sent=sum(send_counts) * size,
                                 bytes_recv=sum(recv_counts) * size, exchanges=1,
                                 seconds=seconds)
        return torch.cat(blocks, dim=1 if to_rows else 0)


class ColumnLoss(torch.autograd.Function):
    r"""The summed cross entropy of logits left on the columns (``z``:
    ``[part rows, slice classes]``), without moving them to rows: each row's
    log-sum-exp :math:`m + \log \sum_t e^{l_t - m}` from two all-reduces of
    one value per row among the part's ranks (the slices' log-sum-exps
    :math:`l_t`: their largest :math:`m`, then the sum; booked as
    ``logits/loss``), the target's logit on the rank that holds its column.
    The forward gives this rank's share of the sum (the part's
    log-sum-exps on slice 0's rank, less the targets' logits it holds); the
    backward the whole sum's gradient of this rank's columns,
    :math:`\mathrm{softmax}(z) - \mathbf{1}_y` on the counted rows, times
    the incoming gradient: every rank steps back from its share with the
    same weight, as ``loss.backward()`` on :meth:`of`'s loss does."""

    @staticmethod
    def forward(ctx: Any, z: Tensor, targets: Tensor, width: int,  # type: ignore[override]
                grid: FeatureGrid, ledger: Ledger, direction: str) -> Tensor:
        lo, hi = grid.bounds(width)
        counted = targets >= 0
        mine = counted & (targets >= lo) & (targets < hi)
        start = time.perf_counter()
        part = torch.logsumexp(z, dim=1)  # every slice has columns (loss_on_columns)
        top = distributed.all_reduce(part.clone(), "max", grid.part_group)
        lse = top + distributed.all_reduce(torch.exp(part - top), "sum", grid.part_group).log()
        sent = 2 * lse.numel() * lse.element_size()
        ledger.record("logits/loss", direction, bytes_sent=sent, bytes_recv=sent, exchanges=2,
                      seconds=time.perf_counter() - start)
        picked = z[mine, targets[mine] - lo]
        share = -picked.sum()
        if grid.slice == 0:
            share = share + lse[counted].sum()
        ctx.save_for_backward(z, lse, targets)
        ctx.bounds = lo, hi
        return share

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        z, lse, targets = ctx.saved_tensors
        lo, hi = ctx.bounds
        out = torch.exp(z - lse.unsqueeze(1))
        out[targets < 0] = 0.0
        mine = (targets >= lo) & (targets < hi)
        rows = mine.nonzero().view(-1)
        out[rows, targets[rows] - lo] -= 1.0
        return out * grad, None, None, None, None, None

    @classmethod
    def of(cls, z: Tensor, targets: Tensor, width: int, grid: FeatureGrid, ledger: Ledger,
           direction: str) -> tuple[Tensor, float]:
        """The loss averaged over the counted rows of every part, as
        :func:`~pyg_dist.train.global_loss` gives it: this rank's
        differentiable share, and the global value. Collective.

        Args:
            z (torch.Tensor): ``[part rows, slice classes]`` the logits' columns.
            targets (torch.Tensor): ``[part rows]`` each row's class, -1 where not counted.
            width (int): The classes.
            grid (FeatureGrid): The grid.
            ledger (Ledger): Where the exchanges are booked.
            direction (str): Their direction.
        """
        share = cls.apply(z, targets, width, grid, ledger, direction)
        count = int((targets >= 0).sum()) if grid.slice == 0 else 0
        return mean_over_ranks(share, count)


class Redistribute(torch.autograd.Function):
    """A layout change whose backward is the opposite change of the gradient."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, mover: Mover, to_rows: bool, width: int,  # type: ignore[override]
                name: str, direction: str) -> Tensor:
        ctx.mover, ctx.to_rows, ctx.width, ctx.name = mover, to_rows, width, name
        return mover.move(x, to_rows, width, name, direction)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        back = ctx.mover.move(grad.contiguous(), not ctx.to_rows, ctx.width, ctx.name,
                              ALL_TO_ALL)
        return back, None, None, None, None, None


@dataclass(frozen=True)
class GCNCoefficients:
    """GCN's (normalised) adjacency, as :class:`~pyg_dist.nn.DistGCNConv` aggregates."""

    normalize: bool
    improved: bool
    loops: bool

    def key(self, dtype: torch.dtype, weight: Tensor | None) -> tuple[Any, ...]:
        return ("gcn", self.normalize, self.improved, self.loops, dtype, weight is None)

    def local(self, graph: DistEdgeIndex, weight: Tensor | None, fetched: HaloRows,
              halo: LayerHalo | None, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor | None]:
        return gcn_adjacency(graph, weight, fetched, halo, dtype, self.normalize, self.improved,
                             self.loops)

    def whole(self, graph: DistEdgeIndex, weight: Tensor | None,
              dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        every = HaloRows(torch.empty(0))
        rowptr, col, value = self.local(graph, weight, every, None, dtype)
        return rowptr, col, (torch.ones(col.numel(), dtype=dtype, device=col.device)
                             if value is None else value)


@dataclass(frozen=True)
class SumCoefficients:
    """A sum or mean of ``x_j`` times an optional edge weight: ``mean`` of
    the messages (the generic path) or, with ``weighted_mean``, the weighted
    mean :math:`\\sum_j w_{ji} x_j / \\sum_j w_{ji}` (DistSAGEConv's)."""

    mean: bool
    weighted_mean: bool

    def key(self, dtype: torch.dtype, weight: Tensor | None) -> tuple[Any, ...]:
        return ("sum", self.mean, self.weighted_mean, weight is None)

    def local(self, graph: DistEdgeIndex, weight: Tensor | None, fetched: HaloRows,
              halo: LayerHalo | None, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor | None]:
        if fetched.mask is not None:
            graph, keep = graph.restrict(fetched.mask)
            weight = None if weight is None else weight[keep]
        if not self.mean:
            return graph.rowptr, graph.col, weight
        row = csr_row(graph.rowptr, graph.col)
        if weight is not None and self.weighted_mean:
            total = weight.new_zeros(graph.num_owned).index_add_(0, row, weight)
            return graph.rowptr, graph.col, weight / total.clamp(
                min=torch.finfo(weight.dtype).tiny)[row]
        count = (graph.rowptr[1:] - graph.rowptr[:-1]).clamp(min=1).to(dtype)
        value = 1.0 / count[row]
        return graph.rowptr, graph.col, value if weight is None else weight * value

    def whole(self, graph: DistEdgeIndex, weight: Tensor | None,
              dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        every = HaloRows(torch.empty(0))
        rowptr, col, value = self.local(graph, None if weight is None else weight.double(),
                                        every, None, torch.float64)
        return rowptr, col, (torch.ones(col.numel(), dtype=torch.float64, device=col.device)
                             if value is None else value)
