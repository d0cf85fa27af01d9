r"""Pre-aggregation: a linear aggregation's halo on a minimum vertex cover.

For an aggregation that is linear in its inputs with fixed coefficients
(:math:`\mathbf{h}_t = \sum_s c_{s,t}\,\mathbf{x}_s`: GCN's normalised sum,
SAGE's sum or mean, GIN's sum), peer ``p`` need not send the row of every
source ``q`` reads: for a target ``t`` of ``q`` it may send the partial sum
:math:`\sum_{s \in p} c_{s,t}\,\mathbf{x}_s` instead. The cut edges from
``p`` to ``q`` form a bipartite graph; on any vertex cover of it the
aggregation stays exact (a covered source goes as a row, a covered target
receives one partial sum over its *uncovered* sources from ``p``), and a
minimum cover (:func:`~pyg_dist.partitioning.cover.min_cover`) sends the
fewest rows.

The receiver drives it: every in-edge of ``q``'s nodes is local to ``q``, so
``q`` computes the cover of each pair ``(p, q)`` and the coefficients, and
tells every ``p``, in one setup exchange (booked in the ledger as ``cover``),
how to make each row of its new block from the rows of its plain block. The
sender's rows become a :class:`~pyg_dist.halo.plan.SendOperator` :math:`S`:
forward sends :math:`S\mathbf{X}`, backward adds :math:`S^\top` times the
gradients. Every policy and codec sees ``[rows, F]`` tensors as before.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from pyg_dist.halo.exchange import HaloChannel
from pyg_dist.halo.plan import HaloPlan, SendOperator
from pyg_dist.ops.csr import csr_row, ptr_from_sorted
from pyg_dist.partitioning.cover import min_cover

__all__ = ["CoveredAdjacency", "cover_adjacency", "COVER"]

#: The ledger name of the setup exchange.
COVER = "cover"


@dataclass
class CoveredAdjacency:
    """A rank's adjacency over a pre-aggregated halo, and the plan that fills it.

    Attributes:
        plan: The pre-aggregated plan: per peer, the covered sources' rows
            (in halo order), then one partial sum per covered target.
        rowptr: ``[num_owned + 1]`` int64 row pointers.
        col: ``[e']`` columns over ``[owned ; pre-aggregated halo]``.
        value: ``[e']`` coefficients (aggregate with reduce ``"sum"``).
        edge: ``[e']`` the input edge of each entry, ``-1`` for the entry
            that reads a partial sum.
    """

    plan: HaloPlan
    rowptr: Tensor
    col: Tensor
    value: Tensor
    edge: Tensor


def cover_adjacency(channel: HaloChannel, rowptr: Tensor, col: Tensor,
                    value: Tensor) -> CoveredAdjacency:
    r"""The adjacency ``(rowptr, col, value)`` (over ``[owned ; halo]`` of
    ``channel``'s plan, reduce ``"sum"``) rewritten over a pre-aggregated halo.

    Collective: every rank of the channel's group calls it (one exchange of
    three int64 per peer, then one of three float64 per entry of the send
    operators, booked as :data:`COVER`).

    Args:
        channel (HaloChannel): The graph's channel (its plain plan).
        rowptr (torch.Tensor): ``[num_owned + 1]`` int64 row pointers.
        col (torch.Tensor): ``[e]`` int64 columns over ``[owned ; halo]``.
        value (torch.Tensor): ``[e]`` coefficients, fixed (no gradient).

    Shapes:
        - **input:** rowptr :math:`(|\mathcal{V}_{owned}| + 1)`, col and
          value :math:`(|\mathcal{E}_{local}|)`
        - **output:** a :class:`CoveredAdjacency`
    """
    plan = channel.plan
    assert not plan.pre_aggregated, "pre-aggregate a plain plan"
    num_owned, device = rowptr.numel() - 1, col.device
    value = value.detach()
    row = csr_row(rowptr, col)
    blocks = _cover_blocks(plan, row.cpu().numpy(), col.cpu().numpy(), num_owned)
    send_op, send_counts, partial_send, send_global_id = _tell_senders(
        channel, blocks, value.cpu().double().numpy())
    # The receiver's adjacency: owned and covered-source edges, then one
    # entry per partial sum.
    keep = torch.from_numpy(blocks.keep).to(device)
    new_col = col.clone()
    remote = col >= num_owned
    moved = torch.from_numpy(blocks.halo_column).to(device)
    new_col[remote] = num_owned + moved[col[remote] - num_owned]
    edges = torch.arange(col.numel(), device=device)
    slot_row = torch.from_numpy(blocks.slot_target).to(device)
    slot_col = num_owned + torch.from_numpy(blocks.slot_column).to(device)
    all_row = torch.cat([row[keep], slot_row])
    order = torch.sort(all_row, stable=True).indices
    derived = HaloPlan(
        rank=plan.rank, world_size=plan.world_size,
        send_idx=plan.send_idx.new_empty(0), send_counts=send_counts,
        recv_counts=blocks.recv_counts,
        halo_global_id=torch.from_numpy(blocks.global_id(plan.halo_global_id.cpu().numpy()))
        .to(device),
        send_global_id=send_global_id.to(device), send_op=send_op.to(device),
        partial_send=partial_send, partial_recv=blocks.partial_recv,
    )
    return CoveredAdjacency(
        plan=derived,
        rowptr=ptr_from_sorted(all_row[order], num_owned),
        col=torch.cat([new_col[keep], slot_col])[order],
        value=torch.cat([value[keep], value.new_ones(slot_row.numel())])[order],
        edge=torch.cat([edges[keep], torch.full_like(slot_row, -1)])[order],
    )


@dataclass
class _Blocks:
    """The receiver's side of the cover: which local edges stay, each halo
    row's column in the new halo, the partial-sum entries, and what to tell
    each sender (``entries[p]``: ``[n, 3]`` rows of (new row within ``p``'s
    block, position within ``p``'s plain block, local edge or ``-1``))."""

    keep: np.ndarray
    halo_column: np.ndarray
    slot_target: np.ndarray
    slot_column: np.ndarray
    recv_counts: list[int]
    partial_recv: list[int]
    entries: list[np.ndarray]
    sources: list[np.ndarray]

    def global_id(self, halo_global_id: np.ndarray) -> np.ndarray:
        """``[H']`` global id of each new halo row (``-1`` for a partial sum)."""
        out = []
        for sources, partial in zip(self.sources, self.partial_recv):
            out += [halo_global_id[sources], np.full(partial, -1, dtype=np.int64)]
        return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


def _cover_blocks(plan: HaloPlan, row: np.ndarray, col: np.ndarray,
                  num_owned: int) -> _Blocks:
    """Each peer's minimum cover of its cut edges into this rank's nodes."""
    num_halo = plan.num_halo
    halo_ptr = np.concatenate([[0], np.cumsum(plan.recv_counts)]).astype(np.int64)
    edge = np.flatnonzero(col >= num_owned)  # local edges from halo rows
    halo, target = col[edge] - num_owned, row[edge]
    peer = np.searchsorted(halo_ptr, halo, side="right") - 1
    keep = np.ones(col.size, dtype=bool)
    halo_column = np.full(num_halo, -1, dtype=np.int64)
    slot_target, slot_column, entries, sources = [], [], [], []
    recv_counts, partial_recv, offset = [], [], 0
    for p in range(plan.world_size):
        mine = np.flatnonzero(peer == p)
        if mine.size == 0:
            recv_counts.append(0)
            partial_recv.append(0)
            entries.append(np.empty((0, 3), dtype=np.int64))
            sources.append(np.empty(0, dtype=np.int64))
            continue
        left, right, covered_left, covered_right = min_cover(halo[mine], target[mine])
        srcs, tgts = left[covered_left], right[covered_right]
        halo_column[srcs] = offset + np.arange(srcs.size)
        covered = np.zeros(num_halo, dtype=bool)
        covered[srcs] = True
        folded = mine[~covered[halo[mine]]]  # edges summed into partial sums
        keep[edge[folded]] = False
        slot = np.searchsorted(tgts, target[folded])
        assert np.array_equal(tgts[slot], target[folded]), "a cover covers every cut edge"
        entries.append(np.concatenate([
            np.stack([np.arange(srcs.size), srcs - halo_ptr[p],
                      np.full(srcs.size, -1)], axis=1),
            np.stack([srcs.size + slot, halo[folded] - halo_ptr[p], edge[folded]], axis=1),
        ]).astype(np.int64))
        slot_target.append(tgts)
        slot_column.append(offset + srcs.size + np.arange(tgts.size))
        sources.append(srcs)
        recv_counts.append(int(srcs.size + tgts.size))
        partial_recv.append(int(tgts.size))
        offset += srcs.size + tgts.size
    empty = np.empty(0, dtype=np.int64)
    return _Blocks(keep, halo_column,
                   np.concatenate(slot_target).astype(np.int64) if slot_target else empty,
                   np.concatenate(slot_column).astype(np.int64) if slot_column else empty,
                   recv_counts, partial_recv, entries, sources)


def _tell_senders(channel: HaloChannel, blocks: _Blocks, value: np.ndarray
                  ) -> tuple[SendOperator, list[int], list[int], Tensor]:
    """Sends every peer how to make its new block for this rank, and builds
    this rank's send operator from what its peers sent: the operator, the
    rows and partial sums sent to each peer, and each sent row's global id."""
    plan = channel.plan
    sizes = torch.tensor([[n, e.shape[0], k] for m, n, e, k in zip(
        plan.recv_counts, blocks.recv_counts, blocks.entries, blocks.partial_recv) if m],
        dtype=torch.long)
    to_peer = [int(n > 0) for n in plan.recv_counts]  # to those we receive from
    from_peer = [int(n > 0) for n in plan.send_counts]
    got = channel.move(sizes.view(-1, 3), to_peer, from_peer, COVER, "fwd")
    assert isinstance(got, Tensor), "a synchronous move returns a tensor"
    told = iter(got.view(-1, 3).tolist())
    rows_for, entries_for, partial_for = [], [], []
    for n in plan.send_counts:
        size = next(told) if n else [0, 0, 0]
        rows_for.append(size[0])
        entries_for.append(size[1])
        partial_for.append(size[2])
    coefficient = np.concatenate([np.ones(1), value])  # -1 (a source row) reads 1.0
    payload = np.concatenate([np.stack([e[:, 0], e[:, 1], coefficient[e[:, 2] + 1]], axis=1)
                              for e in blocks.entries if e.size]
                             or [np.empty((0, 3))]).astype(np.float64)
    payload_rows = torch.zeros(payload.shape[0], 3, dtype=torch.float64)  # strides (3, 1)
    payload_rows.copy_(torch.from_numpy(payload))  # even without rows: no zero strides
    recv = channel.move(payload_rows, [e.shape[0] for e in blocks.entries],
                        entries_for, COVER, "fwd")
    assert isinstance(recv, Tensor), "a synchronous move returns a tensor"
    send_idx, send_gid = plan.send_idx.cpu(), plan.send_global_id.cpu()
    send_ptr = np.concatenate([[0], np.cumsum(plan.send_counts)]).astype(np.int64)
    row_offset = np.concatenate([[0], np.cumsum(rows_for)]).astype(np.int64)
    peer = np.repeat(np.arange(plan.world_size), entries_for)
    got_rows = recv.numpy()
    op_row = row_offset[peer] + got_rows[:, 0].astype(np.int64)
    position = send_ptr[peer] + got_rows[:, 1].astype(np.int64)
    order = np.argsort(op_row, kind="stable")
    op_row, position = op_row[order], position[order]
    num_rows = int(row_offset[-1])
    operator = SendOperator(
        ptr_from_sorted(torch.from_numpy(op_row), num_rows),
        send_idx[torch.from_numpy(position)],
        torch.from_numpy(got_rows[order, 2].copy()),
    )
    global_id = torch.full((num_rows,), -1, dtype=torch.long)
    for q in range(plan.world_size):  # a peer's source rows come first in its block
        sources = rows_for[q] - partial_for[q]
        first = operator.rowptr[row_offset[q] : row_offset[q] + sources]
        global_id[row_offset[q] : row_offset[q] + sources] = send_gid[
            torch.from_numpy(position[first.numpy()])]
    return operator, rows_for, partial_for, global_id
