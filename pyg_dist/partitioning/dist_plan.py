"""A part's :class:`~pyg_dist.partitioning.plan.LocalPart`, built on the rank
that owns the part from its in-edges and owned nodes after the shuffle.

The conventions are those of :mod:`pyg_dist.partitioning.plan` (local rows in
ascending global id, in-edges by target row then input position, halo
grouped per owning peer in rank order and ascending id within, each peer's
send list equal to its peer's halo block from it), so the result equals
``PartPlan.create(edge_index, part, P).build(p)`` for the same assignment.

The steps (shuffle, sort by row, halo from the remote sources, columns, send
lists, halo degrees) are separate functions: the heterogeneous builder
(:mod:`pyg_dist.partitioning.dist_hetero`) composes them per relation and
shares one halo per source node type.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from pyg_dist.partitioning.dist_cut import lookup
from pyg_dist.partitioning.plan import LocalPart, ptr
from pyg_dist.partitioning.shuffle import Blocks, exchange, exchange_rounds, fetch, rounds
from pyg_dist.runtime.distributed import Group

__all__ = ["build_local_part", "shuffle_in_edges", "shuffle_nodes", "SortedEdges",
           "sort_in_edges", "Halo", "send_lists", "halo_degrees"]


def shuffle_in_edges(src: np.ndarray, dst: np.ndarray, first_edge: int, part: np.ndarray,
                     nodes: Blocks, rank: int, num_parts: int, group: Group = None,
                     offsets: tuple[int, int] = (0, 0)) -> list[np.ndarray]:
    """This rank's slice of edges sent to the parts of their targets, a chunk
    per round: the in-edges of this rank's part as ``[src, dst, edge_id,
    src_part]``. Collective.

    Args:
        src (numpy.ndarray): ``[e]`` sources of the slice.
        dst (numpy.ndarray): ``[e]`` targets of the slice.
        first_edge (int): Position of the slice's first edge in the input.
        part (numpy.ndarray): Part of each node of this rank's block of ``nodes``.
        nodes (Blocks): The node blocks ``part`` is spread over.
        rank (int): This rank.
        num_parts (int): Parts (= ranks of ``group``).
        group (torch.distributed.ProcessGroup, optional): The process group.
            (default: :obj:`None`)
        offsets (tuple[int, int], optional): Added to ``src`` and ``dst`` to
            find their parts (the offsets of a relation's node types in the
            homogeneous view); the ids sent are ``src`` and ``dst`` as given.
            (default: :obj:`(0, 0)`)
    """
    src_part = lookup(src + offsets[0] if offsets[0] else src, part, nodes, rank, group)
    dst_part = lookup(dst + offsets[1] if offsets[1] else dst, part, nodes, rank, group)
    slices = rounds(src.size, group)
    counts = np.stack([np.bincount(dst_part[sl], minlength=num_parts) for sl in slices])

    def grouped(r: int) -> list[np.ndarray]:
        sl = slices[r]
        order = np.argsort(dst_part[sl], kind="stable")
        return [src[sl][order], dst[sl][order], order + np.int64(first_edge + sl.start),
                src_part[sl][order]]

    received, _ = exchange_rounds(counts, grouped,
                                  [src.dtype, dst.dtype, np.int64, src_part.dtype], group)
    return received


def shuffle_nodes(read: Callable[[str, int, int], np.ndarray], names: Sequence[str],
                  span: tuple[int, int], part: np.ndarray, num_parts: int,
                  group: Group = None) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
    """The ascending ids of this rank's part's nodes and their attributes,
    sent from the ranks whose blocks hold them, one attribute at a time.
    Collective.

    Args:
        read (Callable): ``read(name, lo, hi)`` returns rows ``lo:hi`` of
            attribute ``name``.
        names (Sequence[str]): The attributes.
        span (tuple[int, int]): This rank's block of ids ``lo:hi``.
        part (numpy.ndarray): ``[hi - lo]`` part of each node of the block.
        num_parts (int): Parts (= ranks of ``group``).
        group (torch.distributed.ProcessGroup, optional): The process group.
            (default: :obj:`None`)
    """
    lo, hi = span
    (ids,), _ = exchange([np.arange(lo, hi, dtype=np.int64)], part, num_parts, group)
    order = np.argsort(ids)
    node: dict[str, torch.Tensor] = {}
    for name in sorted(names):
        (rows,), _ = exchange([read(name, lo, hi)], part, num_parts, group)
        node[name] = torch.from_numpy(np.ascontiguousarray(rows[order]))
    return ids[order], node


@dataclass
class SortedEdges:
    """A part's in-edges by (local target row, input position).

    Attributes:
        src: ``[e]`` source ids.
        edge_id: ``[e]`` positions in the input (int64).
        src_part: ``[e]`` part of each source.
        in_degree: ``[n]`` in-edges of each owned row.
        self_loops: ``[n]`` in-edges of each owned row that are self-loops.
    """

    src: np.ndarray
    edge_id: np.ndarray
    src_part: np.ndarray
    in_degree: np.ndarray
    self_loops: np.ndarray

    def remote_keys(self, p: int, num_src: int) -> np.ndarray:
        """``src_part * num_src + src`` of the edges whose source lies in
        another part than ``p`` (sorting them sorts by (owner, id))."""
        remote = self.src_part != p
        return self.src_part[remote].astype(np.int64) * num_src + self.src[remote]

    def columns(self, p: int, owned: np.ndarray, halo: Halo) -> np.ndarray:
        """``[e]`` column of each edge over ``[owned ; halo]`` of its source set."""
        remote = self.src_part != p
        col = np.empty(self.src.size, dtype=np.int64)
        col[~remote] = np.searchsorted(owned, self.src[~remote])
        col[remote] = owned.size + np.searchsorted(halo.key, self.remote_keys(p, halo.num_src))
        return col


def sort_in_edges(owned: np.ndarray, in_edges: list[np.ndarray],
                  loops: bool = True) -> SortedEdges:
    """Part ``p``'s in-edges ``[src, dst, edge_id, src_part]`` (emptied here,
    so that each array is freed once used) sorted by (local target row,
    input position), with each owned row's in-degree and self-loops
    (counted only if ``loops``: sources and targets are of one node set)."""
    src, dst, edge_id, src_part = in_edges
    in_edges.clear()
    row = np.searchsorted(owned, dst)
    self_loops = np.bincount(row[src == dst], minlength=owned.size) if loops else \
        np.zeros(owned.size, dtype=np.int64)
    del dst
    order = _by_row_then_position(row, edge_id)
    in_degree = np.bincount(row, minlength=owned.size)
    del row
    src = src[order]  # one at a time: each old array is freed before the next copy
    edge_id = np.ascontiguousarray(edge_id[order], dtype=np.int64)
    src_part = src_part[order]
    return SortedEdges(src, edge_id, src_part, in_degree, self_loops)


@dataclass
class Halo:
    """A part's halo of one source node set, grouped by owner in rank order,
    ascending id within.

    Attributes:
        key: ``[h]`` sorted ``owner * num_src + id``.
        ids: ``[h]`` ids of the halo nodes.
        owner: ``[h]`` part owning each.
        num_src: Nodes of the source set.
    """

    key: np.ndarray
    ids: np.ndarray
    owner: np.ndarray
    num_src: int

    @staticmethod
    def of(keys: Sequence[np.ndarray], num_src: int) -> Halo:
        """The union of the remote sources ``keys`` (:meth:`SortedEdges.remote_keys`)."""
        key = np.unique(keys[0] if len(keys) == 1 else np.concatenate(keys)) if keys else \
            np.empty(0, dtype=np.int64)
        owner, ids = np.divmod(key, num_src)
        return Halo(key, ids, owner, num_src)


def send_lists(halo: Halo, owned: np.ndarray, num_parts: int,
               group: Group = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``send_idx`` (owned rows each peer asks for, peers in rank order) and
    ``send_ptr``: every part sends each peer that peer's halo block from it.
    Collective."""
    (asked,), from_peer = exchange([halo.ids], halo.owner, num_parts, group, grouped=True)
    return torch.from_numpy(np.searchsorted(owned, asked).astype(np.int64)), ptr(from_peer)


