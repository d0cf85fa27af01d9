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
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pyg_dist.ops.csr import ptr_from_sorted

__all__ = ["LocalPart", "build_parts"]


@dataclass
class LocalPart:
    """One part's graph, as stored on disk (all tensors int64).

    Attributes:
        global_id: ``[n]`` global ids of the owned nodes (ascending).
        rowptr, col: local CSR ``[n + 1]`` / ``[e]``; row = owned target,
            column over ``[owned ; halo]``.
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


def build_parts(edge_index: Tensor, part: Tensor, num_parts: int) -> list[LocalPart]:
    """Builds every part's :class:`LocalPart` from ``part`` (``[N]``, the owner
    of each node), vectorised over edges; loops only over parts."""
    num_nodes = part.numel()
    src, dst = edge_index[0], edge_index[1]
    # Owned order: by part, then global id. local[v] = v's row in its part.
    node_order = torch.sort(part * num_nodes + torch.arange(num_nodes)).indices
    node_ptr = ptr_from_sorted(part[node_order], num_parts)
    local = torch.empty(num_nodes, dtype=torch.long)
    local[node_order] = torch.arange(num_nodes) - node_ptr[part[node_order]]

    halo = _halo_lists(src, dst, part, num_parts)
    in_degree = torch.bincount(dst, minlength=num_nodes)
    self_loops = torch.bincount(dst[src == dst], minlength=num_nodes)

    # Edges by (owning part, local target row), stable in input order.
    edge_part = part[dst]
    edge_order = torch.sort(edge_part * num_nodes + local[dst], stable=True).indices
    edge_ptr = ptr_from_sorted(edge_part[edge_order], num_parts)

    parts = []
    for p in range(num_parts):
        owned = node_order[node_ptr[p] : node_ptr[p + 1]]
        edges = edge_order[edge_ptr[p] : edge_ptr[p + 1]]
        halo_ids, halo_ptr, send_idx, send_ptr = halo(p, local)
        col = _local_columns(src[edges], part, p, local, halo_ids, owned.numel())
        parts.append(
            LocalPart(
                global_id=owned,
                rowptr=ptr_from_sorted(local[dst[edges]], owned.numel()),
                col=col,
                edge_id=edges,
                halo_global_id=halo_ids,
                halo_ptr=halo_ptr,
                send_idx=send_idx,
                send_ptr=send_ptr,
                halo_in_degree=in_degree[halo_ids],
                halo_self_loops=self_loops[halo_ids],
            )
        )
    return parts


def _halo_lists(src: Tensor, dst: Tensor, part: Tensor, num_parts: int):  # noqa: ANN202
    """Returns ``halo(p, local)`` giving part ``p``'s halo ids and pointers and
    its send lists, from the unique (receiver, sender, node) triples of cut edges."""
    num_nodes = part.numel()
    cut = part[src] != part[dst]
    receiver, node = part[dst[cut]], src[cut]
    sender = part[node]
    # Receiver side: sorted by (receiver, sender, node).
    key = torch.unique((receiver * num_parts + sender) * num_nodes + node)
    recv_rs, recv_node = key // num_nodes, key % num_nodes
    recv_p, recv_q = recv_rs // num_parts, recv_rs % num_parts
    recv_ptr = ptr_from_sorted(recv_p, num_parts)
    # Sender side: the same triples sorted by (sender, receiver, node).
    send_key = torch.sort((recv_q * num_parts + recv_p) * num_nodes + recv_node).values
    send_qp, send_node = send_key // num_nodes, send_key % num_nodes
    send_q, send_p = send_qp // num_parts, send_qp % num_parts
    send_part_ptr = ptr_from_sorted(send_q, num_parts)

    def halo(p: int, local: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        lo, hi = int(recv_ptr[p]), int(recv_ptr[p + 1])
        halo_ids = recv_node[lo:hi]
        halo_ptr = ptr_from_sorted(recv_q[lo:hi], num_parts)
        lo, hi = int(send_part_ptr[p]), int(send_part_ptr[p + 1])
        send_idx = local[send_node[lo:hi]]
        send_ptr = ptr_from_sorted(send_p[lo:hi], num_parts)
        return halo_ids, halo_ptr, send_idx, send_ptr

    return halo


def _local_columns(
    sources: Tensor, part: Tensor, p: int, local: Tensor, halo_ids: Tensor, num_owned: int
) -> Tensor:
    """Local column of each source: its row if owned, else ``num_owned`` + its halo slot."""
    col = local[sources].clone()
    remote = part[sources] != p
    if bool(remote.any()):
        # halo_ids is sorted by (owner, id); search within that order.
        owner_key = part[halo_ids] * part.numel() + halo_ids
        slot = torch.searchsorted(owner_key, part[sources[remote]] * part.numel() + sources[remote])
        col[remote] = num_owned + slot
    return col
