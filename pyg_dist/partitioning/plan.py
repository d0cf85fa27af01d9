"""From a node-to-part assignment to each part's local graph and halo plan.

Conventions (the facts that exact distributed aggregation rests on):

* part ``p`` owns the nodes assigned to it, in ascending global id; its local
  row ``i`` is its ``i``-th owned node;
* an edge belongs to the part owning its target, so every in-edge of an owned
  node is local and aggregation needs no partial sums from other parts;
* the sources of those edges owned elsewhere are the *halo*: local columns
  ``num_owned ...``, grouped by owning peer (contiguous per peer, peers in rank
  order) and in ascending global id within a peer;
* what part ``q`` sends to ``p`` is exactly ``p``'s halo block from ``q``, in the
  same order, so one message per peer needs no index on the wire.

Memory: :class:`PartPlan` keeps what is proportional to the nodes (owner and
local row of each node, degrees, every part's halo ids) and one byte or two per
edge (the part that owns it); :meth:`PartPlan.build` then makes one part at a
time from chunked passes over the edges, so the whole graph is never copied.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from pyg_dist.partitioning.arrays import bincount_chunked, chunks, small_int_dtype

__all__ = ["LocalPart", "PartPlan", "halo_of", "send_list", "ptr"]


@dataclass
class LocalPart:
    """One part's graph, as stored on disk (all tensors int64).

    Attributes:
        global_id: ``[n]`` global ids of the owned nodes (ascending).
        rowptr: ``[n + 1]`` local CSR row pointers; row = owned target.
        col: ``[e]`` local CSR columns, over ``[owned ; halo]``.
        edge_id: ``[e]`` position of each local edge in the input ``edge_index``.
        halo_global_id: ``[h]`` global ids of the halo nodes.
        halo_ptr: ``[P + 1]``: halo rows from peer ``q`` are ``halo_ptr[q]:halo_ptr[q+1]``.
        send_idx: ``[s]`` owned local rows to send, peer after peer.
        send_ptr: ``[P + 1]``: rows for peer ``q`` are ``send_idx[send_ptr[q]:send_ptr[q+1]]``.
        halo_in_degree: ``[h]`` number of in-edges of each halo node (all of them,
            self-loops and duplicates included), for GCN normalisation.
        halo_self_loops: ``[h]`` number of self-loops of each halo node.
    """

    global_id: Tensor
    rowptr: Tensor
    col: Tensor
    edge_id: Tensor
    halo_global_id: Tensor
    halo_ptr: Tensor
    send_idx: Tensor
    send_ptr: Tensor
    halo_in_degree: Tensor
    halo_self_loops: Tensor


@dataclass
class PartPlan:
    """What every part's build needs to know about the whole graph.

    Attributes:
        src: ``[E]`` int64 view of the input ``edge_index``'s first row.
        dst: ``[E]`` int64 view of its second row.
        part: ``[N]`` owner of each node (narrowest integer dtype).
        local: ``[N]`` int64 row of each node in its owner.
        edge_owner: ``[E]`` part owning each edge (its target's owner).
        in_degree: ``[N]`` int64 in-edges per node.
        self_loops: ``[N]`` int64 self-loops per node.
        halos: per part, ``[h]`` int64 halo ids sorted by (owner, id).
        edge_cut: Edges whose ends lie in different parts.
    """

    src: np.ndarray
    dst: np.ndarray
    part: np.ndarray
    local: np.ndarray
    edge_owner: np.ndarray
    in_degree: np.ndarray
    self_loops: np.ndarray
    halos: list[np.ndarray]
    edge_cut: int

    @property
    def num_parts(self) -> int:
        return len(self.halos)

    @property
    def part_sizes(self) -> list[int]:
        return np.bincount(self.part, minlength=self.num_parts).tolist()

    @property
    def halo_sizes(self) -> list[int]:
        return [h.size for h in self.halos]

    @staticmethod
    def create(edge_index: Tensor, part: Tensor, num_parts: int) -> PartPlan:
        """Plans the parts of ``edge_index`` (``[2, E]``, int64, contiguous)
        under the assignment ``part`` (``[N]``)."""
        src, dst = edge_index[0].numpy(), edge_index[1].numpy()
        owner = part.numpy().astype(small_int_dtype(num_parts), copy=False)
        num_nodes = owner.size
        edge_owner = np.empty(src.size, dtype=owner.dtype)
        in_degree = np.zeros(num_nodes, dtype=np.int64)
        self_loops = np.zeros(num_nodes, dtype=np.int64)
        for sl in chunks(src.size):
            s, d = src[sl], dst[sl]
            np.take(owner, d, out=edge_owner[sl])
            in_degree += np.bincount(d, minlength=num_nodes)
            self_loops += np.bincount(d[s == d], minlength=num_nodes)
        local = np.empty(num_nodes, dtype=np.int64)
        for p in range(num_parts):
            owned = np.flatnonzero(owner == p)
            local[owned] = np.arange(owned.size)
        halos, edge_cut = [], 0
        for p in range(num_parts):
            halo, cut = halo_of(p, src, edge_owner, owner)
            halos.append(halo)
            edge_cut += cut
        return PartPlan(src, dst, owner, local, edge_owner, in_degree, self_loops, halos,
                        edge_cut)

    def build(self, p: int) -> LocalPart:
        """Part ``p``'s :class:`LocalPart`; temporaries are this part's edges."""
        num_parts, num_nodes = self.num_parts, self.part.size
        owned = np.flatnonzero(self.part == p)
        edge_id, rowptr = self._in_edges(p, owned.size)
        halo = self.halos[p]
        slot = np.empty(num_nodes, dtype=np.int64)  # column of each halo node
        slot[halo] = np.arange(owned.size, owned.size + halo.size)
        col = np.empty(edge_id.size, dtype=np.int64)
        for sl in chunks(edge_id.size):
            sources = self.src[edge_id[sl]]
            remote = self.part[sources] != p
            col[sl] = np.where(remote, slot[sources], self.local[sources])
        del slot
        send_node, send_ptr = self._send_list(p)
        return LocalPart(
            global_id=torch.from_numpy(owned),
            rowptr=torch.from_numpy(rowptr),
            col=torch.from_numpy(col),
            edge_id=torch.from_numpy(edge_id),
            halo_global_id=torch.from_numpy(halo),
            halo_ptr=ptr(np.bincount(self.part[halo], minlength=num_parts)),
            send_idx=torch.from_numpy(self.local[send_node]),
            send_ptr=send_ptr,
            halo_in_degree=torch.from_numpy(self.in_degree[halo]),
            halo_self_loops=torch.from_numpy(self.self_loops[halo]),
        )

    def _in_edges(self, p: int, num_owned: int) -> tuple[np.ndarray, np.ndarray]:
        """Part ``p``'s edges by (local target row, input position), and its row
        pointers: one int64 key ``row * E + position`` per edge, sorted in place."""
        num_edges = self.src.size
        edges = np.flatnonzero(self.edge_owner == p)
        if num_owned * num_edges >= 2**63:  # keys would overflow: sort indirectly
            rows = self.local[self.dst[edges]]
            order = np.argsort(rows, kind="stable")
            return edges[order], ptr(np.bincount(rows, minlength=num_owned)).numpy()
        key = np.empty(edges.size, dtype=np.int64)
        for sl in chunks(edges.size):
            key[sl] = self.local[self.dst[edges[sl]]] * num_edges + edges[sl]
        del edges
        key.sort()
        rowptr = ptr(bincount_chunked(key, num_owned, divisor=num_edges)).numpy()
        for sl in chunks(key.size):
            np.remainder(key[sl], num_edges, out=key[sl])
        return key, rowptr

    def _send_list(self, q: int) -> tuple[np.ndarray, Tensor]:
        """The nodes part ``q`` sends, peer after peer, and the pointers per peer."""
        return send_list(self.halos, self.part, q)


def send_list(halos: list[np.ndarray], owner: np.ndarray, q: int) -> tuple[np.ndarray, Tensor]:
    """The nodes part ``q`` sends, peer after peer (each peer's halo block
    from ``q``, ``halos`` sorted by (owner, id) as :func:`halo_of` makes
    them), and the ``[P + 1]`` pointers per peer."""
    blocks, counts = [], []
    for halo in halos:
        owners = owner[halo]
        lo, hi = np.searchsorted(owners, [q, q + 1])
        blocks.append(halo[lo:hi])
        counts.append(hi - lo)
    nodes = np.concatenate(blocks) if blocks else np.empty(0, dtype=np.int64)
    return nodes, ptr(np.asarray(counts, dtype=np.int64))


def halo_of(p: int, src: np.ndarray, edge_owner: np.ndarray,
          owner: np.ndarray) -> tuple[np.ndarray, int]:
    """Part ``p``'s halo ids sorted by (owner, id), and how many of its
    in-edges come from other parts."""
    seen = np.zeros(owner.size, dtype=bool)
    cut = 0
    for sl in chunks(edge_owner.size):
        sources = src[sl][edge_owner[sl] == p]
        remote = sources[owner[sources] != p]
        seen[remote] = True
        cut += remote.size
    halo = np.flatnonzero(seen)
    order = np.argsort(owner[halo], kind="stable")  # by owner, ascending id within
    return halo[order], cut


def ptr(counts: np.ndarray) -> Tensor:
    """``[len(counts) + 1]`` int64 pointers from counts."""
    ptr = torch.zeros(len(counts) + 1, dtype=torch.long)
    torch.cumsum(torch.from_numpy(np.asarray(counts, dtype=np.int64)), 0, out=ptr[1:])
    return ptr
