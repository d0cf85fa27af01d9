"""Regrouping in gradient-only training: reading a new group of clusters from
the folder against receiving it from the ranks that held its clusters, on
local gloo ranks.

    python benchmarks/regroup.py [--num-nodes 100000] [--parts 4]
        [--clusters-per-part 4] [--regroups 8] [--regroup sweep]

For each source, the median seconds of a regroup (the slowest rank's, after
the first group, which is always read) and the bytes one regroup moves (all
ranks: files read, or messages sent), on the arxiv-shaped community graph of
:mod:`pyg_dist.datasets`. Both are measured in the same run.
"""
import argparse
import statistics
import tempfile
from pathlib import Path

import pyg_dist
from pyg_dist.datasets import community_graph, preset
from pyg_dist.strategies.gradient_only import GroupRunner

SOURCES = ("folder", "peers")


def rank_body(folder, regroups, scheme):
    out = {}
    for source in SOURCES:
        data = pyg_dist.DistData.load(folder)
        runner = GroupRunner(data, regroup_every=1, regroup=scheme, correction="none",
                              regroup_from=source)
        for epoch in range(1, regroups + 2):
            runner.prepare(epoch)
            data.ledger.next_step()
        rows = [r for r in data.ledger.rows() if r["direction"] == "regroup"][1:]
        seconds = [pyg_dist.runtime.distributed.all_reduce_values([r["seconds"]], "max")[0]
                   for r in rows]
        moved = pyg_dist.runtime.distributed.all_reduce_values(
            [sum(r["bytes_recv"] for r in rows) / len(rows)])[0]
        out[source] = {"seconds": statistics.median(seconds), "bytes": moved}
    return out if pyg_dist.runtime.distributed.rank() == 0 else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-nodes", type=int, default=100_000)
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--clusters-per-part", type=int, default=4)
    parser.add_argument("--regroups", type=int, default=8)
    parser.add_argument("--regroup", default="sweep", choices=["sweep", "random", "home"])
    args = parser.parse_args()
    data = community_graph(preset("synthetic-arxiv", num_nodes=args.num_nodes), seed=0)
    with tempfile.TemporaryDirectory(prefix="pyg_dist-bench-") as tmp:
        folder = Path(tmp) / "parts"
        pyg_dist.partition(data, args.parts, folder, clusters_per_part=args.clusters_per_part)
        result = pyg_dist.launch(rank_body, args.parts, timeout=3600,
                                 args=(str(folder), args.regroups, args.regroup))[0]
    print(f"{data.num_nodes} nodes, {data.num_edges} edges, {args.parts} ranks x "
          f"{args.clusters_per_part} clusters, {args.regroup}, {args.regroups} regroups")
    print("| source | seconds per regroup | vs folder | MB per regroup |\n|---|---|---|---|")
    base = result["folder"]["seconds"]
    for source, row in result.items():
        print(f"| {source} | {row['seconds']:.3f} | {row['seconds'] / base:.2f}x | "
              f"{row['bytes'] / 1e6:.1f} |")


if __name__ == "__main__":
    main()
