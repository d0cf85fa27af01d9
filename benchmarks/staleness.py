"""Accuracy against halo traffic for every halo policy, on local gloo ranks.

    python benchmarks/staleness.py [--graphs cora synthetic] [--models gcn sage]
        [--seeds 3] [--parts 4] [--cora-root DIR] [--synthetic-nodes 100000]
        [--epochs-cora 200] [--epochs-synthetic 60] [--eval-every 1] [--json out.json]

One row per policy (and compression): test accuracy (mean over seeds, taken at
the best validation epoch), its difference to exact, training halo bytes (both
directions, all ranks) as a ratio to exact without layer-0 input caching, all
halo bytes (evaluation, always exact, included) likewise, epoch time as a
ratio to exact, and the fraction of communication time that overlapped
compute. The baselines are measured in the same run.
"""
import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path

import torch

import pyg_dist
from pyg_dist.config import Evaluation
from pyg_dist.datasets import planetoid, synthetic
from pyg_dist.halo import parse_policy
from pyg_dist.models import GNN
from pyg_dist.train import train

#: The Cora raw files shipped with the tests.
CORA_ROOT = Path(__file__).resolve().parents[1] / "tests" / "data"

# (label, policy spec, compression, cache static inputs)
POLICIES = [
    ("exact, no input cache", "exact", None, False),
    ("exact", "exact", None, True),
    ("exact + fp16", "exact", "fp16", True),
    ("exact + int8", "exact", "int8", True),
    ("exact + int4", "exact", "int4", True),
    ("exact + int2", "exact", "int2", True),
    ("stale:2", "stale:2", None, True),
    ("stale:4", "stale:4", None, True),
    ("stale:8", "stale:8", None, True),
    ("stale:2 + int8", "stale:2", "int8", True),
    ("stale:4 + int8", "stale:4", "int8", True),
    ("stale:4 + int4", "stale:4", "int4", True),
    ("pipelined", "pipelined", None, True),
    ("pipelined + int8", "pipelined", "int8", True),
    ("adaptive:0.5", "adaptive:0.5", None, True),
    ("adaptive:0.5 + int8", "adaptive:0.5", "int8", True),
    ("sampled:0.5", "sampled:0.5", None, True),
    ("sampled:0.1", "sampled:0.1", None, True),
    ("isolated", "isolated", None, True),
]
BASELINE, EXACT = POLICIES[0][0], POLICIES[1][0]


def rank_body(parts_dir, kind, classes, seed, epochs, policies, eval_every):
    rows = []
    for label, spec, compress, cache in policies:
        data = pyg_dist.DistData.load(parts_dir, halo=parse_policy(spec, compress, cache))
        torch.manual_seed(seed)
        model = GNN(kind, data.x.size(1), 16, classes, dropout=0.5)
        torch.manual_seed(seed * 1000 + data.rank)
        result = train(model, data, epochs, progress=False,
                       evaluation=Evaluation(every=eval_every))
        summary = result.summary()
        rows.append({
            "policy": label,
            "test_acc": result.test_acc,
            "train_bytes": summary["halo_bytes_fwd"] + summary["halo_bytes_bwd"],
            "all_bytes": summary["halo_bytes"],
            "epoch_s": statistics.median(e.seconds for e in result.history[1:]),
            "overlap": summary["overlap_fraction"],
        })
    return rows if data.rank == 0 else None


def load_graph(name, args, tmp):
    if name == "cora":
        root = Path(args.cora_root)
        if not (root / "Cora" / "raw").is_dir():
            raise SystemExit(f"--cora-root {root} has no Cora/raw folder")
        copy = Path(tmp) / "planetoid"
        shutil.copytree(root / "Cora" / "raw", copy / "Cora" / "raw", dirs_exist_ok=True)
        return planetoid("cora", copy), args.epochs_cora
    return synthetic(num_nodes=args.synthetic_nodes, seed=0), args.epochs_synthetic


def table(graph, kind, runs):
    """runs: one list of rows per seed."""
    by_policy = {}
    for rows in runs:
        for row in rows:
            by_policy.setdefault(row["policy"], []).append(row)
    base = by_policy[BASELINE][0]
    exact = by_policy[EXACT]
    exact_acc = statistics.mean(r["test_acc"] for r in exact)
    exact_time = statistics.mean(r["epoch_s"] for r in exact)
    print(f"\n{graph}, {kind}: {len(runs)} seed(s); bytes ratios against '{BASELINE}'")
    print(f"{'policy':<24} {'test acc':>8} {'Δ acc':>7} {'train bytes':>11} {'all bytes':>9} "
          f"{'epoch time':>10} {'overlap':>7}")
    lines = []
    for label, rows in by_policy.items():
        acc = statistics.mean(r["test_acc"] for r in rows)
        line = {
            "graph": graph, "model": kind, "policy": label, "test_acc": acc,
            "delta": acc - exact_acc,
            "train_bytes_ratio": rows[0]["train_bytes"] / max(base["train_bytes"], 1),
            "all_bytes_ratio": rows[0]["all_bytes"] / max(base["all_bytes"], 1),
            "time_ratio": statistics.mean(r["epoch_s"] for r in rows) / exact_time,
            "overlap": statistics.mean(r["overlap"] for r in rows),
            "seeds": [r["test_acc"] for r in rows],
        }
        lines.append(line)
        print(f"{label:<24} {100 * acc:>7.2f}% {100 * line['delta']:>+6.2f} "
              f"{line['train_bytes_ratio']:>10.3f}x {line['all_bytes_ratio']:>8.3f}x "
              f"{line['time_ratio']:>9.2f}x {100 * line['overlap']:>6.1f}%", flush=True)
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graphs", nargs="+", default=["cora", "synthetic"])
    parser.add_argument("--models", nargs="+", default=["gcn", "sage"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--cora-root", default=str(CORA_ROOT),
                        help="folder holding Cora/raw (default: the copy shipped in tests/data)")
    parser.add_argument("--synthetic-nodes", type=int, default=100_000)
    parser.add_argument("--epochs-cora", type=int, default=200)
    parser.add_argument("--epochs-synthetic", type=int, default=60)
    parser.add_argument("--eval-every", type=int, default=1,
                        help="evaluate every N epochs (evaluation traffic is exact)")
    parser.add_argument("--policies", nargs="*", default=None,
                        help="labels of the policies to run (default: all)")
    parser.add_argument("--json", default=None, help="write the table rows here")
    args = parser.parse_args()
    policies = [p for p in POLICIES if args.policies is None or p[0] in args.policies
                or p[0] in (BASELINE, EXACT)]
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for graph in args.graphs:
            data, epochs = load_graph(graph, args, tmp)
            parts = Path(tmp) / f"{graph}-parts"
            meta = pyg_dist.partition(data, args.parts, parts, method="metis")
            print(f"{graph}: {data.num_nodes} nodes, {data.num_edges} edges, {epochs} epochs; "
                  f"METIS cut {meta.edge_cut} edges, halo {meta.halo_sizes}", flush=True)
            classes = int(data.y.max()) + 1
            for kind in args.models:
                runs = []
                for seed in range(args.seeds):
                    per_rank = pyg_dist.launch(rank_body, args.parts, args=(
                        str(parts), kind, classes, seed, epochs, policies, args.eval_every))
                    runs.append(per_rank[0])
                lines += table(graph, kind, runs)
    if args.json:
        Path(args.json).write_text(json.dumps(lines, indent=1))


if __name__ == "__main__":
    main()
