"""A rank's halo plan: which owned rows go to which peer, which halo rows come
from whom, and how the rows sent are made from the owned rows.

A plain plan sends owned rows as they are (a selection by ``send_idx``). A
pre-aggregated plan (see :mod:`pyg_dist.halo.cover`) sends rows made by a
sparse operator :math:`S` over the owned rows: some rows are one-hot (a row
sent as it is), others weighted sums (partial aggregations). Every user of a
plan calls :meth:`HaloPlan.gather` and :meth:`HaloPlan.scatter_back` (or a
:class:`~pyg_dist.halo.exchange.Route` made by ``Route.of_plan``), so
policies and codecs see ``[rows, F]`` tensors either way.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = ["HaloPlan", "SendOperator"]


@dataclass
class SendOperator:
    r"""The rows a rank sends as a sparse operator over its owned rows:
    :math:`\mathbf{R} = \mathbf{S}\mathbf{X}`, ``S`` a CSR of shape
    ``[S, num_owned]`` (row ``r`` = sum of ``value[k] * x[col[k]]`` over
    ``k in rowptr[r]:rowptr[r+1]``). Backward is :math:`\mathbf{S}^\top`.

    Attributes:
        rowptr: ``[S + 1]`` int64 row pointers.
        col: ``[nnz]`` int64 owned rows.
        value: ``[nnz]`` float64 coefficients (cast to the rows' dtype).
    """

    rowptr: Tensor
    col: Tensor
    value: Tensor

    @property
    def num_rows(self) -> int:
        return self.rowptr.numel() - 1

    def row(self) -> Tensor:
        """``[nnz]`` the sent row of every entry."""
        counts = self.rowptr[1:] - self.rowptr[:-1]
        return torch.repeat_interleave(
            torch.arange(self.num_rows, device=self.col.device), counts)

    def gather(self, x: Tensor) -> Tensor:
        """``S @ x``: ``[S, *]`` rows from ``x`` (``[num_owned, *]``)."""
        value = self.value.to(x.dtype).view(-1, *[1] * (x.dim() - 1))
        out = x.new_zeros((self.num_rows, *x.shape[1:]))
        return out.index_add_(0, self.row(), x.index_select(0, self.col) * value)

    def scatter_back(self, grad: Tensor, num_owned: int) -> Tensor:
        """``S^T @ grad``: ``[num_owned, *]`` from ``grad`` (``[S, *]``)."""
        value = self.value.to(grad.dtype).view(-1, *[1] * (grad.dim() - 1))
        out = grad.new_zeros((num_owned, *grad.shape[1:]))
        return out.index_add_(0, self.col, grad.index_select(0, self.row()) * value)

    def select(self, rows: Tensor) -> SendOperator:
        """The operator of the sent rows in ``rows`` (``[S]`` bool) only."""
        counts = (self.rowptr[1:] - self.rowptr[:-1])[rows]
        entries = rows.index_select(0, self.row()) if self.col.numel() else rows[:0]
        rowptr = torch.zeros(counts.numel() + 1, dtype=torch.long, device=counts.device)
        torch.cumsum(counts, 0, out=rowptr[1:])
        return SendOperator(rowptr, self.col[entries], self.value[entries])

    def to(self, device: torch.device | str) -> SendOperator:
        return SendOperator(self.rowptr.to(device), self.col.to(device), self.value.to(device))


@dataclass
class HaloPlan:
    """Who sends what to whom, seen from one rank.

    Attributes:
        rank: This rank.
        world_size: Number of ranks.
        send_idx: ``[S]`` int64, owned rows to send, the rows for peer 0 first,
            then peer 1, ...
        send_counts: Rows sent to each peer (``world_size`` ints, 0 for self).
        recv_counts: Halo rows received from each peer; the halo rows from peer
            ``q`` are contiguous, at ``sum(recv_counts[:q])``.
        halo_global_id: ``[H]`` int64, global id of each halo row.
        send_global_id: ``[S]`` int64, global id of each sent row (``-1``
            for a partial sum).
        send_op: How the sent rows are made from the owned rows;
            :obj:`None` for the selection by ``send_idx`` (a plain plan; a
            pre-aggregated plan has an empty ``send_idx``).
        partial_send: Partial sums among the rows sent to each peer (the
            last rows of each peer's block); :obj:`None` for none.
        partial_recv: Partial sums among the halo rows from each peer (the
            last rows of each peer's block); :obj:`None` for none.
    """

    rank: int
    world_size: int
    send_idx: Tensor
    send_counts: list[int]
    recv_counts: list[int]
    halo_global_id: Tensor
    send_global_id: Tensor
    send_op: SendOperator | None = None
    partial_send: list[int] | None = None
    partial_recv: list[int] | None = None
    _peers: dict[str, Tensor] = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_halo(self) -> int:
        return sum(self.recv_counts)

    @property
    def num_send(self) -> int:
        return sum(self.send_counts)

    @property
    def pre_aggregated(self) -> bool:
        """Whether sent rows are made by a :class:`SendOperator` (partial sums)."""
        return self.send_op is not None

    def gather(self, x: Tensor, rows: Tensor | None = None) -> Tensor:
        """The rows to send made from ``x`` (``[num_owned, *]``): ``[S, *]``,
        or the sent rows in ``rows`` (``[S]`` bool) only."""
        if self.send_op is None:
            return x.index_select(0, self.send_idx if rows is None else self.send_idx[rows])
        op = self.send_op if rows is None else self.send_op.select(rows)
        return op.gather(x)

    def scatter_back(self, grad: Tensor, num_owned: int, rows: Tensor | None = None) -> Tensor:
        """The gradient of the owned rows (``[num_owned, *]``) from that of
        the sent rows (``[S, *]``, or those in ``rows`` only): the adjoint of
        :meth:`gather`."""
        if self.send_op is None:
            idx = self.send_idx if rows is None else self.send_idx[rows]
            out = grad.new_zeros((num_owned, *grad.shape[1:]))
            return out.index_add_(0, idx, grad)
        op = self.send_op if rows is None else self.send_op.select(rows)
        return op.scatter_back(grad, num_owned)

    def partial_counts(self, send: list[bool] | None = None,
                       recv: list[bool] | None = None) -> tuple[int, int]:
        """Partial sums sent and received in all, over the peers whose blocks
        move (``send``/``recv`` per peer; :obj:`None`: all)."""
        sent = self.partial_send or [0] * self.world_size
        got = self.partial_recv or [0] * self.world_size
        send = send or [True] * self.world_size
        recv = recv or [True] * self.world_size
        return (sum(n for n, s in zip(sent, send) if s),
                sum(n for n, r in zip(got, recv) if r))

    @property
    def device(self) -> torch.device:
        return self.send_idx.device

    @property
    def send_peer(self) -> Tensor:
        """``[S]`` the peer each sent row goes to."""
        return self._peer_of("send", self.send_counts)

    @property
    def halo_peer(self) -> Tensor:
        """``[H]`` the peer each halo row comes from."""
        return self._peer_of("halo", self.recv_counts)

    def _peer_of(self, key: str, counts: list[int]) -> Tensor:
        if key not in self._peers:
            peers = torch.arange(self.world_size, device=self.device)
            self._peers[key] = torch.repeat_interleave(
                peers, torch.tensor(counts, device=self.device)
            )
        return self._peers[key]

    @staticmethod
    def from_pointers(
        rank: int,
        send_idx: Tensor,
        send_ptr: Tensor,
        halo_ptr: Tensor,
        halo_global_id: Tensor,
        owned_global_id: Tensor,
    ) -> HaloPlan:
        send_counts = (send_ptr[1:] - send_ptr[:-1]).tolist()
        recv_counts = (halo_ptr[1:] - halo_ptr[:-1]).tolist()
        return HaloPlan(
            rank=rank,
            world_size=len(send_counts),
            send_idx=send_idx,
            send_counts=send_counts,
            recv_counts=recv_counts,
            halo_global_id=halo_global_id,
            send_global_id=owned_global_id[send_idx],
        )

    def to(self, device: torch.device | str) -> HaloPlan:
        return HaloPlan(
            self.rank,
            self.world_size,
            self.send_idx.to(device),
            self.send_counts,
            self.recv_counts,
            self.halo_global_id.to(device),
            self.send_global_id.to(device),
            None if self.send_op is None else self.send_op.to(device),
            self.partial_send,
            self.partial_recv,
        )
