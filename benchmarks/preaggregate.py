"""Rows a vertex cover saves: halo rows per layer exchange today against the
minimum vertex cover of each pair's cut edges (rows plus partial sums).

    python benchmarks/preaggregate.py [--datasets cora community]
        [--parts 2 4 8] [--community-nodes 169343] [--json out.json]

Each graph is cut with METIS (:func:`pyg_dist.partitioning.cut.metis_cut`, no
folder written). ``today`` is the rows one exchange of one layer sends, summed
over ordered pairs of ranks (every rank's halo); ``cover`` the same under
:func:`pyg_dist.partitioning.cover.vertex_cover_plan`; ``ratio`` is
cover / today (the baseline is measured in the same run); ``plan s`` the time
to compute the cover plan. Datasets: ``cora`` (the Planetoid files shipped in
tests/data) and ``community``, the arxiv-shaped seeded community graph of
:mod:`pyg_dist.datasets` at ``--community-nodes``.
"""
import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from pyg_dist.datasets import community_graph, load_dataset, preset
from pyg_dist.partitioning.cover import vertex_cover_plan
from pyg_dist.partitioning.cut import metis_cut

#: The Cora raw files shipped with the tests.
CORA_ROOT = Path(__file__).resolve().parents[1] / "tests" / "data"


def load_graph(name, args):
    if name == "cora":  # from a copy: loading writes a processed/ folder next to raw/
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(CORA_ROOT / "Cora" / "raw", Path(tmp) / "Cora" / "raw")
            return load_dataset("cora", root=tmp)
    if name == "community":
        return community_graph(preset("synthetic-arxiv", num_nodes=args.community_nodes), seed=0)
    raise SystemExit(f"unknown --datasets entry '{name}'; use cora or community")


def measure(name, data, num_parts):
    edge_index = data.edge_index.contiguous()
    start = time.perf_counter()
    parts = metis_cut(edge_index, data.num_nodes, num_parts, seed=0)
    cut_s = time.perf_counter() - start
    start = time.perf_counter()
    plan = vertex_cover_plan(edge_index, parts, num_parts)
    plan_s = time.perf_counter() - start
    today, cover = int(plan.rows_today.sum()), int(plan.rows_cover.sum())
    return {"dataset": name, "nodes": data.num_nodes, "edges": edge_index.size(1),
            "parts": num_parts, "rows_today": today, "rows_cover": cover,
            "ratio": cover / today if today else 1.0,
            "sources": sum(s.numel() for row in plan.sources for s in row),
            "partial_sums": sum(t.numel() for row in plan.targets for t in row),
            "cut_s": cut_s, "plan_s": plan_s}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["cora", "community"])
    parser.add_argument("--parts", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument("--community-nodes", type=int, default=169343)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    rows = []
    header = (f"{'dataset':<10} {'nodes':>8} {'edges':>9} {'parts':>5} {'today':>8} "
              f"{'cover':>8} {'rows':>8} {'sums':>7} {'ratio':>6} {'METIS s':>8} {'plan s':>7}")
    print(header)
    print("-" * len(header))
    for name in args.datasets:
        data = load_graph(name, args)
        for num_parts in args.parts:
            r = measure(name, data, num_parts)
            rows.append(r)
            print(f"{name:<10} {r['nodes']:>8} {r['edges']:>9} {num_parts:>5} "
                  f"{r['rows_today']:>8} {r['rows_cover']:>8} {r['sources']:>8} "
                  f"{r['partial_sums']:>7} {r['ratio']:>6.3f} {r['cut_s']:>8.2f} "
                  f"{r['plan_s']:>7.2f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
