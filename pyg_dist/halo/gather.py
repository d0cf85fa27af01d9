r"""Rows of a distributed node matrix by global node id: :func:`gather`.

A rank that needs the rows of arbitrary nodes (the ends of its supervision
edges, their negatives) asks their owners for them. Owners are found through
a directory spread over the ranks: the entry of global id :math:`g` lives on
rank :math:`\lfloor g / B \rfloor` with :math:`B = \lceil N / P \rceil`, and
holds the owner of :math:`g` and its row there. The directory is built once
per graph (one exchange of every owned id), so no rank ever holds a table of
the whole graph.

One gather is three exchanges forward (the ids to their directory ranks and
the answers back, the rows' positions to their owners) and the rows back,
and one backward (the rows' gradients to their owners, which sum them into
the gradient of their own rows). An id asked several times is asked once.
Rows this rank owns never cross the network. The ledger books the traffic
in direction :data:`~pyg_dist.halo.ledger.GATHER` (``"eval"`` for an
evaluation's gathers): ``gather/ids`` (the ids and their answers, int64),
``gather/rows`` and ``gather/grads``.

The bytes are known before any row moves (:func:`gather_bytes`): on
:math:`P` ranks, a rank whose gather asks :math:`A` distinct ids of other
ranks' directory shares and :math:`R` distinct rows of other owners, of
:math:`b` bytes each, sends and has sent on its behalf

.. math::
    16(P - 1) + 24A + 8R + 2Rb

bytes (two exchanges of counts, 8 bytes per peer each; each id asked, 8
bytes, and answered, 16; each row's position, 8; the row forward and its
gradient back), and :math:`16(P - 1) + 24A + 8R` for
:func:`referenced`. Building the directory, once per graph, sends
:math:`8(P - 1) + 24D` with :math:`D` the rank's owned ids whose entries
live on another rank (:func:`directory_bytes`).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pyg_dist.halo.comm import exchange_rows
from pyg_dist.halo.exchange import HaloChannel, as_rows
from pyg_dist.halo.ledger import GATHER
from pyg_dist.runtime import distributed

#: The key of the graph's directory in its cache (:meth:`~pyg_dist.DistEdgeIndex.cached`).
DIRECTORY = "gather/directory"

__all__ = ["gather", "referenced", "Directory", "GatherPlan", "GatherCount", "count",
           "gather_bytes", "directory_bytes"]


def _move(channel: HaloChannel, rows: Tensor, send_counts: list[int],
          recv_counts: list[int], layer: str, direction: str = GATHER) -> Tensor:
    """Sends ``rows`` to the peers (``send_counts``, this rank's own count
    zero) and receives ``sum(recv_counts)`` rows; books them under ``layer``
    in ``direction``."""
    # a tag of its own per exchange name (the channel hands them out in order of
    # first use, alike on every rank); "fwd" is only the slot of the tag
    tag = channel.tag(layer, "fwd")
    start = time.perf_counter()
    out = exchange_rows(rows.contiguous(), send_counts, recv_counts, channel.group,
                        channel.transport, tag=tag)
    assert isinstance(out, Tensor), "a synchronous exchange returns a tensor"
    row_bytes = math.prod(rows.shape[1:]) * rows.element_size()
    channel.ledger.record(layer, direction, bytes_sent=sum(send_counts) * row_bytes,
                          bytes_recv=sum(recv_counts) * row_bytes, exchanges=1,
                          seconds=time.perf_counter() - start)
    return out


def _by_peer(peer: Tensor, world: int) -> tuple[Tensor, list[int]]:
    """The order that sorts ``peer`` (stable) and the count per peer."""
    order = torch.argsort(peer, stable=True)
    counts = torch.bincount(peer, minlength=world).tolist()
    return order, counts


def _split_self(order: Tensor, peer: Tensor, counts: list[int], rank: int
                ) -> tuple[Tensor, Tensor, list[int]]:
    """``order`` split into the entries for other peers (in peer order) and
    those for this rank, and the counts with this rank's set to zero."""
    mine = peer[order] == rank
    counts = list(counts)
    counts[rank] = 0
    return order[~mine], order[mine], counts


def _counts_from(channel: HaloChannel, counts: list[int], layer: str,
                 direction: str = GATHER) -> list[int]:
    """The counts every peer sends this rank, given what it sends each."""
    world = len(counts)
    ones = [1] * world
    ones_recv = list(ones)
    rank = channel.plan.rank
    ones[rank] = ones_recv[rank] = 0
    sent = torch.tensor(counts, dtype=torch.int64).view(world, 1)
    mine = torch.cat([sent[:rank], sent[rank + 1:]])
    got = _move(channel, mine, ones, ones_recv, layer, direction).view(-1).tolist()
    got.insert(rank, counts[rank])
    return got


