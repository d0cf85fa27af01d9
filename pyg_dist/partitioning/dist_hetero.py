r"""The steps of :func:`~pyg_dist.partitioning.partition_distributed` for a
heterogeneous graph folder: each rank's part as
:func:`~pyg_dist.partitioning.hetero.partition_hetero` writes it, built from
slices, none holding the whole graph.

1. The cut runs on the homogeneous view (node type ``t``'s node ``i`` is
   node ``offset[t] + i``, offsets in the folder's node-type order): each
   rank reads a :math:`1/P` slice of every relation's edges, mapped to the
   view, and a block of the view's ids, and the cutters of
   :mod:`pyg_dist.partitioning.dist_cut` run unchanged.
2. Per node type, every node's attributes go to its owner (owned rows in
   ascending id within the type); per relation, every edge goes to its
   target's owner.
3. Per relation the in-edges are sorted by (target row, input position);
   per source type the halo is the union over the relations reading it of
   the remote sources, with one send list
   (:mod:`pyg_dist.partitioning.dist_plan`'s steps).
"""
from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch

from pyg_dist.datasets.graph import edge_key, is_mask
from pyg_dist.datasets.ondisk_hetero import HeteroGraphFolder
from pyg_dist.partitioning.arrays import id_dtype, small_int_dtype
from pyg_dist.partitioning.dist_cut import (
    cluster_graph_budget,
    coarse_metis_assign,
    permutation_cut,
)
from pyg_dist.partitioning.dist_meta import edge_block_digests, max_label
from pyg_dist.partitioning.dist_plan import (
    Halo,
    SortedEdges,
    halo_degrees,
    send_lists,
    shuffle_in_edges,
    shuffle_nodes,
    sort_in_edges,
)
from pyg_dist.partitioning.io import FORMAT_VERSION, HeteroTypes, PartitionMeta
from pyg_dist.partitioning.plan import ptr
from pyg_dist.partitioning.shuffle import Blocks
from pyg_dist.runtime import distributed
from pyg_dist.runtime.distributed import Group

__all__ = ["HomogeneousView", "build_hetero_part"]

EdgeType = tuple[str, str, str]
_NAME = "'partition_distributed'"


@dataclass(frozen=True)
class HomogeneousView:
    """How the ranks split a heterogeneous graph folder: one block of the
    homogeneous ids per rank, one slice of each relation's edges per rank.

    Attributes:
        offset: First homogeneous id of each node type.
        sizes: Nodes of each type.
        nodes: Blocks of the homogeneous ids, one per rank.
        edges: Slices of each relation's edges, one per rank.
    """

    offset: dict[str, int]
    sizes: dict[str, int]
    nodes: Blocks
    edges: dict[EdgeType, Blocks]

    @staticmethod
    def of(graph: HeteroGraphFolder, num_parts: int) -> HomogeneousView:
        offset = np.cumsum([0] + [graph.sizes[t] for t in graph.node_types]).tolist()
        return HomogeneousView(dict(zip(graph.node_types, offset)), dict(graph.sizes),
                               Blocks.even(graph.num_nodes, num_parts),
                               {e: Blocks.even(n, num_parts)
                                for e, n in graph.num_edges_of.items()})

    def type_span(self, t: str, rank: int) -> tuple[int, int]:
        """The ids within type ``t`` (``lo:hi``) of rank ``rank``'s block."""
        lo, hi = self.nodes.span(rank)
        start, end = self.offset[t], self.offset[t] + self.sizes[t]
        lo, hi = min(max(lo, start), end), max(min(hi, end), start)
        return lo - start, hi - start


