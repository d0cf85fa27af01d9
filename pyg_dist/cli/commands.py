"""``pyg-dist partition``, ``convert``, ``layouts`` and ``check``."""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import record

import pyg_dist
from pyg_dist.cli.args import given
from pyg_dist.cli.errors import (
    check_dataset,
    check_graph_folder,
    check_link_folder,
    check_out,
    check_world,
)
from pyg_dist.cli.job import DEFAULT_PARTS, Graph
from pyg_dist.cli.preflight import check_host
from pyg_dist.datasets import GraphFolder, HeteroGraphFolder, load_dataset, write_graph_folder
from pyg_dist.datasets.graph import edge_key
from pyg_dist.datasets.load import LINK_DATASETS, RECOMMEND_DATASETS
from pyg_dist.datasets.ogb import OGB, convert_ogbn
from pyg_dist.datasets.ogb_mag import MAG_NAME
from pyg_dist.partitioning import PartitionMeta, partition_distributed
from pyg_dist.runtime import distributed, env
from pyg_dist.strategies.grid_3d import parse_grid, write_grid_folder
from pyg_dist.strategies.layer_pipeline import best_layout, halo_rows, layout_costs
from pyg_dist.tasks.supervision import split_links

__all__ = ["partition_command", "distributed_partition_command", "convert_command",
           "layouts_command", "check_command", "load_graph", "partition_graph", "meta_summary"]


def _graph(args: argparse.Namespace) -> Graph:
    """The graph the options name; a bad option exits naming the fix."""
    try:
        return Graph.from_dict(given(args).get("graph", {}))
    except ValueError as exc:
        raise SystemExit(f"pyg-dist {args.command}: {exc}") from None


def partition_command(args: argparse.Namespace) -> int:
    parts = given(args).get("graph", {}).get("parts")
    if parts is not None and parts < 1:
        raise SystemExit(f"pyg-dist partition: --parts {parts}: give the number of parts to cut "
                         f"(one per rank), an integer >= 1, or leave it out for "
                         f"{DEFAULT_PARTS} (or torchrun's ranks)")
    if args.distributed or args.input is not None:
        return distributed_partition_command(args)
    graph = _graph(args)
    check_out("partition", args.out, args.overwrite)
    check_dataset("partition", graph)
    meta = partition_graph(graph, Path(args.out), graph.parts or DEFAULT_PARTS, args.clusters,
                           overwrite=args.overwrite)
    print(json.dumps(meta_summary(meta)))
    return 0


def convert_command(args: argparse.Namespace) -> int:
    """Writes the dataset as a graph folder: OGB's files streamed a chunk at a
    time, any other dataset through its PyG ``Data`` or ``HeteroData`` (the
    heterogeneous layout); with ``--task link``, the seeded RandomLinkSplit
    that ``pyg-dist partition --task link`` cuts (the graph held whole)."""
    graph = _graph(args)
    _refuse_split(args.command, graph.dataset)
    if graph.dataset in (*OGB, MAG_NAME) and graph.root is None:
        raise SystemExit(f"pyg-dist convert: --dataset {graph.dataset} needs --root, the "
                         f"folder OGB downloaded it into")
    if graph.task == "link" and graph.hetero:
        raise SystemExit(f"pyg-dist convert --task link splits a homogeneous graph; "
                         f"--dataset {graph.dataset} is heterogeneous: drop --task link")
    check_out("convert", args.out, args.overwrite)
    check_dataset("convert", graph)
    folder: GraphFolder | HeteroGraphFolder
    if graph.task == "link":
        folder = write_graph_folder(split_links(load_graph(graph), seed=graph.seed), args.out,
                                    overwrite=args.overwrite, name=graph.dataset)
    elif graph.dataset in OGB:
        assert graph.root is not None, "checked above"
        folder = convert_ogbn(graph.dataset, graph.root, args.out, overwrite=args.overwrite)
    else:
        folder = write_graph_folder(load_graph(graph), args.out, overwrite=args.overwrite,
                                    name=graph.dataset)
    summary = {"out": str(folder.path), "name": folder.name, "num_nodes": folder.num_nodes,
               "num_edges": folder.num_edges}
    if isinstance(folder, HeteroGraphFolder):
        summary["node_types"] = folder.sizes
        summary["edge_types"] = {edge_key(e): n for e, n in folder.num_edges_of.items()}
    else:
        summary["node_attrs"] = folder.node_attrs
        if folder.link_splits:
            summary["link_sizes"] = folder.link_sizes
    print(json.dumps(summary))
    return 0


