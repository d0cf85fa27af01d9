"""Partitioning time and memory as graphs grow, METIS against random cuts.

    python benchmarks/partition.py [--dataset synthetic-products] [--num-nodes 20000 200000]
                                   [--parts 4 8] [--methods random metis]
                                   [--save G.pt | --graph G.pt] [--json out.json]

Generates a seeded graph of each size in turn (or loads one written with
``--save``), then cuts it with each method into each part count and reports:
wall time, of which inside METIS (pymetis.part_graph) and in pyg_dist; the
memory ``partition()`` added on top of the process's resident size before the
call (peak RSS, reset per call), as a multiple of the input graph's tensors;
edge cut and halo fraction; METIS over random in the same run. ``--json``
also writes one record per graph: its size and its runs.
"""
import argparse
import json
import multiprocessing
import tempfile
import time
from pathlib import Path

import rss
import torch

import pyg_dist


class Timed:
    """Wraps a function, summing the seconds spent in it."""

    def __init__(self, fn):
        self.fn, self.seconds = fn, 0.0

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start


def load_graph(args, num_nodes):
    from torch_geometric.data import Data

    if args.graph:
        return Data.from_dict(torch.load(args.graph, weights_only=True)), None
    from pyg_dist.datasets import load_dataset

    start = time.perf_counter()
    data = load_dataset(args.dataset, seed=args.seed, num_nodes=num_nodes,
                        avg_degree=args.avg_degree)
    seconds = time.perf_counter() - start
    if args.save:
        torch.save(data.to_dict(), args.save)
    return data, seconds


def measure(data, parts, method, out, seed):
    import pymetis

    metis = Timed(pymetis.part_graph)
    pymetis.part_graph = metis
    try:
        before = rss.current()
        exact = rss.reset_peak()
        start = time.perf_counter()
        meta = pyg_dist.partition(data, parts, out, method=method, seed=seed, overwrite=True)
        seconds = time.perf_counter() - start
        added = rss.peak() - before
    finally:
        pymetis.part_graph = metis.fn
    return {"parts": parts, "method": method, "seconds": seconds, "metis_seconds": metis.seconds,
            "added_bytes": added, "peak_exact": exact, "edge_cut": meta.edge_cut,
            "cut_fraction": meta.edge_cut / max(meta.num_edges, 1),
            "halo_fraction": meta.halo_fraction, "max_part": max(meta.part_sizes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="synthetic-products")
    parser.add_argument("--num-nodes", type=int, nargs="+", default=[20_000],
                        help="one graph per size, cut in turn")
    parser.add_argument("--avg-degree", type=float, default=None)
    parser.add_argument("--parts", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--methods", nargs="+", default=["random", "metis"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--graph", default=None, help="load this saved graph instead")
    parser.add_argument("--save", default=None, help="save the generated graph here")
    parser.add_argument("--out", default=None, help="folder for the parts (default: a temp dir)")
    parser.add_argument("--json", help="also write the graphs and their runs to this file")
    args = parser.parse_args()
    if (args.graph or args.save) and len(args.num_nodes) > 1:
        parser.error("--graph and --save take one graph: give one --num-nodes")

    if len(args.num_nodes) == 1:
        graphs = [cut(args, args.num_nodes[0])]
    else:  # each graph in a fresh process: memory one left freed hides none of the next's
        with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
            graphs = pool.starmap(cut, [(args, n) for n in args.num_nodes], chunksize=1)
    if args.json:
        Path(args.json).write_text(json.dumps(graphs, indent=1))


def cut(args, num_nodes: int) -> dict:
    """Makes (or loads) a graph of ``num_nodes`` nodes and cuts it with each
    method into each part count, printing a line per run; returns the graph's
    size and its runs."""
    data, gen_seconds = load_graph(args, num_nodes)
    input_bytes = rss.tensor_bytes(data)
    print(f"graph: {data.num_nodes} nodes, {data.num_edges} edges, "
          f"{data.num_node_features} features, {input_bytes / 2**30:.2f} GiB of tensors"
          + (f"; generated in {gen_seconds:.1f} s" if gen_seconds is not None else ""),
          flush=True)
    print(f"{'parts':>5} {'method':>7} {'seconds':>8} {'metis s':>8} {'ours s':>7} "
          f"{'added GiB':>9} {'x input':>7} {'cut %':>6} {'halo frac':>9} {'cut vs rand':>11}",
          flush=True)
    runs = []
    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        for parts in args.parts:
            rows = {}
            for method in args.methods:
                row = measure(data, parts, method, Path(tmp) / f"{method}{parts}", args.seed)
                rows[method] = row
                runs.append(row)
                base = rows.get("random")
                ratio = (f"{row['edge_cut'] / base['edge_cut']:>11.3f}"
                         if base and base["edge_cut"] else f"{'':>11}")
                print(f"{parts:>5} {method:>7} {row['seconds']:>8.1f} "
                      f"{row['metis_seconds']:>8.1f} "
                      f"{row['seconds'] - row['metis_seconds']:>7.1f} "
                      f"{row['added_bytes'] / 2**30:>9.2f} "
                      f"{row['added_bytes'] / input_bytes:>7.2f} "
                      f"{100 * row['cut_fraction']:>6.1f} {row['halo_fraction']:>9.3f} {ratio}",
                      flush=True)
    if not all(r["peak_exact"] for r in runs):
        print("note: the kernel refused to reset the peak RSS; 'added' is the lifetime peak")
    return {"num_nodes": data.num_nodes, "num_edges": data.num_edges,
            "input_bytes": input_bytes, "gen_seconds": gen_seconds, "runs": runs}


if __name__ == "__main__":
    main()