def build_hetero_part(graph: HeteroGraphFolder, method: str, seed: int, rank: int,
                      num_parts: int, group: Group = None) -> tuple[dict[str, Any],
                                                                    PartitionMeta]:
    """This rank's part file content (with the partition id) and the
    folder's metadata, the same on every rank. Collective.

    Args:
        graph (HeteroGraphFolder): The opened folder.
        method (str): :obj:`"metis-coarse"` or :obj:`"random"`.
        seed (int): Seed of the cut.
        rank (int): This rank (= its part).
        num_parts (int): Parts (= ranks of ``group``).
        group (torch.distributed.ProcessGroup, optional): The process group.
            (default: :obj:`None`)
    """
    view = HomogeneousView.of(graph, num_parts)
    _check_slices(graph, view, rank, group)
    part = _assign(method, graph, view, rank, num_parts, seed, group)
    in_edges = {e: _shuffle_relation(graph, view, e, part, rank, num_parts, group)
                for e in graph.edge_types}
    owned, attrs = {}, {}
    for t in graph.node_types:
        owned[t], attrs[t] = _shuffle_type(graph, view, t, part, rank, num_parts, group)
    del part
    edges = {e: sort_in_edges(owned[e[2]], in_edges.pop(e), loops=e[0] == e[2])
             for e in graph.edge_types}
    halos = {t: Halo.of([edges[e].remote_keys(rank, graph.sizes[t])
                         for e in graph.edge_types if e[0] == t], graph.sizes[t])
             for t in graph.node_types}
    node = {t: {"graph": _node_plan(t, graph, owned, edges, halos[t], num_parts, group),
                "attrs": attrs[t]} for t in graph.node_types}
    edge = {edge_key(e): {"graph": _edge_plan(e, edges[e], owned, halos[e[0]], rank,
                                              num_parts, group), "attrs": {}}
            for e in graph.edge_types}
    stats = _stats(owned, attrs, edges, halos, rank)
    meta = _meta(graph, view, stats, method, seed, rank, group)
    content = {
        "format_version": FORMAT_VERSION,
        "partition_id": meta.partition_id,
        "part": rank,
        "num_parts": num_parts,
        "num_nodes": graph.num_nodes,
        "node_types": node,
        "edge_types": edge,
    }
    return content, meta


def _stats(owned: dict[str, np.ndarray], attrs: dict[str, dict[str, torch.Tensor]],
           edges: dict[EdgeType, SortedEdges], halos: dict[str, Halo],
           rank: int) -> dict[str, Any]:
    """This part's sizes per type and relation, for the metadata."""
    return {
        "size": {t: int(ids.size) for t, ids in owned.items()},
        "halo": {t: int(halo.ids.size) for t, halo in halos.items()},
        "cut": {edge_key(e): int((s.src_part != rank).sum()) for e, s in edges.items()},
        "train": {t: int(a["train_mask"].sum()) for t, a in attrs.items()
                  if is_mask(a.get("train_mask"))},
        "max_label": {t: max_label(a.get("y")) for t, a in attrs.items()},
    }


def _check_slices(graph: HeteroGraphFolder, view: HomogeneousView, rank: int,
                  group: Group) -> None:
    """Each rank checks its slice of every relation and its block of every
    node type; any failure fails every rank."""
    with distributed.failing_together(f"{_NAME} checking the input", group):
        for e in graph.edge_types:
            graph.check_edges(e, *view.edges[e].span(rank))
        for t in graph.node_types:
            graph.check_nodes(t, *view.type_span(t, rank))


def _assign(method: str, graph: HeteroGraphFolder, view: HomogeneousView, rank: int,
            num_parts: int, seed: int, group: Group) -> np.ndarray:
    """The part of each node of this rank's block of the homogeneous view."""
    lo, hi = view.nodes.span(rank)
    if method == "random" or num_parts == 1:
        part = permutation_cut(np.arange(lo, hi), graph.num_nodes, num_parts, seed)
    else:
        dtype = id_dtype(graph.num_nodes)
        ends: list[list[np.ndarray]] = [[], []]
        for e in graph.edge_types:
            block = graph.edges(e, *view.edges[e].span(rank), dtype=dtype)
            for row, t in ((0, e[0]), (1, e[2])):
                ends[row].append(block[row] + dtype.type(view.offset[t]))
        edges = [np.concatenate(ids) if ids else np.empty(0, dtype=dtype) for ids in ends]
        part, _ = coarse_metis_assign(edges, view.nodes, rank, num_parts, seed, group,
                                      max_entries=cluster_graph_budget(graph.num_edges,
                                                                       num_parts))
    return part.astype(small_int_dtype(num_parts))