def halo_degrees(halo: Halo, owned: np.ndarray, in_degree: np.ndarray,
                 self_loops: np.ndarray, num_parts: int, group: Group = None) -> np.ndarray:
    """``[h, 2]`` in-degree and self-loops of the halo nodes, as their
    owners count them (``in_degree``, ``self_loops`` over the ``owned`` rows).
    Collective."""
    def answer(ids: np.ndarray) -> np.ndarray:
        rows = np.searchsorted(owned, ids)
        return np.stack([in_degree[rows], self_loops[rows]], axis=1).astype(np.int64)

    return fetch(halo.ids, halo.owner, answer, num_parts, group)


def build_local_part(p: int, owned: np.ndarray, in_edges: list[np.ndarray], num_nodes: int,
                     num_parts: int, group: Group = None) -> tuple[LocalPart, int]:
    """Part ``p``'s local graph and halo plan, and the number of its in-edges
    whose source lies in another part. Collective: the send lists and the
    halo nodes' degrees come from their owners.

    Args:
        p (int): This rank's part.
        owned (numpy.ndarray): ``[n]`` ascending global ids of the owned nodes.
        in_edges (list[numpy.ndarray]): The part's in-edges as ``[src, dst,
            edge_id, src_part]`` (``[e]`` each: global source, global target,
            position in the input, part of the source); emptied here, so
            that each array is freed once used.
        num_nodes (int): Nodes of the whole graph.
        num_parts (int): Parts (= ranks of ``group``).
        group (torch.distributed.ProcessGroup, optional): The process group.
            (default: :obj:`None`)
    """
    edges = sort_in_edges(owned, in_edges)
    halo = Halo.of([edges.remote_keys(p, num_nodes)], num_nodes)
    col = edges.columns(p, owned, halo)
    send_idx, send_ptr = send_lists(halo, owned, num_parts, group)
    degrees = halo_degrees(halo, owned, edges.in_degree, edges.self_loops, num_parts, group)
    lp = LocalPart(
        global_id=torch.from_numpy(owned),
        rowptr=ptr(edges.in_degree),
        col=torch.from_numpy(col),
        edge_id=torch.from_numpy(edges.edge_id),
        halo_global_id=torch.from_numpy(np.ascontiguousarray(halo.ids)),
        halo_ptr=ptr(np.bincount(halo.owner, minlength=num_parts)),
        send_idx=send_idx,
        send_ptr=send_ptr,
        halo_in_degree=torch.from_numpy(np.ascontiguousarray(degrees[:, 0])),
        halo_self_loops=torch.from_numpy(np.ascontiguousarray(degrees[:, 1])),
    )
    return lp, int(col.size - int((edges.src_part == p).sum()))


def _by_row_then_position(row: np.ndarray, edge_id: np.ndarray) -> np.ndarray:
    """The order of the edges by (local target row, input position): one
    argsort of the int64 key ``row * E' + position`` (two keys when it could
    overflow)."""
    span = int(edge_id.max()) + 1 if edge_id.size else 1
    if int(row.max(initial=0)) + 1 >= 2**63 // span:
        return np.lexsort((edge_id, row))
    return np.argsort(row * span + edge_id)
