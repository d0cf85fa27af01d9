"""A part's :class:`~pyg_dist.partitioning.plan.LocalPart`, built on the rank
that owns the part from its in-edges and owned nodes after the shuffle.

The conventions are those of :mod:`pyg_dist.partitioning.plan` (local rows in
ascending global id, in-edges by target row then input position, halo
grouped per owning peer in rank order and ascending id within, each peer's
send list equal to its peer's halo block from it), so the result equals
``PartPlan.create(edge_index, part, P).build(p)`` for the same assignment.
"""
from __future__ import annotations

import numpy as np
import torch

from pyg_dist.distributed import Group
from pyg_dist.partitioning.plan import LocalPart, ptr
from pyg_dist.partitioning.shuffle import exchange, fetch

__all__ = ["build_local_part"]


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
    src, dst, edge_id, src_part = in_edges
    in_edges.clear()
    row = np.searchsorted(owned, dst)
    loops = src == dst
    del dst
    self_loops = np.bincount(row[loops], minlength=owned.size)
    del loops
    order = _by_row_then_position(row, edge_id)
    in_degree = np.bincount(row, minlength=owned.size)
    del row
    src = src[order]  # one at a time: each old array is freed before the next copy
    edge_id = edge_id[order]
    src_part = src_part[order]
    del order

    remote = src_part != p
    key = src_part[remote].astype(np.int64) * num_nodes + src[remote]
    halo_key = np.unique(key)  # by (owner, id)
    halo_owner, halo = np.divmod(halo_key, num_nodes)
    col = np.empty(src.size, dtype=np.int64)
    col[~remote] = np.searchsorted(owned, src[~remote])
    col[remote] = owned.size + np.searchsorted(halo_key, key)
    del key, halo_key

    (asked,), from_peer = exchange([halo], halo_owner, num_parts, group, grouped=True)
    degrees = fetch(halo, halo_owner, lambda ids: _degrees(ids, owned, in_degree, self_loops),
                    num_parts, group)
    lp = LocalPart(
        global_id=torch.from_numpy(owned),
        rowptr=ptr(in_degree),
        col=torch.from_numpy(col),
        edge_id=torch.from_numpy(np.ascontiguousarray(edge_id, dtype=np.int64)),
        halo_global_id=torch.from_numpy(np.ascontiguousarray(halo)),
        halo_ptr=ptr(np.bincount(halo_owner, minlength=num_parts)),
        send_idx=torch.from_numpy(np.searchsorted(owned, asked).astype(np.int64)),
        send_ptr=ptr(from_peer),
        halo_in_degree=torch.from_numpy(np.ascontiguousarray(degrees[:, 0])),
        halo_self_loops=torch.from_numpy(np.ascontiguousarray(degrees[:, 1])),
    )
    return lp, int(remote.sum())


def _by_row_then_position(row: np.ndarray, edge_id: np.ndarray) -> np.ndarray:
    """The order of the edges by (local target row, input position): one
    argsort of the int64 key ``row * E' + position`` (two keys when it could
    overflow)."""
    span = int(edge_id.max()) + 1 if edge_id.size else 1
    if int(row.max(initial=0)) + 1 >= 2**63 // span:
        return np.lexsort((edge_id, row))
    return np.argsort(row * span + edge_id)


def _degrees(ids: np.ndarray, owned: np.ndarray, in_degree: np.ndarray,
             self_loops: np.ndarray) -> np.ndarray:
    """``[k, 2]`` in-degree and self-loops of owned nodes ``ids``."""
    rows = np.searchsorted(owned, ids)
    return np.stack([in_degree[rows], self_loops[rows]], axis=1).astype(np.int64)