@dataclass
class Directory:
    """This rank's share of the directory of owners: entry :math:`i` is
    global id ``first + i``.

    Attributes:
        first (int): The first global id of this rank's share.
        block (int): Ids per rank, :math:`B = \\lceil N / P \\rceil`.
        owner (torch.Tensor): ``[B]`` int64 owner rank of each id.
        row (torch.Tensor): ``[B]`` int64 row of each id on its owner.
    """

    first: int
    block: int
    owner: Tensor
    row: Tensor

    @staticmethod
    def build(channel: HaloChannel, global_id: Tensor, num_nodes: int,
              direction: str = GATHER) -> Directory:
        """The directory, from every rank's owned ids. Collective.

        Args:
            channel (HaloChannel): The graph's channel (its group and ledger).
            global_id (torch.Tensor): ``[num_owned]`` global id of each owned row.
            num_nodes (int): Nodes of the whole graph.
            direction (str, optional): The ledger direction of its traffic.
                (default: :obj:`"gather"`)
        """
        rank, world = channel.plan.rank, channel.plan.world_size
        block = max(1, -(-num_nodes // world))
        ids = global_id.cpu().to(torch.int64)
        dest = ids // block
        order, counts = _by_peer(dest, world)
        away, here, counts = _split_self(order, dest, counts, rank)
        rows = torch.arange(ids.numel(), dtype=torch.int64)
        entries = torch.stack([ids, rows, torch.full_like(ids, rank)], dim=1)
        got = _move(channel, entries[away], counts,
                    _counts_from(channel, counts, "gather/ids", direction), "gather/ids",
                    direction)
        got = torch.cat([got, entries[here]])
        owner = torch.full((block,), -1, dtype=torch.int64)
        row = torch.full((block,), -1, dtype=torch.int64)
        owner[got[:, 0] - rank * block] = got[:, 2]
        row[got[:, 0] - rank * block] = got[:, 1]
        return Directory(rank * block, block, owner, row)

    def locate(self, channel: HaloChannel, ids: Tensor,
               direction: str = GATHER) -> tuple[Tensor, Tensor]:
        """The owner and row of each of ``ids`` (global ids, no repeats
        needed). Collective.

        Args:
            channel (HaloChannel): The graph's channel.
            ids (torch.Tensor): ``[U]`` int64 global ids.
            direction (str, optional): The ledger direction of its traffic.
                (default: :obj:`"gather"`)
        """
        rank, world = channel.plan.rank, channel.plan.world_size
        dest = ids // self.block
        order, counts = _by_peer(dest, world)
        away, here, counts = _split_self(order, dest, counts, rank)
        recv_counts = _counts_from(channel, counts, "gather/ids", direction)
        asked = _move(channel, ids[away].view(-1, 1), counts, recv_counts, "gather/ids",
                      direction).view(-1)
        answer = torch.stack([self.owner[asked - self.first], self.row[asked - self.first]], 1)
        back = _move(channel, answer, recv_counts, counts, "gather/ids", direction)
        mine = ids[here] - self.first
        out = torch.empty(ids.numel(), 2, dtype=torch.int64)
        out[away] = back
        out[here] = torch.stack([self.owner[mine], self.row[mine]], 1)
        if bool((out[:, 0] < 0).any()):
            bad = ids[out[:, 0] < 0][:5].tolist()
            raise ValueError(f"'gather' was asked for global ids {bad} that no rank owns; ask "
                             f"for ids below the graph's number of nodes")
        return out[:, 0], out[:, 1]


@dataclass
class GatherPlan:
    """Which rows one gather moves, seen from this rank.

    Attributes:
        unique (torch.Tensor): ``[U]`` distinct global ids asked.
        inverse (torch.Tensor): ``[len(index)]`` position of each asked id in ``unique``.
        order (torch.Tensor): ``[U - L]`` the remote ids' positions in ``unique``, owner by owner.
        local (torch.Tensor): ``[L]`` the owned ids' positions in ``unique``.
        local_row (torch.Tensor): ``[L]`` their rows here.
        ask_counts (list[int]): Rows asked of each owner.
        serve (torch.Tensor): ``[S]`` rows of this rank the peers asked for, peer by peer.
        serve_counts (list[int]): Rows each peer asked for.
        direction (str): The ledger direction of its traffic.
    """

    unique: Tensor
    inverse: Tensor
    order: Tensor
    local: Tensor
    local_row: Tensor
    ask_counts: list[int]
    serve: Tensor
    serve_counts: list[int]
    direction: str = GATHER

    @staticmethod
    def create(channel: HaloChannel, directory: Directory, index: Tensor,
               direction: str = GATHER) -> GatherPlan:
        """The plan of gathering rows ``index`` (global ids), its traffic
        booked in ``direction``. Collective."""
        rank, world = channel.plan.rank, channel.plan.world_size
        unique, inverse = torch.unique(index.cpu().to(torch.int64), return_inverse=True)
        owner, row = directory.locate(channel, unique, direction)
        order, counts = _by_peer(owner, world)
        away, here, counts = _split_self(order, owner, counts, rank)
        serve_counts = _counts_from(channel, counts, "gather/ids", direction)
        serve = _move(channel, row[away].view(-1, 1), counts, serve_counts, "gather/ids",
                      direction)
        return GatherPlan(unique, inverse, away, here, row[here], counts, serve.view(-1),
                          serve_counts, direction)


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, h: Tensor, channel: HaloChannel,  # type: ignore[override]
                plan: GatherPlan) -> Tensor:
        ctx.channel, ctx.plan, ctx.num_owned = channel, plan, h.size(0)
        device = h.device
        sent = as_rows(h.index_select(0, plan.serve.to(device)))
        got = _move(channel, sent, plan.serve_counts, plan.ask_counts, "gather/rows",
                    plan.direction)
        rows = h.new_empty((plan.unique.numel(), *h.shape[1:]))
        rows[plan.order.to(device)] = got.view(-1, *h.shape[1:])
        rows[plan.local.to(device)] = h.index_select(0, plan.local_row.to(device))
        return rows.index_select(0, plan.inverse.to(device))

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        plan: GatherPlan = ctx.plan
        device = grad.device
        per_id = grad.new_zeros((plan.unique.numel(), *grad.shape[1:]))
        per_id.index_add_(0, plan.inverse.to(device), grad)
        out = grad.new_zeros((ctx.num_owned, *grad.shape[1:]))
        out.index_add_(0, plan.local_row.to(device), per_id[plan.local.to(device)])
        back = _move(ctx.channel, as_rows(per_id[plan.order.to(device)]), plan.ask_counts,
                     plan.serve_counts, "gather/grads", plan.direction)
        out.index_add_(0, plan.serve.to(device), back.view(-1, *grad.shape[1:]))
        return out, None, None


def gather(h: Tensor, index: Tensor, graph: Any = None, direction: str = GATHER) -> Tensor:
    r"""The rows of the global node ids ``index`` of a node matrix ``h``
    whose rows are the nodes this rank owns, gathered from their owners:
    ``h_global[index]``, differentiable (each row's gradient is summed back
    on its owner). On a plain ``edge_index`` (one process) it is
    ``h[index]``. Collective on a :class:`~pyg_dist.DistEdgeIndex`: every
    rank calls it, with its own ``index`` (empty ones too).

    Args:
        h (torch.Tensor): This rank's rows (``[num_owned, *]``).
        index (torch.Tensor): Global node ids (int64, any number, repeats allowed).
        graph (DistEdgeIndex, optional): The graph whose ranks own the rows
            (``data.edge_index``); :obj:`None` or a tensor: one process.
            (default: :obj:`None`)
        direction (str, optional): The ledger direction of its traffic:
            :obj:`"gather"` in training, :obj:`"eval"` in evaluation.
            (default: :obj:`"gather"`)

    Shapes:
        - **input:** ``h`` :math:`(N_{own}, *)`, ``index`` :math:`(K)`
        - **output:** :math:`(K, *)`, the dtype of ``h``
    """
    channel = getattr(graph, "channel", None)
    if channel is None:
        return h.index_select(0, index)
    if h.size(0) != graph.num_owned:
        raise ValueError(f"'gather' got {h.size(0)} rows for a rank that owns "
                         f"{graph.num_owned} nodes; pass the rows of this rank's nodes (a "
                         f"model's output on data.edge_index)")
    plan = GatherPlan.create(channel, _directory(graph, direction), index, direction)
    return _Gather.apply(h, channel, plan)


def referenced(index: Tensor, graph: Any, num_owned: int, direction: str = GATHER) -> Tensor:
    """``[num_owned]`` bool: which of this rank's rows some rank's ``index``
    (global ids) names. Collective on a :class:`~pyg_dist.DistEdgeIndex`
    (the ids travel as in :func:`gather`, the rows do not).

    Args:
        index (torch.Tensor): Global node ids asked by this rank.
        graph (DistEdgeIndex, optional): The graph; :obj:`None` or a tensor:
            one process (row :math:`i` is node :math:`i`).
        num_owned (int): This rank's rows.
        direction (str, optional): The ledger direction of its traffic.
            (default: :obj:`"gather"`)
    """
    out = torch.zeros(num_owned, dtype=torch.bool, device=index.device)
    channel = getattr(graph, "channel", None)
    if channel is None:
        out[index] = True
        return out
    plan = GatherPlan.create(channel, _directory(graph, direction), index, direction)
    out[plan.serve.to(out.device)] = True
    out[plan.local_row.to(out.device)] = True
    return out


@dataclass
class GatherCount:
    """What one gather of this rank asks for, counted before it runs
    (:func:`count`).

    Attributes:
        asked (int): Distinct ids whose directory entry lives on another rank.
        remote (int): Distinct ids another rank owns (rows that cross the network).
    """

    asked: int
    remote: int


def count(graph: Any, indices: list[Tensor]) -> list[GatherCount]:
    """What a gather of each of ``indices`` (global ids) asks of other
    ranks, found without moving a row: the owners of every id named by any
    of them are located once (in direction ``"eval"``: no training
    traffic; a directory built for it is not kept). Collective on a
    :class:`~pyg_dist.DistEdgeIndex`; one process asks nothing.

    Args:
        graph (DistEdgeIndex): The graph whose ranks own the rows.
        indices (list[torch.Tensor]): The ids of each gather.
    """
    channel = getattr(graph, "channel", None)
    if channel is None:
        return [GatherCount(0, 0) for _ in indices]
    rank = channel.plan.rank
    # the graph's directory if built; else one of its own, left behind so
    # that the first gather still builds (and books) the graph's
    directory = (_directory(graph, "eval") if graph.has_cached(DIRECTORY) else
                 Directory.build(channel, graph.global_id, _num_nodes(graph), "eval"))
    named = torch.cat([i.cpu().to(torch.int64) for i in indices]) if indices else \
        torch.empty(0, dtype=torch.int64)
    every = torch.unique(named)
    owner = directory.locate(channel, every, "eval")[0]
    out = []
    for index in indices:
        ids = torch.unique(index.cpu().to(torch.int64))
        remote = owner[torch.searchsorted(every, ids)] != rank
        out.append(GatherCount(int((ids // directory.block != rank).sum()),
                               int(remote.sum())))
    return out


def gather_bytes(counted: GatherCount, world_size: int, row_bytes: int = 0,
                 rows: bool = True) -> int:
    """Bytes this rank's gather books in the ledger, sent by it or on its
    behalf (the answers to its ids): :math:`16(P - 1) + 24A + 8R` for the
    ids, plus :math:`2Rb` for the rows and their gradients.

    Args:
        counted (GatherCount): Its :math:`A` and :math:`R` (:func:`count`).
        world_size (int): Ranks :math:`P`.
        row_bytes (int, optional): Bytes per row :math:`b`. (default: :obj:`0`)
        rows (bool, optional): Whether rows move (:func:`gather`, with its
            backward) or only ids (:func:`referenced`). (default: :obj:`True`)
    """
    ids = 16 * (world_size - 1) + 24 * counted.asked + 8 * counted.remote
    return ids + (2 * counted.remote * row_bytes if rows else 0)


def directory_bytes(graph: Any) -> int:
    """Bytes this rank sends building the directory (once per graph, on its
    first gather): :math:`8(P - 1) + 24D`; 0 once it is built, and in one
    process. Collective on a :class:`~pyg_dist.DistEdgeIndex` (every rank
    has built it or none has).

    Args:
        graph (DistEdgeIndex): The graph.
    """
    channel = getattr(graph, "channel", None)
    if channel is None or graph.has_cached(DIRECTORY):
        return 0
    rank, world = channel.plan.rank, channel.plan.world_size
    block = max(1, -(-_num_nodes(graph) // world))
    away = int((graph.global_id.cpu().to(torch.int64) // block != rank).sum())
    return 8 * (world - 1) + 24 * away


def _directory(graph: Any, direction: str) -> Directory:
    """The graph's directory, built on first use (booked in ``direction``)."""
    return graph.cached(DIRECTORY, lambda: Directory.build(
        graph.channel, graph.global_id, _num_nodes(graph), direction))


def _num_nodes(graph: Any) -> int:
    """Nodes of the whole graph: the largest global id of any rank, plus one
    (a graph built by hand may leave no meta behind)."""
    local = int(graph.global_id.max()) + 1 if graph.num_owned else 0
    return int(distributed.all_reduce_values([local], "max", graph.channel.group)[0])
