r"""``partition_distributed(input_dir, out_dir)``: the partition folder of a
graph folder, made by the ranks that will train on it, none of which holds
the whole graph.

A pipeline of collective steps, each rank holding one slice of the input:

1. read this rank's :math:`1/P` slice of the edges and block of the nodes
   (a contiguous id range) from the memory-mapped graph folder, and check
   them; every rank raises the same error if any rank's check failed, whatever
   the error (:func:`~pyg_dist.runtime.distributed.failing_together`; so do
   opening the folder and writing the parts);
2. assign nodes to parts (:mod:`pyg_dist.partitioning.dist_cut`; the
   cluster graph rank 0 cuts keeps its heaviest entries,
   :func:`~pyg_dist.partitioning.dist_cut.cluster_graph_budget`); each node's
   part is known to its block's rank;
3. shuffle every edge to its target's part and every node's attributes to
   its part, and build each part's local graph and halo plan
   (:mod:`pyg_dist.partitioning.dist_plan`); shuffle a link split's
   supervision edges to their sources' parts
   (:mod:`pyg_dist.partitioning.dist_link`);
4. write each part into one temporary sibling folder of ``out_dir``; rank 0
   writes ``meta.json`` last and renames the folder into place.

A heterogeneous graph folder takes the same steps on its homogeneous view,
then per node type and relation (:mod:`pyg_dist.partitioning.dist_hetero`),
and gives the folder :func:`~pyg_dist.partitioning.hetero.partition_hetero`
writes.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pyg_dist.datasets.ondisk import GraphFolder, HeteroGraphFolder, open_graph_folder
from pyg_dist.partitioning.arrays import (
    id_dtype,
    map_large_allocations,
    small_int_dtype,
)
from pyg_dist.partitioning.dist_cut import (
    cluster_graph_budget,
    coarse_metis_assign,
    permutation_cut,
)
from pyg_dist.partitioning.dist_hetero import build_hetero_part
from pyg_dist.partitioning.dist_link import check_supervision, shuffle_supervision
from pyg_dist.partitioning.dist_meta import edge_block_digests, max_label
from pyg_dist.partitioning.dist_plan import build_local_part, shuffle_in_edges, shuffle_nodes
from pyg_dist.partitioning.io import (
    DISK_FIX,
    FORMAT_VERSION,
    META_FILE,
    PartitionMeta,
    disk_error,
    file_sha256,
    part_file,
    replace_folder,
    save_part,
)
from pyg_dist.partitioning.shuffle import Blocks
from pyg_dist.runtime import distributed
from pyg_dist.runtime.distributed import Group

__all__ = ["partition_distributed", "write_folder_together", "DIST_METHODS",
           "distributed_fingerprint"]

#: The cutters of the distributed path.
DIST_METHODS = ("metis-coarse", "random")
_NAME = "'partition_distributed'"


def partition_distributed(
    input_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    method: str = "metis-coarse",
    seed: int = 0,
    overwrite: bool = False,
    group: Group = None,
) -> PartitionMeta:
    r"""Cuts the graph folder ``input_dir`` into one part per rank of
    ``group`` and writes the partition folder ``out_dir``, on every rank of an
    initialised process group at once. The folder is the one
    :func:`pyg_dist.partition` writes: :meth:`pyg_dist.DistData.load` and
    every training mode read it unchanged. A heterogeneous graph folder
    gives the heterogeneous partition folder that
    :meth:`pyg_dist.DistHeteroData.load` reads (the cut runs on the
    homogeneous view, node type ``t``'s node ``i`` being node ``offset[t] +
    i``; ``PartitionMeta.types`` holds the sizes per type).

    A graph folder with a link split (written from RandomLinkSplit's three
    graphs or OGB's ``(data, split_edge)``, see
    :func:`pyg_dist.datasets.write_graph_folder`) is cut as its
    message-passing graph, and each supervision edge is stored on the part
    that owns its source node, as :func:`pyg_dist.partition` stores it
    (:meth:`pyg_dist.DistData.supervision` reads them back); each rank reads
    a :math:`1/P` slice of every split.

    No rank holds the whole graph: each reads a :math:`1/P` slice of the
    edges and a block of :math:`N/P` nodes, and holds besides them its part,
    the cluster graph METIS cuts (rank 0) and buffers proportional to its
    slice. ``out_dir`` must be on a filesystem every rank sees; the parts are
    written into a temporary sibling folder and rank 0 renames it into place
    after writing ``meta.json``, so a failure on any rank (an error, a lost
    rank, a full disk) leaves no complete-looking folder and raises on every
    rank that is still running.

    Args:
        input_dir (str or os.PathLike): A graph folder of either kind
            (:func:`pyg_dist.datasets.write_graph_folder` or ``pyg-dist convert``).
        out_dir (str or os.PathLike): Folder to create.
        method (str, optional): :obj:`"metis-coarse"` (size-capped label
            propagation across the ranks, METIS on the cluster graph on rank 0)
            or :obj:`"random"` (a seeded permutation of the node ids dealt
            round-robin: exactly balanced and the same whatever ranks compute
            it). (default: :obj:`"metis-coarse"`)
        seed (int, optional): Seed of the cut. (default: :obj:`0`)
        overwrite (bool, optional): Replace an existing ``out_dir``.
            (default: :obj:`False`)
        group (torch.distributed.ProcessGroup, optional): The ranks; one part
            per rank. (default: :obj:`None`, the default group)

    Returns:
        :class:`~pyg_dist.PartitionMeta`, also written to
        ``out_dir/meta.json``, on every
        rank. Its ``fingerprint`` is ``distributed_fingerprint``'s.
    """
    rank, num_parts = distributed.rank(group), distributed.world_size(group)
    out_dir = Path(out_dir).resolve()
    _check_method(method)
    map_large_allocations()  # each pass's arrays go back to the system once freed
    graph = _open(input_dir, out_dir, overwrite, num_parts, group)
    if isinstance(graph, HeteroGraphFolder):
        content, meta = build_hetero_part(graph, method, seed, rank, num_parts, group)
    else:
        content, meta = _homogeneous_part(graph, method, seed, rank, num_parts, group)

    def manifest(digests: list[str]) -> tuple[str, str]:
        meta.part_sha256 = digests
        return META_FILE, meta.to_json()

    meta.part_sha256 = write_folder_together(out_dir, part_file(rank), content, manifest,
                                             overwrite, _NAME, "part", group)
    return meta


def _homogeneous_part(graph: GraphFolder, method: str, seed: int, rank: int, num_parts: int,
                      group: Group) -> tuple[dict[str, Any], PartitionMeta]:
    """This rank's part file content and the folder's metadata."""
    nodes = Blocks.even(graph.num_nodes, num_parts)
    edges = Blocks.even(graph.num_edges, num_parts)
    (nlo, nhi), (elo, ehi) = nodes.span(rank), edges.span(rank)
    _check_slices(graph, (nlo, nhi), (elo, ehi), rank, num_parts, group)
    part = _assign(method, graph, (elo, ehi), nodes, rank, num_parts, seed, group)
    content, stats = _build(graph, (elo, ehi), part, nodes, rank, num_parts, group)
    content["link"] = shuffle_supervision(graph, part, nodes, rank, num_parts, group)
    del part
    meta = _meta(graph, stats, method, seed, (elo, ehi), group)
    content["partition_id"] = meta.partition_id
    return content, meta


def _check_method(method: str) -> None:
    if method == "metis":
        raise ValueError(
            f"{_NAME} cannot run plain METIS (it needs the whole graph in one process); use "
            f"method='metis-coarse', or the single-process pyg_dist.partition(data, ..., "
            f"method='metis') on a machine that holds the graph"
        )
    if method not in DIST_METHODS:
        raise ValueError(f"{_NAME} got method='{method}'; use one of {', '.join(DIST_METHODS)}")


def _open(input_dir: str | os.PathLike, out_dir: Path, overwrite: bool, num_parts: int,
          group: Group) -> GraphFolder | HeteroGraphFolder:
    """The graph folder (either kind), opened on every rank; fails together, before any
    work, on an unreadable folder, a taken ``out_dir`` or a bad part count."""
    graph = None
    with distributed.failing_together(f"{_NAME} opening '{input_dir}'", group):
        graph = open_graph_folder(input_dir)
        if num_parts > graph.num_nodes:
            raise ValueError(
                f"{_NAME} runs on {num_parts} ranks (one part each) but '{input_dir}' has "
                f"{graph.num_nodes} nodes; launch at most {graph.num_nodes} ranks"
            )
        if out_dir.exists() and not overwrite:
            raise FileExistsError(
                f"{_NAME} would overwrite '{out_dir}'; pass overwrite=True or choose another "
                f"out_dir"
            )
    assert graph is not None, "opened on every rank, else every rank raised"
    return graph


def _check_slices(graph: GraphFolder, node_span: tuple[int, int], edge_span: tuple[int, int],
                  rank: int, num_parts: int, group: Group) -> None:
    """Each rank checks its slice of the edges, block of the nodes and slice
    of each split's supervision edges; any failure fails every rank."""
    with distributed.failing_together(f"{_NAME} checking the input", group):
        graph.check_edges(*edge_span)
        graph.check_nodes(*node_span)
        check_supervision(graph, rank, num_parts)


