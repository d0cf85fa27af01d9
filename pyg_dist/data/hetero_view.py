"""The homogeneous view of a rank's part of a heterogeneous graph, as
:meth:`torch_geometric.data.HeteroData.to_homogeneous` makes it of the whole
graph: node types one after the other, ``node_type`` and ``edge_type``
vectors, one halo plan (every type's halo, regrouped by peer)."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pyg_dist.data.dist_data import DistData, DistEdgeIndex
from pyg_dist.halo.exchange import HaloChannel
from pyg_dist.halo.layer import HaloRegistry
from pyg_dist.halo.plan import HaloPlan
from pyg_dist.ops.csr import ptr_from_sorted

__all__ = ["homogeneous_view"]


def homogeneous_view(data: Any) -> DistData:
    r"""``data`` (a :class:`~pyg_dist.DistHeteroData`) as one homogeneous
    :class:`~pyg_dist.DistData`: the owned
    nodes of every type (types in ``data.node_types`` order, ascending id
    within a type), ``global_id`` the node's id in
    ``HeteroData.to_homogeneous()`` of the partitioned graph, the attributes
    every node (edge) type has with one trailing shape, and ``node_type``
    (``edge_type``), indices into ``data.node_types`` (``data.edge_types``).
    Halo rows come from each peer contiguously (types in order within a
    peer); the halo in-degrees count every edge type, as on the homogeneous
    graph. Exchanges are booked in ``data``'s ledger.

    Args:
        data (DistHeteroData): This rank's part of a heterogeneous graph.
    """
    types = data.node_types
    counts = [data[t].num_nodes for t in types]
    local_offset = dict(zip(types, _offsets(counts)))
    global_offset = dict(zip(types, _offsets([data.meta.types.num_nodes[t] for t in types])))
    plans = {t: data.channel(t).plan for t in types}
    plan, halo_pos = _merged_plan(data, plans, local_offset, global_offset)
    num_owned = sum(counts)
    rows, cols, edge_ids, kinds = [], [], [], []
    for r, e in enumerate(data.edge_types):
        rel = data[e].edge_index
        src, dst = e[0], e[2]
        remote = rel.col >= rel.num_src
        col = local_offset[src] + rel.col
        col[remote] = num_owned + halo_pos[src][rel.col[remote] - rel.num_src]
        rows.append(local_offset[dst] + rel.row())
        cols.append(col)
        edge_ids.append(rel.edge_id)
        kinds.append(torch.full_like(rel.col, r))
    row, col = torch.cat(rows), torch.cat(cols)
    order = torch.sort(row, stable=True).indices
    channel = HaloChannel(plan, data.ledger, data.group, _tags=data.channel(types[0])._tags)
    degree = torch.cat([data.node_plan(t)["halo_in_degree"] for t in types])
    loops = torch.cat([data.node_plan(t)["halo_self_loops"] for t in types])
    by_peer = torch.argsort(torch.cat([halo_pos[t] for t in types]))
    global_id = torch.cat([global_offset[t] + data[t].global_id for t in types])
    edge_index = DistEdgeIndex(ptr_from_sorted(row[order], num_owned), col[order],
                               torch.cat(edge_ids)[order], degree[by_peer], loops[by_peer],
                               channel, global_id, HaloRegistry(data.registry.default))
    node_attrs = _common([{k: getattr(data[t], k) for k in data[t].keys()} for t in types])
    node_attrs["node_type"] = torch.repeat_interleave(torch.arange(len(types)),
                                                      torch.tensor(counts))
    edge_attrs = _common([{k: getattr(data[e], k) for k in data[e].keys()}
                          for e in data.edge_types])
    edge_attrs = {k: v[order] for k, v in edge_attrs.items()}
    edge_attrs["edge_type"] = torch.cat(kinds)[order]
    return DistData(edge_index, node_attrs, edge_attrs, data.meta, data.rank, data.folder)


def _offsets(counts: list[int]) -> list[int]:
    return torch.tensor([0, *counts]).cumsum(0)[:-1].tolist()


def _merged_plan(data: Any, plans: dict[str, HaloPlan], local_offset: dict[str, int],
                 global_offset: dict[str, int]) -> tuple[HaloPlan, dict[str, Tensor]]:
    """One plan of every type's halo, peer after peer and type after type
    within a peer, and where each type's halo rows land in it."""
    types = list(plans)
    world = plans[types[0]].world_size
    starts = {t: _offsets(p.recv_counts) for t, p in plans.items()}
    send_starts = {t: _offsets(p.send_counts) for t, p in plans.items()}
    halo_pos = {t: torch.empty(p.num_halo, dtype=torch.long) for t, p in plans.items()}
    send_idx, halo_gid, send_counts, recv_counts = [], [], [], []
    position = 0
    for q in range(world):
        sent = received = 0
        for t in types:
            p = plans[t]
            lo, n = starts[t][q], p.recv_counts[q]
            halo_pos[t][lo:lo + n] = torch.arange(position, position + n)
            halo_gid.append(global_offset[t] + p.halo_global_id[lo:lo + n])
            position += n
            received += n
            s_lo, s_n = send_starts[t][q], p.send_counts[q]
            send_idx.append(local_offset[t] + p.send_idx[s_lo:s_lo + s_n])
            sent += s_n
        send_counts.append(sent)
        recv_counts.append(received)
    owned = torch.cat([global_offset[t] + data[t].global_id for t in types])
    sends = torch.cat(send_idx)
    plan = HaloPlan(plans[types[0]].rank, world, sends, send_counts, recv_counts,
                    torch.cat(halo_gid), owned[sends])
    return plan, halo_pos


def _common(stores: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """The attributes every store has, with one trailing shape and dtype, concatenated."""
    if not stores:
        return {}
    keys = [k for k in stores[0] if k not in ("edge_index", "global_id", "num_nodes")]
    out = {}
    for key in keys:
        values = [s.get(key) for s in stores]
        tensors = [v for v in values if isinstance(v, Tensor)]
        if len(tensors) == len(values) and all(
                v.shape[1:] == tensors[0].shape[1:] and v.dtype == tensors[0].dtype
                for v in tensors):
            out[key] = torch.cat(tensors)
    return out