def _shuffle_relation(graph: HeteroGraphFolder, view: HomogeneousView, e: EdgeType,
                      part: np.ndarray, rank: int, num_parts: int,
                      group: Group) -> list[np.ndarray]:
    """Relation ``e``'s in-edges of this rank's part, ``[src, dst, edge_id,
    src_part]`` with ids within their types."""
    lo, hi = view.edges[e].span(rank)
    src, dst = graph.edges(e, lo, hi, dtype=id_dtype(graph.num_nodes))
    return shuffle_in_edges(src, dst, lo, part, view.nodes, rank, num_parts, group,
                            (view.offset[e[0]], view.offset[e[2]]))


def _shuffle_type(graph: HeteroGraphFolder, view: HomogeneousView, t: str, part: np.ndarray,
                  rank: int, num_parts: int,
                  group: Group) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
    """Node type ``t``'s owned ids (ascending, within the type) and rows."""
    lo, hi = view.type_span(t, rank)
    first = view.offset[t] + lo - view.nodes.span(rank)[0]
    return shuffle_nodes(lambda name, a, b: graph.node(t, name, a, b), graph.node_attrs(t),
                         (lo, hi), part[first:first + hi - lo], num_parts, group)


def _node_plan(t: str, graph: HeteroGraphFolder, owned: dict[str, np.ndarray],
               edges: dict[EdgeType, SortedEdges], halo: Halo, num_parts: int,
               group: Group) -> dict[str, torch.Tensor]:
    """Type ``t``'s owned ids and halo plan, with its halo rows' in-degrees and
    self-loops over every relation (those of the homogeneous view)."""
    targets = [edges[e] for e in graph.edge_types if e[2] == t]
    in_degree = sum((s.in_degree for s in targets), np.zeros(owned[t].size, dtype=np.int64))
    loops = sum((s.self_loops for s in targets), np.zeros(owned[t].size, dtype=np.int64))
    send_idx, send_ptr = send_lists(halo, owned[t], num_parts, group)
    degrees = halo_degrees(halo, owned[t], in_degree, loops, num_parts, group)
    return {
        "global_id": torch.from_numpy(owned[t]),
        "halo_global_id": torch.from_numpy(np.ascontiguousarray(halo.ids)),
        "halo_ptr": ptr(np.bincount(halo.owner, minlength=num_parts)),
        "send_idx": send_idx,
        "send_ptr": send_ptr,
        "halo_in_degree": torch.from_numpy(np.ascontiguousarray(degrees[:, 0])),
        "halo_self_loops": torch.from_numpy(np.ascontiguousarray(degrees[:, 1])),
    }


def _edge_plan(e: EdgeType, edges: SortedEdges, owned: dict[str, np.ndarray], halo: Halo,
               rank: int, num_parts: int, group: Group) -> dict[str, torch.Tensor]:
    """Relation ``e``'s in-edges as a local CSR over the source type's ``[owned
    ; halo]``, and its halo rows' in-degrees and self-loops in ``e`` (zero
    unless source and target type agree)."""
    degrees = np.zeros((halo.ids.size, 2), dtype=np.int64)
    if e[0] == e[2]:
        degrees = halo_degrees(halo, owned[e[0]], edges.in_degree, edges.self_loops,
                               num_parts, group)
    return {
        "rowptr": ptr(edges.in_degree),
        "col": torch.from_numpy(edges.columns(rank, owned[e[0]], halo)),
        "edge_id": torch.from_numpy(edges.edge_id),
        "halo_in_degree": torch.from_numpy(np.ascontiguousarray(degrees[:, 0])),
        "halo_self_loops": torch.from_numpy(np.ascontiguousarray(degrees[:, 1])),
    }


