"""Partitioning a heterogeneous graph (``HeteroData``): one cut of all node
types together, then per part and type the owned rows, per edge type the
in-edges as a local CSR, and per node type one halo plan shared by every
edge type that reads it.

Conventions, beside those of :mod:`pyg_dist.partitioning.plan`:

* the cut runs on the homogeneous view (node type ``t``'s node ``i`` is node
  ``offset[t] + i``, offsets in the order of ``data.node_types``), so a part
  owns nodes of every type;
* within a type, a part's local row ``i`` is its ``i``-th owned node of the
  type, in ascending id within the type;
* an edge of type ``(s, r, d)`` belongs to the part owning its target; its
  column runs over type ``s``'s ``[owned ; halo]`` rows, where the halo of
  ``s`` is the union over every edge type with source ``s`` of the remote
  sources: relations that read the same source type share one exchange.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from pyg_dist.datasets.graph import check_relation, edge_key, is_hetero, is_mask, type_sizes
from pyg_dist.partitioning.arrays import small_int_dtype
from pyg_dist.partitioning.cut import METHODS, coarse_metis_cut, metis_cut, random_cut
from pyg_dist.partitioning.io import FORMAT_VERSION, HeteroTypes, PartitionMeta, write_folder
from pyg_dist.partitioning.plan import halo_of, ptr, send_list

__all__ = ["partition_hetero", "edge_key", "is_hetero"]

EdgeType = tuple[str, str, str]


def partition_hetero(
    data: Any,
    num_parts: int,
    out_dir: str | os.PathLike,
    method: str = "metis",
    seed: int = 0,
    overwrite: bool = False,
) -> PartitionMeta:
    r"""Cuts a :class:`~torch_geometric.data.HeteroData` into ``num_parts``
    parts and writes one folder that :meth:`pyg_dist.DistHeteroData.load`
    reads; called by :func:`pyg_dist.partition` for heterogeneous input.

    The cut balances the node count of all types together (pymetis takes one
    balance constraint); the random cut also balances each type's training
    nodes. ``PartitionMeta.types`` records every type's size per part.

    Args:
        data (torch_geometric.data.HeteroData): The graph; every edge type
            needs ``edge_index``, every node type a node count (``num_nodes``
            or a node-level tensor such as ``x``).
        num_parts (int): Number of parts.
        out_dir (str or os.PathLike): Folder to create.
        method (str, optional): :obj:`"metis"`, :obj:`"metis-coarse"` or
            :obj:`"random"`. (default: :obj:`"metis"`)
        seed (int, optional): Seed of the cut. (default: :obj:`0`)
        overwrite (bool, optional): Replace an existing ``out_dir``.
            (default: :obj:`False`)
    """
    if method not in METHODS:
        raise ValueError(f"'partition' got method='{method}'; use one of {', '.join(METHODS)}")
    node_types, edge_types = list(data.node_types), [tuple(e) for e in data.edge_types]
    sizes = type_sizes(data)
    edges = {e: check_relation(data, e, sizes).to(torch.long).numpy() for e in edge_types}
    total = sum(sizes.values())
    if isinstance(num_parts, bool) or not isinstance(num_parts, int) or not \
            1 <= num_parts <= max(total, 1):
        raise ValueError(f"'partition' got num_parts={num_parts!r} for a graph of {total} "
                         f"nodes; choose 1 <= num_parts <= {total}")
    owner = _cut(data, node_types, sizes, edges, num_parts, method, seed)
    local = {t: _local_rows(owner[t], num_parts) for t in node_types}
    halos = {t: _halos(t, edges, owner, num_parts) for t in node_types}
    node_attrs = {t: _attributes(data[t], sizes[t]) for t in node_types}
    edge_attrs = {e: _attributes(data[e], edges[e].shape[1], edge=True) for e in edge_types}
    types = HeteroTypes(
        node_types=node_types,
        edge_types=[list(e) for e in edge_types],
        num_nodes=sizes,
        num_edges={edge_key(e): int(edges[e].shape[1]) for e in edge_types},
        part_sizes={t: np.bincount(owner[t], minlength=num_parts).tolist() for t in node_types},
        halo_sizes={t: [h.size for h in halos[t]] for t in node_types},
        edge_cut={edge_key(e): _edge_cut(edges[e], owner[e[0]], owner[e[2]])
                  for e in edge_types},
        node_attrs={t: sorted(node_attrs[t]) for t in node_types},
        edge_attrs={edge_key(e): sorted(edge_attrs[e]) for e in edge_types},
        train_sizes={t: torch.bincount(torch.from_numpy(owner[t].astype(np.int64))[
            node_attrs[t]["train_mask"]], minlength=num_parts).tolist()
            for t in node_types if is_mask(node_attrs[t].get("train_mask"))},
    )
    meta = PartitionMeta(
        num_parts=num_parts,
        num_nodes=total,
        num_edges=sum(types.num_edges.values()),
        edge_cut=sum(types.edge_cut.values()),
        part_sizes=np.sum([types.part_sizes[t] for t in node_types], axis=0).tolist(),
        halo_sizes=np.sum([types.halo_sizes[t] for t in node_types], axis=0).tolist(),
        train_sizes=np.sum(list(types.train_sizes.values()), axis=0).tolist()
        if types.train_sizes else [],
        method=method,
        seed=seed,
        fingerprint=_fingerprint(sizes, edges, node_attrs, edge_attrs),
        num_classes=_num_classes(node_attrs),
        node_attrs=sorted({f"{t}.{k}" for t in node_types for k in node_attrs[t]}),
        edge_attrs=sorted({f"{edge_key(e)}.{k}" for e in edge_types for k in edge_attrs[e]}),
        types=types,
    )
    plan = _HeteroPlan(owner, local, halos, edges, num_parts)
    parts = (_part_content(p, plan, meta, node_attrs, edge_attrs) for p in range(num_parts))
    write_folder(Path(out_dir), meta, parts, overwrite)
    return meta


class _HeteroPlan:
    """Owner and local row of every node of every type, each type's halos per
    part, and the edges of every type (numpy, int64)."""

    def __init__(self, owner: dict[str, np.ndarray], local: dict[str, np.ndarray],
                 halos: dict[str, list[np.ndarray]], edges: dict[EdgeType, np.ndarray],
                 num_parts: int) -> None:
        self.owner, self.local, self.halos, self.edges = owner, local, halos, edges
        self.num_parts = num_parts
        self.in_degree = {t: np.zeros(o.size, dtype=np.int64) for t, o in owner.items()}
        self.self_loops = {t: np.zeros(o.size, dtype=np.int64) for t, o in owner.items()}
        for (src_type, _, dst_type), (src, dst) in edges.items():
            self.in_degree[dst_type] += np.bincount(dst, minlength=owner[dst_type].size)
            if src_type == dst_type:
                self.self_loops[dst_type] += np.bincount(dst[src == dst],
                                                         minlength=owner[dst_type].size)

    def node_plan(self, t: str, p: int) -> dict[str, Tensor]:
        """Type ``t``'s owned ids and halo plan in part ``p`` (as
        ``plan.LocalPart``), with its halo rows' in-degrees and self-loops over
        every edge type (those of the homogeneous view)."""
        owner, halo = self.owner[t], self.halos[t][p]
        send_node, send_ptr = send_list(self.halos[t], owner, p)
        return {
            "global_id": torch.from_numpy(np.flatnonzero(owner == p)),
            "halo_global_id": torch.from_numpy(halo),
            "halo_ptr": ptr(np.bincount(owner[halo], minlength=self.num_parts)),
            "send_idx": torch.from_numpy(self.local[t][send_node]),
            "send_ptr": send_ptr,
            "halo_in_degree": torch.from_numpy(self.in_degree[t][halo]),
            "halo_self_loops": torch.from_numpy(self.self_loops[t][halo]),
        }

    def edge_plan(self, e: EdgeType, p: int) -> dict[str, Tensor]:
        """Edge type ``e``'s in-edges of part ``p``'s nodes as a local CSR over
        the source type's ``[owned ; halo]``, and its halo rows' in-degrees and
        self-loops in ``e`` (zero unless source and target type agree)."""
        src_type, _, dst_type = e
        src, dst = self.edges[e]
        edge_id = np.flatnonzero(self.owner[dst_type][dst] == p)
        rows = self.local[dst_type][dst[edge_id]]
        order = np.argsort(rows, kind="stable")  # by target row, input order within
        edge_id, rows = edge_id[order], rows[order]
        num_owned = int((self.owner[dst_type] == p).sum())
        halo = self.halos[src_type][p]
        num_src = int((self.owner[src_type] == p).sum())
        slot = np.full(self.owner[src_type].size, -1, dtype=np.int64)
        slot[halo] = np.arange(num_src, num_src + halo.size)
        sources = src[edge_id]
        remote = self.owner[src_type][sources] != p
        col = np.where(remote, slot[sources], self.local[src_type][sources])
        assert (col >= 0).all(), "every remote source lies in its type's halo"
        degree = np.zeros(halo.size, dtype=np.int64)
        loops = np.zeros(halo.size, dtype=np.int64)
        if src_type == dst_type:
            degree = np.bincount(dst, minlength=slot.size)[halo]
            loops = np.bincount(dst[src == dst], minlength=slot.size)[halo]
        return {
            "rowptr": ptr(np.bincount(rows, minlength=num_owned)),
            "col": torch.from_numpy(col),
            "edge_id": torch.from_numpy(edge_id),
            "halo_in_degree": torch.from_numpy(degree),
            "halo_self_loops": torch.from_numpy(loops),
        }


def _part_content(p: int, plan: _HeteroPlan, meta: PartitionMeta,
                  node_attrs: dict[str, dict[str, Tensor]],
                  edge_attrs: dict[EdgeType, dict[str, Tensor]]) -> dict[str, Any]:
    node, edge = {}, {}
    for t, attrs in node_attrs.items():
        graph = plan.node_plan(t, p)
        node[t] = {"graph": graph,
                   "attrs": {k: v[graph["global_id"]].contiguous() for k, v in attrs.items()}}
    for e, attrs in edge_attrs.items():
        graph = plan.edge_plan(e, p)
        edge[edge_key(e)] = {"graph": graph,
                             "attrs": {k: v[graph["edge_id"]].contiguous()
                                       for k, v in attrs.items()}}
    return {
        "format_version": FORMAT_VERSION,
        "partition_id": meta.partition_id,
        "part": p,
        "num_parts": meta.num_parts,
        "num_nodes": meta.num_nodes,
        "node_types": node,
        "edge_types": edge,
    }


def _cut(data: Any, node_types: list[str], sizes: dict[str, int],
         edges: dict[EdgeType, np.ndarray], num_parts: int, method: str,
         seed: int) -> dict[str, np.ndarray]:
    """The owner of every node of every type: one cut of the homogeneous view."""
    offset = dict(zip(node_types, np.cumsum([0] + [sizes[t] for t in node_types]).tolist()))
    total = sum(sizes.values())
    homogeneous = torch.from_numpy(np.concatenate(
        [edges[e] + np.array([[offset[e[0]]], [offset[e[2]]]]) for e in edges], axis=1)
        if edges else np.empty((2, 0), dtype=np.int64)).contiguous()
    balance = torch.cat([_train_mask(data, t, sizes[t]) for t in node_types])
    if method == "random":
        part = random_cut(total, num_parts, seed, balance if bool(balance.any()) else None)
    else:
        cut = metis_cut if method == "metis" else coarse_metis_cut
        part = cut(homogeneous, total, num_parts, seed, balance)
    owner = part.numpy().astype(small_int_dtype(num_parts))
    return {t: owner[offset[t]:offset[t] + sizes[t]] for t in node_types}


def _train_mask(data: Any, t: str, size: int) -> Tensor:
    mask = getattr(data[t], "train_mask", None)
    if mask is None or not is_mask(mask):
        return torch.zeros(size, dtype=torch.bool)
    return mask.cpu()


def _local_rows(owner: np.ndarray, num_parts: int) -> np.ndarray:
    local = np.empty(owner.size, dtype=np.int64)
    for p in range(num_parts):
        owned = np.flatnonzero(owner == p)
        local[owned] = np.arange(owned.size)
    return local


def _halos(t: str, edges: dict[EdgeType, np.ndarray], owner: dict[str, np.ndarray],
           num_parts: int) -> list[np.ndarray]:
    """Type ``t``'s halo in every part: the remote sources of the part's
    in-edges of every edge type with source ``t``, sorted by (owner, id)."""
    reading = [e for e in edges if e[0] == t]
    src = np.concatenate([edges[e][0] for e in reading]) if reading else \
        np.empty(0, dtype=np.int64)
    edge_owner = np.concatenate([owner[e[2]][edges[e][1]] for e in reading]) if reading else \
        np.empty(0, dtype=owner[t].dtype)
    return [halo_of(p, src, edge_owner, owner[t])[0] for p in range(num_parts)]


def _edge_cut(edge_index: np.ndarray, src_owner: np.ndarray, dst_owner: np.ndarray) -> int:
    return int((src_owner[edge_index[0]] != dst_owner[edge_index[1]]).sum())


def _attributes(store: Any, size: int, edge: bool = False) -> dict[str, Tensor]:
    """The node- (or edge-) level tensors of one type's store."""
    out = {}
    for key, value in store.items():
        if key in ("edge_index", "num_nodes") or not isinstance(value, Tensor) \
                or value.dim() == 0 or value.size(0) != size:
            continue
        if store.is_edge_attr(key) if edge else store.is_node_attr(key):
            value = value.detach().cpu()
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                raise ValueError(f"'partition' found NaN or infinite values in '{key}' of "
                                 f"'{store._key}'; clean or impute them (e.g. "
                                 f"torch.nan_to_num) before partitioning")
            out[key] = value
    return out


def _num_classes(node_attrs: dict[str, dict[str, Tensor]]) -> int | None:
    for attrs in node_attrs.values():
        y = attrs.get("y")
        if y is not None and y.dim() == 1 and not y.is_floating_point() \
                and y.dtype != torch.bool:
            return int(y.max()) + 1 if y.numel() else 0
    return None


def _fingerprint(sizes: dict[str, int], edges: dict[EdgeType, np.ndarray],
                 node_attrs: dict[str, dict[str, Tensor]],
                 edge_attrs: dict[EdgeType, dict[str, Tensor]]) -> str:
    digest = hashlib.sha256()
    digest.update(repr(sorted(sizes.items())).encode())
    for e, edge_index in edges.items():
        digest.update(edge_key(e).encode())
        digest.update(np.ascontiguousarray(edge_index).tobytes())
    for group in (node_attrs, edge_attrs):
        for key, attrs in group.items():
            for name, value in sorted(attrs.items()):
                digest.update(f"{key}.{name}:{tuple(value.shape)}:{value.dtype}".encode())
    return digest.hexdigest()
