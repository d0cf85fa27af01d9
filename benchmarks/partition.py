"""METIS vs random cuts on a ~1M-edge synthetic graph: time, edge cut, halo size.

    python benchmarks/partition.py [--nodes 64000] [--degree 16] [--parts 2 4 8]

The graph is a seeded stochastic block model with 64 communities (90% of edges
inside a community), so a good cut exists; ratios are METIS over random,
measured in the same run.
"""
import argparse
import tempfile
import time
from pathlib import Path

import pyg_dist
from pyg_dist.datasets import synthetic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=64_000)
    parser.add_argument("--degree", type=float, default=16.0)
    parser.add_argument("--parts", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    data = synthetic(num_nodes=args.nodes, num_classes=64, avg_degree=args.degree,
                     homophily=0.9, seed=args.seed)
    print(f"graph: {data.num_nodes} nodes, {data.num_edges} edges (directed)")
    header = (f"{'parts':>5} {'method':>7} {'seconds':>8} {'edge cut':>10} {'cut %':>7} "
              f"{'halo frac':>9} {'max part':>9} {'cut ratio':>9} {'halo ratio':>10}")
    print(header)
    with tempfile.TemporaryDirectory() as tmp:
        for parts in args.parts:
            rows = {}
            for method in ("random", "metis"):
                start = time.perf_counter()
                meta = pyg_dist.partition(data, parts, Path(tmp) / f"{method}{parts}",
                                          method=method, seed=args.seed)
                rows[method] = (time.perf_counter() - start, meta)
            base = rows["random"][1]
            for method, (seconds, meta) in rows.items():
                print(f"{parts:>5} {method:>7} {seconds:>8.2f} {meta.edge_cut:>10} "
                      f"{100 * meta.edge_cut / meta.num_edges:>6.1f}% "
                      f"{meta.halo_fraction:>9.3f} {max(meta.part_sizes):>9} "
                      f"{meta.edge_cut / base.edge_cut:>9.3f} "
                      f"{meta.halo_fraction / base.halo_fraction:>10.3f}")


if __name__ == "__main__":
    main()