def hetero_fingerprint(graph: HeteroGraphFolder, view: HomogeneousView, rank: int,
                       group: Group = None) -> str:
    """sha256 of the graph's types, structure and attribute shapes, the same
    whatever the number of ranks that compute it: the sorted type sizes,
    then per relation its name and the sha256 of each block of its edges
    (:func:`~pyg_dist.partitioning.dist_meta.edge_block_digests`), then
    ``type.name:shape:dtype`` of each node array. Collective."""
    digest = hashlib.sha256(repr(sorted(graph.sizes.items())).encode())
    for e in graph.edge_types:
        digest.update(edge_key(e).encode())
        for hexdigest in edge_block_digests(partial(graph.edges, e), graph.num_edges_of[e],
                                            view.edges[e].span(rank), group):
            digest.update(hexdigest.encode())
    for t in graph.node_types:
        for name in sorted(graph.node_attrs(t)):
            rows = graph.node(t, name, 0, min(1, graph.sizes[t]))
            digest.update(f"{t}.{name}:{(graph.sizes[t], *rows.shape[1:])}:{rows.dtype}"
                          .encode())
    return digest.hexdigest()


def _meta(graph: HeteroGraphFolder, view: HomogeneousView, stats: dict[str, Any],
          method: str, seed: int, rank: int, group: Group) -> PartitionMeta:
    """The folder's metadata, the same on every rank, filled as
    ``partition_hetero`` fills it."""
    fingerprint = hetero_fingerprint(graph, view, rank, group)
    every = distributed.all_gather_objects(stats, group)
    partition_id = distributed.all_gather_objects(uuid.uuid4().hex, group)[0]
    nodes, keys = graph.node_types, [edge_key(e) for e in graph.edge_types]
    types = HeteroTypes(
        node_types=list(nodes),
        edge_types=[list(e) for e in graph.edge_types],
        num_nodes=dict(graph.sizes),
        num_edges={edge_key(e): n for e, n in graph.num_edges_of.items()},
        part_sizes={t: [s["size"][t] for s in every] for t in nodes},
        halo_sizes={t: [s["halo"][t] for s in every] for t in nodes},
        edge_cut={k: sum(s["cut"][k] for s in every) for k in keys},
        node_attrs={t: sorted(graph.node_attrs(t)) for t in nodes},
        edge_attrs={k: [] for k in keys},
        train_sizes={t: [s["train"][t] for s in every] for t in nodes if t in every[0]["train"]},
    )
    labels = [[s["max_label"][t] for s in every] for t in nodes]
    num_classes = next((max(per_part) + 1 for per_part in labels if per_part[0] is not None),
                       None)
    return PartitionMeta(
        num_parts=len(every),
        num_nodes=graph.num_nodes,
        num_edges=graph.num_edges,
        edge_cut=sum(types.edge_cut.values()),
        part_sizes=_per_part(types.part_sizes, len(every)),
        halo_sizes=_per_part(types.halo_sizes, len(every)),
        train_sizes=_per_part(types.train_sizes, len(every)) if types.train_sizes else [],
        method=method,
        seed=seed,
        fingerprint=fingerprint,
        num_classes=num_classes,
        partition_id=partition_id,
        node_attrs=sorted(f"{t}.{k}" for t in nodes for k in graph.node_attrs(t)),
        edge_attrs=[],
        types=types,
    )


def _per_part(sizes: dict[str, list[int]], num_parts: int) -> list[int]:
    """The sum over the types of their per-part sizes."""
    return [sum(per_part[p] for per_part in sizes.values()) for p in range(num_parts)]