def _refuse_split(command: str, dataset: str) -> None:
    """``convert`` and ``layouts`` take graphs of node labels; a dataset that
    comes split into supervision edges is cut with ``partition``."""
    if dataset in (*LINK_DATASETS, *RECOMMEND_DATASETS):
        raise SystemExit(f"pyg-dist {command} takes graphs of node labels; --dataset {dataset} "
                         f"comes split into edges to predict: cut it with 'pyg-dist partition "
                         f"--dataset {dataset} --out DIR', or train it with 'pyg-dist train "
                         f"--dataset {dataset}'")


def distributed_partition_command(args: argparse.Namespace) -> int:
    """``pyg-dist partition --distributed``: :func:`partition_distributed` on
    ``--parts`` spawned local ranks, or on the ranks torchrun started. A
    folder's link split travels with it; ``--task link`` also requires one."""
    options = given(args).get("graph", {})
    if args.input is None or not args.distributed:
        raise SystemExit("pyg-dist partition: --distributed and --input DIR go together (DIR: "
                         "a graph folder, see pyg-dist convert)")
    extra = sorted(set(options) - {"parts", "method", "seed", "task"})
    if extra or args.clusters != 1:
        flags = [f"--{k.replace('_', '-')}" for k in extra] + (
            ["--clusters-per-part"] if args.clusters != 1 else [])
        raise SystemExit(f"pyg-dist partition --distributed reads the graph from --input; "
                         f"drop {' '.join(flags)}")
    check_graph_folder("partition", args.input)
    check_out("partition", args.out, args.overwrite)
    link = options.get("task", "node") == "link"
    if getattr(args, "grid", None) is not None:
        if link:
            raise SystemExit("pyg-dist partition --grid writes the 3D grid's folder, which "
                             "trains node tasks; drop --task link, or drop --grid to cut parts")
        return _grid_folder_command(args, options)
    if link:
        check_link_folder("partition", args.input)
    job = (args.input, args.out, options.get("method", "metis-coarse"),
           options.get("seed", 0), args.overwrite)
    if env.under_torchrun():
        check_world("partition", env.world_size(), options.get("parts"), None)
        meta = record(_partition_joined)(options.get("parts"), *job)
        if meta is None:  # not rank 0
            return 0
    else:
        parts = options.get("parts")
        meta = pyg_dist.launch(partition_distributed, DEFAULT_PARTS if parts is None else parts,
                               args=job)[0]
    print(json.dumps(meta_summary(meta)))
    return 0


def _grid_folder_command(args: argparse.Namespace, options: dict[str, Any]) -> int:
    """``pyg-dist partition --distributed --grid XxYxZ``: the grid folder of
    ``--input`` (:func:`~pyg_dist.strategies.grid_3d.write_grid_folder`), on
    the grid's ranks (spawned, or torchrun's)."""
    try:
        shape = parse_grid(args.grid)
    except ValueError as exc:
        raise SystemExit(f"pyg-dist partition: {exc}") from None
    world = shape[0] * shape[1] * shape[2]
    if "method" in options:
        raise SystemExit("pyg-dist partition --grid orders the nodes by the grid's own "
                         "permutation (seeded by --seed); drop --method")
    parts = options.get("parts")
    if parts is not None and parts != world:
        raise SystemExit(f"pyg-dist partition: --grid {args.grid} holds {world} ranks but "
                         f"--parts is {parts}; pass --parts {world} (or leave it out)")
    job = (args.input, args.out, shape, options.get("seed", 0), "double", args.overwrite)
    if env.under_torchrun():
        check_world("partition", env.world_size(), world, None)
        grid = record(_grid_joined)(*job)
        if grid is None:  # not rank 0
            return 0
    else:
        grid = pyg_dist.launch(write_grid_folder, world, args=job)[0]
    print(json.dumps({k: v for k, v in grid.items() if k != "rank_sha256"}))
    return 0


def _grid_joined(*job: Any) -> dict[str, Any] | None:
    """Under torchrun: every rank writes its share; rank 0 returns ``grid.json``'s contents."""
    pyg_dist.init()
    try:
        grid = write_grid_folder(*job)
        return grid if distributed.rank() == 0 else None
    finally:
        pyg_dist.shutdown()


