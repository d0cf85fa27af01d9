"""``pyg_dist.partition(data, num_parts, out_dir)``: check the graph, cut it,
build every part's local graph and halo plan, write the folder."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pyg_dist.datasets.graph import attributes, check_finite, check_graph, num_classes
from pyg_dist.partitioning.arrays import chunks
from pyg_dist.partitioning.cut import METHODS, coarse_metis_cut, metis_cut, random_cut
from pyg_dist.partitioning.hetero import is_hetero, partition_hetero
from pyg_dist.partitioning.io import CLUSTERS_DIR, FORMAT_VERSION, PartitionMeta, write_folder
from pyg_dist.partitioning.plan import LocalPart, PartPlan
from pyg_dist.tasks.supervision import SupervisionEdges, is_link_split, link_split

__all__ = ["partition"]


def partition(
    data: Any,
    num_parts: int,
    out_dir: str | os.PathLike,
    method: str = "metis",
    seed: int = 0,
    overwrite: bool = False,
    clusters_per_part: int = 1,
) -> PartitionMeta:
    r"""Cuts a graph into ``num_parts`` parts and writes one folder that the
    ranks of a distributed run load from (:meth:`pyg_dist.DistData.load`).

    Each part holds only what its rank needs: its owned nodes' attributes (every
    node-level tensor of ``data``: ``x``, ``y``, masks, ...) and global ids, its
    in-edges (an edge belongs to the part owning its target) with their
    edge-level attributes, and its halo plan: which of its rows each peer needs
    and which halo rows come from whom (contiguous per peer), plus the in-degrees
    of its halo nodes for GCN normalisation. The folder is written atomically.

    Parts are built and written one after the other from chunked passes over
    the edges, so that besides METIS's own needs (about 8 bytes per directed
    edge for the symmetric graph it takes, and several times that inside
    METIS) memory grows by the largest part, not by the whole graph again;
    ``benchmarks/partition.py`` measures time and memory.

    A :class:`~torch_geometric.data.HeteroData` is cut by
    ``pyg_dist.partitioning.hetero.partition_hetero`` into a folder that
    :meth:`pyg_dist.DistHeteroData.load` reads.

    A link split (the ``(train_data, val_data, test_data)`` of PyG's
    ``RandomLinkSplit``, or OGB's ``(data, split_edge)``; see
    :mod:`pyg_dist.tasks.supervision`) is cut as its message-passing graph,
    and each supervision edge is stored on the part that owns its source
    node (:meth:`pyg_dist.DistData.supervision` reads them back).

    Args:
        data (torch_geometric.data.Data or torch_geometric.data.HeteroData or tuple):
            The graph, or a link split. Needs ``edge_index``; may be directed and have
            self-loops, duplicate edges, isolated nodes, and no ``x`` (then
            parts have no ``x`` either).
        num_parts (int): Number of parts, :math:`1 \le` ``num_parts`` :math:`\le`
            number of nodes.
        out_dir (str or os.PathLike): Folder to create.
        method (str, optional): :obj:`"metis"` (minimum edge cut, through
            pymetis), :obj:`"metis-coarse"` (METIS on the graph contracted by
            label propagation: for graphs of tens of millions of edges, a
            fraction of METIS's time and memory for a slightly larger cut) or
            :obj:`"random"`. All balance node counts; the random cut, if
            ``data.train_mask`` exists, training-node counts too (METIS through
            pymetis takes one balance constraint only: training nodes follow
            their nodes). (default: :obj:`"metis"`)
        seed (int, optional): Seed of the cut. (default: :obj:`0`)
        overwrite (bool, optional): Replace an existing ``out_dir``.
            (default: :obj:`False`)
        clusters_per_part (int, optional): Cut the graph into
            :math:`C = m \cdot` ``num_parts`` clusters with ``method`` and make
            part :math:`p` the union of clusters :math:`pm, \dots, pm + m - 1`;
            the folder then also holds one part per cluster in
            ``out_dir/clusters/`` for gradient-only training
            (``train(..., strategy=GradientOnly())``), which regroups clusters over the
            ranks as it trains. (default: :obj:`1`)

    Returns:
        :class:`PartitionMeta`, also written to ``out_dir/meta.json``.
    """
    if is_hetero(data):
        if clusters_per_part != 1:
            raise ValueError("'partition' cuts a HeteroData into parts without clusters; pass "
                             "clusters_per_part=1 (gradient-only training is homogeneous)")
        return partition_hetero(data, num_parts, out_dir, method, seed, overwrite)
    splits: dict[str, SupervisionEdges] = {}
    if is_link_split(data):
        data, splits = link_split(data)
    edge_index, num_nodes = check_graph(data)
    num_parts = _check_num_parts(num_parts, num_nodes)
    clusters = _check_clusters(clusters_per_part, num_parts, num_nodes)
    if method not in METHODS:
        raise ValueError(f"'partition' got method='{method}'; use one of {', '.join(METHODS)}")
    node_attrs, edge_attrs = attributes(data, num_nodes, edge_index.size(1))
    check_finite(node_attrs, edge_attrs)

    train = node_attrs.get("train_mask")
    balance = train.bool() if train is not None and train.dtype == torch.bool else None
    cut = {"metis": metis_cut, "metis-coarse": coarse_metis_cut}.get(method)
    if cut is not None:
        labels = cut(edge_index, num_nodes, clusters, seed, balance)
    else:
        labels = random_cut(num_nodes, clusters, seed, balance)
    part = labels // clusters_per_part
    fingerprint = _fingerprint(edge_index, num_nodes, node_attrs, edge_attrs)

    def folder(assignment: Tensor, count: int, per_part: int) -> tuple[PartitionMeta, Any]:
        plan = PartPlan.create(edge_index, assignment, count)
        meta = PartitionMeta(
            num_parts=count,
            num_nodes=num_nodes,
            num_edges=edge_index.size(1),
            edge_cut=plan.edge_cut,
            part_sizes=plan.part_sizes,
            halo_sizes=plan.halo_sizes,
            train_sizes=[] if balance is None else _train_sizes(balance, assignment, count),
            method=method,
            seed=seed,
            fingerprint=fingerprint,
            num_classes=num_classes(node_attrs.get("y")),
            node_attrs=sorted(node_attrs),
            edge_attrs=sorted(edge_attrs),
            clusters_per_part=per_part,
            link_splits=list(splits),
        )
        return meta, (_part_content(p, plan.build(p), meta, node_attrs, edge_attrs,
                                    _supervision(splits, assignment, p))
                      for p in range(count))

    meta, contents = folder(part, num_parts, clusters_per_part)
    subfolders = {} if clusters_per_part == 1 else {CLUSTERS_DIR: folder(labels, clusters, 1)}
    write_folder(Path(out_dir), meta, contents, overwrite, subfolders)
    return meta


def _part_content(
    p: int,
    lp: LocalPart,
    meta: PartitionMeta,
    node_attrs: dict[str, Tensor],
    edge_attrs: dict[str, Tensor],
    link: dict[str, Any],
) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "partition_id": meta.partition_id,
        "part": p,
        "num_parts": meta.num_parts,
        "num_nodes": meta.num_nodes,
        "graph": {k: v.contiguous() for k, v in vars(lp).items()},
        "node": {k: v[lp.global_id].contiguous() for k, v in node_attrs.items()},
        "edge": {k: v[lp.edge_id].contiguous() for k, v in edge_attrs.items()},
        "link": link,
    }


def _supervision(splits: dict[str, SupervisionEdges], assignment: Tensor,
                 p: int) -> dict[str, Any]:
    """Part ``p``'s supervision edges of each split: those whose source it owns."""
    return {name: edges.select(assignment[edges.index[0]] == p).state()
            for name, edges in splits.items()}


def _train_sizes(balance: Tensor, part: Tensor, num_parts: int) -> list[int]:
    return torch.bincount(part[balance], minlength=num_parts).tolist()


def _check_clusters(clusters_per_part: Any, num_parts: int, num_nodes: int) -> int:
    """The number of clusters, :math:`m` times ``num_parts``."""
    if isinstance(clusters_per_part, bool) or not isinstance(clusters_per_part, int) \
            or clusters_per_part < 1:
        raise ValueError(f"'partition' needs clusters_per_part >= 1 (got {clusters_per_part!r}); "
                         f"1 cuts no clusters")
    clusters = clusters_per_part * num_parts
    if clusters > num_nodes:
        raise ValueError(
            f"'partition' got clusters_per_part={clusters_per_part} with num_parts={num_parts}: "
            f"{clusters} clusters for a graph of {num_nodes} nodes; choose clusters_per_part <= "
            f"{num_nodes // num_parts}"
        )
    return clusters


def _check_num_parts(num_parts: Any, num_nodes: int) -> int:
    if isinstance(num_parts, bool) or not isinstance(num_parts, int):
        raise TypeError(f"'partition' needs an integer num_parts (got {num_parts!r})")
    if num_parts < 1 or num_parts > num_nodes:
        raise ValueError(
            f"'partition' got num_parts={num_parts} for a graph of {num_nodes} nodes; "
            f"choose 1 <= num_parts <= {num_nodes}"
        )
    return num_parts


def _fingerprint(
    edge_index: Tensor,
    num_nodes: int,
    node_attrs: dict[str, Tensor],
    edge_attrs: dict[str, Tensor],
) -> str:
    digest = hashlib.sha256()
    digest.update(f"{num_nodes}:{edge_index.size(1)}".encode())
    for row in edge_index.numpy():  # the bytes of the int64 [2, E] tensor, in chunks
        for sl in chunks(row.size):
            digest.update(row[sl])
    for key, value in sorted({**node_attrs, **edge_attrs}.items()):
        digest.update(f"{key}:{tuple(value.shape)}:{value.dtype}".encode())
    return digest.hexdigest()