def _assign(method: str, graph: GraphFolder, edge_span: tuple[int, int], nodes: Blocks,
            rank: int, num_parts: int, seed: int, group: Group) -> np.ndarray:
    """The part of each node of this rank's block (narrowest integer dtype)."""
    lo, hi = nodes.span(rank)
    num_nodes = int(nodes.bounds[-1])
    if method == "random" or num_parts == 1:
        part = permutation_cut(np.arange(lo, hi), num_nodes, num_parts, seed)
    else:
        edges = list(graph.edges(*edge_span, dtype=id_dtype(num_nodes)))
        part, _ = coarse_metis_assign(edges, nodes, rank, num_parts, seed, group,
                                      max_entries=cluster_graph_budget(graph.num_edges,
                                                                       num_parts))
    return part.astype(small_int_dtype(num_parts))


def _build(graph: GraphFolder, edge_span: tuple[int, int], part: np.ndarray, nodes: Blocks,
           rank: int, num_parts: int, group: Group) -> tuple[dict[str, Any], dict[str, Any]]:
    """This rank's part file content (without the partition id) and its
    sizes, after moving edges and node rows to their parts."""
    num_nodes = int(nodes.bounds[-1])
    src, dst = graph.edges(*edge_span, dtype=id_dtype(num_nodes))
    in_edges = shuffle_in_edges(src, dst, edge_span[0], part, nodes, rank, num_parts, group)
    del src, dst
    owned, node = shuffle_nodes(graph.node, graph.node_attrs, nodes.span(rank), part,
                                num_parts, group)
    lp, cut = build_local_part(rank, owned, in_edges, num_nodes, num_parts, group)
    train = node.get("train_mask")
    stats = {
        "size": int(owned.size),
        "halo": int(lp.halo_global_id.numel()),
        "cut": cut,
        "train": None if train is None or train.dtype != torch.bool else int(train.sum()),
        "max_label": max_label(node.get("y")),
    }
    content = {
        "format_version": FORMAT_VERSION,
        "part": rank,
        "num_parts": num_parts,
        "num_nodes": num_nodes,
        "graph": {k: v.contiguous() for k, v in vars(lp).items()},
        "node": node,
        "edge": {},
    }
    return content, stats


