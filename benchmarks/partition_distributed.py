"""Distributed partitioning against single-process partitioning of the same
graph folder: time, CPU, peak memory per process, edge cut.

    python benchmarks/partition_distributed.py [--num-nodes 2000000] [--avg-degree 16]
        [--num-features 16] [--parts 4] [--methods metis-coarse metis]
        [--graph-dir DIR] [--stream] [--out DIR] [--json out.json]

Writes a seeded community graph (``pyg_dist.datasets.community_graph``) as a
graph folder (or reuses ``--graph-dir``; ``--stream`` writes a simpler
community graph chunk by chunk instead, for graphs no process could build
whole: see :func:`stream_graph`), then, each in fresh processes:

* ``distributed``: ``partition_distributed(method="metis-coarse")`` on
  ``--parts`` local ranks (``pyg_dist.launch``);
* each of ``--methods``: ``GraphFolder.to_data()`` and
  ``pyg_dist.partition(method=...)`` in one process.

Reported per run: wall seconds (the single-process runs also without the
load), CPU seconds (per rank for the distributed run: the largest), peak
resident memory above the process's import floor (its resident size after
``import torch, pyg_dist``, before reading the graph; the largest rank's for
the distributed run), the edge cut; then the distributed run's ratios
against single-process ``metis-coarse`` measured in the same run.
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import rss

import pyg_dist
from pyg_dist.datasets import GraphFolder, GraphFolderWriter, community_graph, write_graph_folder
from pyg_dist.partitioning import partition_distributed


def measured(fn):
    """``fn()``'s result with its wall and CPU seconds and its peak resident
    bytes above the resident size before the call."""
    floor = rss.current()
    exact = rss.reset_peak()
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, {"seconds": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
                    "peak": rss.peak() - floor, "peak_exact": exact}


def rank_body(graph_dir, out):
    meta, row = measured(lambda: partition_distributed(graph_dir, out, overwrite=True))
    return {**row, "edge_cut": meta.edge_cut, "part_sizes": meta.part_sizes}


def single(method, graph_dir, out, parts):
    """One single-process run, in this (fresh) process; prints one JSON line."""
    def run():
        start = time.perf_counter()
        data = GraphFolder.open(graph_dir).to_data()
        loaded = time.perf_counter() - start
        meta = pyg_dist.partition(data, parts, out, method=method, overwrite=True)
        return meta, loaded

    (meta, loaded), row = measured(run)
    print(json.dumps({**row, "load_seconds": loaded, "edge_cut": meta.edge_cut,
                      "part_sizes": meta.part_sizes}))


def run_single(method, graph_dir, out, parts):
    done = subprocess.run([sys.executable, __file__, "--single", method, "--graph-dir",
                           str(graph_dir), "--out", str(out), "--parts", str(parts)],
                          capture_output=True, text=True)
    if done.returncode:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_graph(args, folder):
    start = time.perf_counter()
    data = community_graph(num_nodes=args.num_nodes, avg_degree=args.avg_degree,
                           num_features=args.num_features, seed=args.seed)
    write_graph_folder(data, folder, overwrite=True)
    print(f"graph: {data.num_nodes} nodes, {data.num_edges} directed edges, "
          f"{args.num_features} features; written in {time.perf_counter() - start:.0f} s",
          flush=True)


def stream_graph(args, folder, chunk=1 << 22, communities_of=1000, mixing=0.2, classes=40):
    """A community graph written chunk by chunk (the process holds a chunk
    and two id permutations): nodes fall into communities of
    ``communities_of`` (under a random relabelling, so that communities are
    not id ranges); each undirected edge joins a uniform node to a uniform
    member of its community (to any node with probability ``mixing``) and is
    stored both ways. Features: the class (community mod ``classes``) one-hot
    folded into ``num_features`` columns plus noise; 60/20/20 split."""
    start = time.perf_counter()
    n, rng = args.num_nodes, np.random.default_rng(args.seed)
    num_edges = int(n * args.avg_degree) // 2 * 2
    dtype = np.int32 if n < 2**31 else np.int64
    perm = rng.permutation(n).astype(dtype)  # position of each node among the communities
    members = np.empty_like(perm)
    members[perm] = np.arange(n, dtype=dtype)  # node at each position
    with GraphFolderWriter(folder, overwrite=True) as writer:
        edges = writer.edges(num_edges, dtype)
        half = num_edges // 2
        for lo in range(0, half, chunk):
            k = min(chunk, half - lo)
            src = rng.integers(0, n, k, dtype=dtype)
            at = perm[src] // communities_of * communities_of + rng.integers(0, communities_of, k)
            at = np.where(rng.random(k) < mixing, rng.integers(0, n, k), np.minimum(at, n - 1))
            dst = members[at]
            edges[0, lo:lo + k], edges[1, lo:lo + k] = src, dst
            edges[0, half + lo:half + lo + k], edges[1, half + lo:half + lo + k] = dst, src
        y_file = writer.node_array("y", (n,), np.int64)
        x_file = writer.node_array("x", (n, args.num_features), np.float32)
        for lo in range(0, n, chunk):
            hi = min(lo + chunk, n)
            y = (perm[lo:hi] // communities_of) % classes
            x = rng.normal(size=(hi - lo, args.num_features)).astype(np.float32)
            x[np.arange(hi - lo), y % args.num_features] += 2.0
            y_file[lo:hi], x_file[lo:hi] = y, x
        order = rng.permutation(n)
        for name, (a, b) in {"train_mask": (0, 0.6), "val_mask": (0.6, 0.8),
                             "test_mask": (0.8, 1.0)}.items():
            writer.split(name, np.sort(order[int(a * n):int(b * n)]))
        del edges, y_file, x_file
        writer.commit(n, num_edges, "streamed-community", num_classes=classes)
    print(f"graph (streamed): {n} nodes, {num_edges} directed edges, {args.num_features} "
          f"features; written in {time.perf_counter() - start:.0f} s", flush=True)


def row_text(name, row, base):
    if "error" in row:
        return f"{name:>24}  failed: {row['error']}"
    load = row.get("load_seconds")
    without_load = "" if load is None else f"{row['seconds'] - load:.1f}"
    ratio = "" if base is None or "error" in base else (
        f"  time x{row['seconds'] / base['seconds']:.2f}  peak x{row['peak'] / base['peak']:.2f}"
        f"  cut x{row['edge_cut'] / base['edge_cut']:.3f}")
    return (f"{name:>24} {row['seconds']:>8.1f} "
            f"{without_load:>8} "
            f"{row['cpu']:>8.1f} {row['peak'] / 2**30:>9.2f} {row['edge_cut']:>11} "
            f"{max(row['part_sizes']) / (sum(row['part_sizes']) / len(row['part_sizes'])):>7.3f}"
            f"{ratio}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-nodes", type=int, default=2_000_000)
    parser.add_argument("--avg-degree", type=float, default=16.0)
    parser.add_argument("--num-features", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--methods", nargs="*", default=["metis-coarse", "metis"],
                        help="single-process baselines (metis-coarse first: the ratios' base)")
    parser.add_argument("--graph-dir", default=None, help="reuse this graph folder")
    parser.add_argument("--stream", action="store_true",
                        help="write the graph chunk by chunk (stream_graph)")
    parser.add_argument("--out", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--json", help="also write the graph's size and the runs to this file")
    parser.add_argument("--single", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.single:
        return single(args.single, args.graph_dir, args.out, args.parts)

    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        graph_dir = Path(args.graph_dir or Path(tmp) / "graph")
        if not (graph_dir / "graph.json").exists():
            (stream_graph if args.stream else write_graph)(args, graph_dir)
        g = GraphFolder.open(graph_dir)
        print(f"{g.num_nodes} nodes, {g.num_edges} edges, {args.parts} parts", flush=True)
        rows = {}
        for method in args.methods:
            rows[method] = run_single(method, graph_dir, Path(tmp) / method, args.parts)
        start = time.perf_counter()
        ranks = pyg_dist.launch(rank_body, args.parts,
                                args=(str(graph_dir), str(Path(tmp) / "dist")))
        rows["distributed"] = {
            "launch_seconds": time.perf_counter() - start,
            "seconds": max(r["seconds"] for r in ranks),
            "cpu": max(r["cpu"] for r in ranks), "peak": max(r["peak"] for r in ranks),
            "edge_cut": ranks[0]["edge_cut"], "part_sizes": ranks[0]["part_sizes"],
            "rank_peaks": [r["peak"] for r in ranks], "rank_cpu": [r["cpu"] for r in ranks]}
        base = rows.get("metis-coarse")
        print(f"{'run':>24} {'wall s':>8} {'-load s':>8} {'cpu s':>8} {'peak GiB':>9} "
              f"{'edge cut':>11} {'max/avg':>7}")
        for name, row in rows.items():
            label = f"distributed x{args.parts}" if name == "distributed" else f"single {name}"
            print(row_text(label, row, base if name == "distributed" else None))
        dist = rows["distributed"]
        print(f"distributed: per-rank peak GiB {[round(p / 2**30, 2) for p in dist['rank_peaks']]}"
              f", per-rank cpu s {[round(c, 1) for c in dist['rank_cpu']]}; wall with the "
              f"ranks' start-up {dist['launch_seconds']:.1f} s")
        record = {"num_nodes": g.num_nodes, "num_edges": g.num_edges, "parts": args.parts,
                  **rows}
        print(json.dumps(record))
        if args.json:
            Path(args.json).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