def _partition_joined(parts: int | None, *job: Any) -> PartitionMeta | None:
    """Under torchrun: every rank partitions; rank 0 returns the metadata."""
    pyg_dist.init()
    try:
        world = distributed.world_size()
        if parts is not None and parts != world:
            raise ValueError(f"'pyg-dist partition' got --parts {parts} but torchrun started "
                             f"{world} ranks; pass --parts {world} (or leave it out)")
        meta = partition_distributed(*job)
        return meta if distributed.rank() == 0 else None
    finally:
        pyg_dist.shutdown()


def load_graph(graph: Graph) -> Any:
    """The PyG ``Data`` that ``graph`` names (a link split for the datasets
    that come split: OGB's link datasets, the user-item graphs)."""
    if graph.dataset.startswith("synthetic"):
        return load_dataset(graph.dataset, seed=graph.seed, num_nodes=graph.num_nodes,
                            avg_degree=graph.avg_degree)
    return load_dataset(graph.dataset, graph.root)


def partition_graph(graph: Graph, out: Path, parts: int, clusters: int = 1,
                    overwrite: bool = False) -> PartitionMeta:
    """Cuts the graph ``graph`` names into ``parts`` parts (and ``clusters``
    clusters per part) in folder ``out``."""
    data = load_graph(graph)
    if graph.task != "node" and graph.dataset not in (*LINK_DATASETS, *RECOMMEND_DATASETS):
        data = split_links(data, seed=graph.seed)  # those come split
    return pyg_dist.partition(data, parts, out, method=graph.method,
                              seed=graph.seed, overwrite=overwrite, clusters_per_part=clusters)


def meta_summary(meta: PartitionMeta) -> dict[str, Any]:
    return {
        "num_parts": meta.num_parts,
        "num_nodes": meta.num_nodes,
        "num_edges": meta.num_edges,
        "edge_cut": meta.edge_cut,
        "part_sizes": meta.part_sizes,
        "halo_sizes": meta.halo_sizes,
        "method": meta.method,
        "seed": meta.seed,
        "clusters_per_part": meta.clusters_per_part,
        **({"link_splits": meta.link_splits} if meta.link_splits else {}),
    }


def layouts_command(args: argparse.Namespace) -> int:
    """Cuts the graph into every part count dividing --parts (in a temporary
    folder) and prints each layout's predicted bytes per epoch, then the best."""
    graph = _graph(args)
    _refuse_split("layouts", graph.dataset)
    check_dataset("layouts", graph)
    ranks = graph.parts or DEFAULT_PARTS
    data = load_graph(graph)
    halo = {}
    with tempfile.TemporaryDirectory(prefix="pyg_dist-layouts-") as tmp:
        for parts in [d for d in range(2, ranks + 1) if ranks % d == 0]:
            folder = Path(tmp) / str(parts)
            pyg_dist.partition(data, parts, folder, method=graph.method, seed=graph.seed)
            halo[parts] = halo_rows(folder)
    state = 2 * args.hidden if args.model == "gcn2" and args.initial_rows == "send" else None
    costs = layout_costs(ranks, data.num_nodes, halo, args.layers, args.hidden, state)
    for cost in costs:
        print(json.dumps({"layout": cost.name, "parts": cost.parts, "stages": cost.stages,
                          "halo_bytes": cost.halo_bytes, "stage_bytes": cost.stage_bytes,
                          "bytes": cost.total}))
    best = best_layout(costs)
    recompute = state is None and args.model == "gcn2" and best.stages > 1
    print(json.dumps({"best": best.name, "parts": best.parts, "stages": best.stages,
                      "command": f"pyg-dist train --parts {ranks} --model {args.model} "
                                 f"--layers {args.layers} --strategy layer-pipeline "
                                 f"--stages {best.stages}"
                                 + (" --initial-rows recompute" if recompute else "")}))
    return 0


def check_command(args: argparse.Namespace) -> int:
    checks = check_host(args.nnodes, args.node_rank, args.nproc_per_node, args.master_addr,
                        args.master_port, args.parts_dir)
    for check in checks:
        print(check)
    return 0 if all(c.ok for c in checks) else 1