def distributed_fingerprint(graph: GraphFolder, edge_span: tuple[int, int],
                            group: Group = None) -> str:
    r"""sha256 of the graph's structure and attribute shapes, the same whatever
    the number of ranks that compute it: ``"N:E"``, then the sha256 of each
    block of :data:`~.dist_meta.FINGERPRINT_EDGES` consecutive edges (the bytes of its
    int64 sources, then of its targets), then ``name:shape:dtype`` of each
    node array. Each rank hashes the blocks that start in its edge slice.
    (Not the single-process fingerprint, which hashes the edges in one pass.)

    Args:
        graph (GraphFolder): The opened graph folder.
        edge_span (tuple[int, int]): This rank's edge slice ``lo:hi``.
        group (torch.distributed.ProcessGroup, optional): The process group.
            (default: :obj:`None`)
    """
    digest = hashlib.sha256(f"{graph.num_nodes}:{graph.num_edges}".encode())
    for hexdigest in edge_block_digests(graph.edges, graph.num_edges, edge_span, group):
        digest.update(hexdigest.encode())
    for name in sorted(graph.node_attrs):
        rows = graph.node(name, 0, min(1, graph.num_nodes))
        digest.update(f"{name}:{(graph.num_nodes, *rows.shape[1:])}:{rows.dtype}".encode())
    return digest.hexdigest()


def _meta(graph: GraphFolder, stats: dict[str, Any], method: str, seed: int,
          edge_span: tuple[int, int], group: Group) -> PartitionMeta:
    """The folder's metadata, the same on every rank."""
    fingerprint = distributed_fingerprint(graph, edge_span, group)
    every = distributed.all_gather_objects(stats, group)
    labels = [s["max_label"] for s in every]
    partition_id = distributed.all_gather_objects(uuid.uuid4().hex, group)[0]
    return PartitionMeta(
        num_parts=len(every),
        num_nodes=graph.num_nodes,
        num_edges=graph.num_edges,
        edge_cut=sum(s["cut"] for s in every),
        part_sizes=[s["size"] for s in every],
        halo_sizes=[s["halo"] for s in every],
        train_sizes=[] if every[0]["train"] is None else [s["train"] for s in every],
        method=method,
        seed=seed,
        fingerprint=fingerprint,
        num_classes=None if labels[0] is None else max(labels) + 1,
        partition_id=partition_id,
        node_attrs=sorted(graph.node_attrs),
        edge_attrs=[],
        link_splits=list(graph.link_splits),
    )


def write_folder_together(out: Path, file_name: str, content: dict[str, Any],
                          manifest: Callable[[list[str]], tuple[str, str]], overwrite: bool,
                          what: str, noun: str, group: Group = None) -> list[str]:
    """Every rank of ``group`` saves ``content`` as ``file_name`` into one
    temporary sibling of ``out`` (named by rank 0); rank 0 then writes the
    manifest, ``(name, text) = manifest(every rank's sha256)``, last and
    renames the folder into place. On any failure rank 0 removes the
    temporary folder and every rank raises, naming ``what`` (the call that
    writes) and ``noun`` (what a rank's file holds). Returns every rank's sha256, in rank order."""
    rank = distributed.rank(group)
    name = f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp = out.parent / distributed.all_gather_objects(name, group)[0]
    try:
        with distributed.failing_together(f"{what} creating '{tmp}'", group):
            if rank == 0:
                out.parent.mkdir(parents=True, exist_ok=True)
                tmp.mkdir()
        digest = None
        with distributed.failing_together(f"{what} writing the {noun}s", group):
            path = tmp / file_name
            save_part(content, path, f"rank {rank} wrote its {noun}")
            digest = file_sha256(path)
        digests: list[str] = distributed.all_gather_objects(digest, group)
        with distributed.failing_together(f"{what} finishing '{out}'", group):
            if rank == 0:
                try:
                    manifest_name, text = manifest(digests)
                    (tmp / manifest_name).write_text(text)
                    replace_folder(tmp, out, overwrite)
                except OSError as exc:
                    full = disk_error(exc, out.parent, f"rank {rank} finished the folder",
                                      fix=DISK_FIX)
                    if full is exc:
                        raise
                    raise full from exc
    except BaseException:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return digests
