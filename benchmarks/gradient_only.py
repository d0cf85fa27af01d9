"""Gradient-only training and compressed gradient all-reduces against exact
training, on local gloo ranks.

    python benchmarks/gradient_only.py [--datasets cora community] [--models gcn sage]
        [--layers 2 4 8] [--seeds 3] [--seeds-deep 1] [--parts 4] [--clusters-per-part 4]
        [--regroup-every 50] [--regroup sweep] [--modes LABEL ...] [--epochs-cora 200]
        [--epochs-community 20]
        [--community-nodes 100000] [--eval-every 5] [--compress-only | --no-compress]
        [--regroup-from folder] [--json out.json]
    sudo python benchmarks/gradient_only.py --testbed 1gbit ...

For each graph, model and depth (residual connections from 3 layers on; hidden
width 16 on Cora at 2 layers and ``--hidden-deep`` 64 deeper, 128 on community),
one row per training mode: exact; ``auto`` (the halo policy that picks for
itself); ``isolated`` (each part alone, fixed, no correction); gradient-only
with each correction (``node`` weighs edges: GCN's normalisation, SAGE's
weighted mean). Test accuracy (mean over seeds, at the best validation epoch,
evaluated exactly on the whole graph) and its difference to exact, training
bytes per epoch (halo rows and gradients both directions, and the gradient
all-reduce, all ranks), median epoch time and its ratio to exact. Then, on exact
training of the 2-layer GCN, each gradient compression against the plain
all-reduce: accuracy, gradient bytes per epoch and their ratio, epoch time.
Baselines are measured in the same run.

``community`` is the arxiv-shaped community graph of :mod:`pyg_dist.datasets`
resized to ``--community-nodes``. With ``--testbed LINK`` (root, iproute2) the
ranks run one per host of the network-namespace testbed
(:mod:`pyg_dist.testing.cluster`), links shaped to ``LINK``: each host holds
its own part and the clusters folder (storage every host reads; with
``--regroup-from peers`` only the first group is read from it).
"""
import argparse
import json
import os
import shutil
import statistics
import tempfile
from pathlib import Path

import torch
from cluster import CORA_ROOT, collected, load_graph, testbed_arguments

import pyg_dist
from pyg_dist.config import Evaluation, GradientOnly, GradSync, GraphParallel
from pyg_dist.halo import parse_policy
from pyg_dist.models import GNN
from pyg_dist.train import train

# Hidden width of 2-layer models, and of deeper ones (a 16-wide 8-layer model on Cora
# barely leaves its first plateau within 200 epochs; at 64 it trains in ~40).
HIDDEN = {"cora": 16, "community": 128}
HIDDEN_DEEP = {"cora": 64, "community": 128}

# (label, GradientOnly options of the gradient-only rows or grad_compress, halo policy)
MODES = [
    ("exact", {}, "exact"),
    ("auto", {}, "auto"),
    ("isolated, no correction", {}, "isolated"),
    ("gradient-only, node", {"correction": "node"}, "exact"),
    ("gradient-only, batch", {"correction": "batch"}, "exact"),
    ("gradient-only, none", {"correction": "none"}, "exact"),
]
COMPRESSIONS = ["none", "fp16", "powersgd:4", "covap:2", "covap:4", "covap:auto"]


def rank_body(parts_dir, kind, layers, hidden, classes, seed, epochs, runs, eval_every,
              regroup, regroup_from="folder"):
    rows = []
    for label, options, halo in runs:
        data = pyg_dist.DistData.load(parts_dir, halo=parse_policy(halo))
        torch.manual_seed(seed)
        model = GNN(kind, data.x.size(1), hidden, classes, layers=layers, dropout=0.5,
                    residual=layers > 2)
        torch.manual_seed(seed * 1000 + data.rank)
        options = dict(options)
        grad_sync = GradSync(options.pop("grad_compress", None))
        strategy = (GradientOnly(**options, regroup_every=regroup[0], regroup=regroup[1],
                                 regroup_from=regroup_from)
                    if label.startswith("gradient-only") else GraphParallel())
        result = train(model, data, epochs, strategy=strategy, grad_sync=grad_sync,
                       evaluation=Evaluation(every=eval_every), progress=False)
        summary = result.summary()
        rows.append({
            "mode": label, "test_acc": result.test_acc,
            "halo_bytes": (summary["halo_bytes_fwd"] + summary["halo_bytes_bwd"]) / epochs,
            "grad_bytes": summary["grad_bytes"] / epochs,
            "epoch_s": statistics.median(e.seconds for e in result.history[1:]),
            "regroup_s": summary["regroup_seconds"],
        })
    return rows if data.rank == 0 else None


def table(title, runs, base_label):
    """runs: one list of rows per seed; prints and returns the lines."""
    by_mode = {}
    for rows in runs:
        for row in rows:
            by_mode.setdefault(row["mode"], []).append(row)
    base = by_mode[base_label]
    base_acc = statistics.mean(r["test_acc"] for r in base)
    base_time = statistics.median(r["epoch_s"] for r in base)
    base_grad = base[0]["grad_bytes"]
    print(f"\n{title}; {len(runs)} seed(s)")
    print("| mode | test acc (± sd over seeds) | Δ acc | halo MB/epoch | grad MB/epoch | grad vs "
          f"{base_label} | epoch s | vs {base_label} | regroup s |\n"
          "|---|---|---|---|---|---|---|---|---|")
    lines = []
    for label, rows in by_mode.items():
        acc = statistics.mean(r["test_acc"] for r in rows)
        line = {"title": title, "mode": label, "test_acc": acc, "delta": acc - base_acc,
                "seeds": [r["test_acc"] for r in rows],
                "halo_mb": rows[0]["halo_bytes"] / 1e6, "grad_mb": rows[0]["grad_bytes"] / 1e6,
                "grad_ratio": rows[0]["grad_bytes"] / max(base_grad, 1),
                "epoch_s": statistics.median(r["epoch_s"] for r in rows),
                "regroup_s": statistics.mean(r["regroup_s"] for r in rows)}
        line["ratio"] = line["epoch_s"] / base_time
        lines.append(line)
        spread = (f" ± {100 * statistics.stdev(line['seeds']):.2f}" if len(rows) > 1 else "")
        print(f"| {label} | {100 * acc:.2f}%{spread} | {100 * line['delta']:+.2f} | "
              f"{line['halo_mb']:.3f} | {line['grad_mb']:.3f} | {line['grad_ratio']:.2f}x | "
              f"{line['epoch_s']:.3f} | {line['ratio']:.2f}x | {line['regroup_s']:.3f} |",
              flush=True)
    return lines


def launch(args, setup, kind, layers, runs, seeds):
    """Every run of ``runs`` on fresh ranks, once per seed; rank 0's rows."""
    parts, widths, classes, epochs = setup
    hidden = widths[layers > 2]
    if args.testbed:
        return [on_testbed(args, parts, hidden, classes, epochs, kind, layers, runs, seed)
                for seed in range(seeds)]
    return [pyg_dist.launch(rank_body, args.parts, timeout=7200, args=(
        parts, kind, layers, hidden, classes, seed, epochs, runs, args.eval_every,
        (args.regroup_every, args.regroup), args.regroup_from))[0] for seed in range(seeds)]


def worker(args):
    """A torchrun rank on the testbed: every run; rank 0 prints one JSON line."""
    pyg_dist.init()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    rows = rank_body("parts", args.kind, args.worker_layers, args.hidden, args.classes,
                     args.seed, args.epochs, [tuple(r) for r in json.loads(args.runs)],
                     args.eval_every, (args.regroup_every, args.regroup), args.regroup_from)
    if rows is not None:
        print("ROWS " + json.dumps(rows), flush=True)
    pyg_dist.shutdown()


def on_testbed(args, parts, hidden, classes, epochs, kind, layers, runs, seed):
    """``rank_body`` on one host per rank of the namespace testbed."""
    from pyg_dist.testing.cluster import Cluster

    with Cluster(hosts=args.parts, rate=args.testbed) as cluster:
        cluster.distribute(parts)
        for host in cluster.hosts:  # the clusters: storage every host can read
            shutil.copytree(Path(parts) / "clusters", host.workdir / "parts" / "clusters")
        worker_args = [str(Path(__file__).resolve()), "--worker", "--runs", json.dumps(runs),
                       "--kind", kind, "--worker-layers", str(layers), "--hidden", str(hidden),
                       "--classes", str(classes), "--seed", str(seed), "--epochs", str(epochs),
                       "--eval-every", str(args.eval_every), "--regroup-every",
                       str(args.regroup_every), "--regroup", args.regroup, "--regroup-from",
                       args.regroup_from]
        results = cluster.run(cluster.torchrun(worker_args),
                              env={"OMP_NUM_THREADS": "1", "PYG_DIST_TIMEOUT": "3600"},
                              timeout=6 * 3600)
    return collected(results, "testbed run failed", "ROWS ")[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["cora", "community"])
    parser.add_argument("--models", nargs="+", default=["gcn", "sage"])
    parser.add_argument("--layers", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument("--seeds", type=int, default=3, help="seeds of the 2-layer runs")
    parser.add_argument("--seeds-deep", type=int, default=1, help="seeds of deeper runs")
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--clusters-per-part", type=int, default=4)
    parser.add_argument("--regroup-every", type=int, default=50)
    parser.add_argument("--regroup", default="sweep", choices=["sweep", "random", "home"])
    parser.add_argument("--modes", nargs="+", default=None, metavar="LABEL",
                        help="only these rows (labels as printed; the first is the baseline)")
    parser.add_argument("--cora-root", default=str(CORA_ROOT))
    parser.add_argument("--community-nodes", type=int, default=100_000)
    parser.add_argument("--epochs-cora", type=int, default=200)
    parser.add_argument("--epochs-community", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--no-compress", action="store_true",
                        help="skip the gradient compressions")
    parser.add_argument("--compress-only", action="store_true",
                        help="only the gradient compressions")
    parser.add_argument("--regroup-from", default="folder", choices=["folder", "peers"])
    parser.add_argument("--hidden-deep", type=int, default=None,
                        help="hidden width of models deeper than 2 layers (default: 64 on "
                             "cora, 128 on community)")
    parser.add_argument("--json", default=None, help="write the table rows here")
    testbed_arguments(parser)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    parser.add_argument("--hidden", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    lines, where = [], f", testbed {args.testbed}" if args.testbed else ""
    with tempfile.TemporaryDirectory(prefix="pyg_dist-bench-") as tmp:
        for graph in args.datasets:
            data, epochs = load_graph(graph, args, tmp)
            parts = Path(tmp) / f"{graph}-parts"
            meta = pyg_dist.partition(data, args.parts, parts, method="metis",
                                      clusters_per_part=args.clusters_per_part)
            clusters = json.loads((parts / "clusters" / "meta.json").read_text())
            print(f"\n{graph}: {data.num_nodes} nodes, {data.num_edges} edges, {epochs} epochs; "
                  f"{args.parts} parts of {args.clusters_per_part} METIS clusters: parts cut "
                  f"{meta.edge_cut / meta.num_edges:.1%} of edges, clusters "
                  f"{clusters['edge_cut'] / meta.num_edges:.1%}", flush=True)
            widths = (HIDDEN[graph], args.hidden_deep or HIDDEN_DEEP[graph])
            setup = (str(parts), widths, meta.num_classes, epochs)

            if not args.compress_only:
                for kind in args.models:
                    runs = [m for m in MODES if args.modes is None or m[0] in args.modes]
                    for layers in args.layers:
                        seeds = args.seeds if layers == 2 else args.seeds_deep
                        lines += table(f"{graph}, {kind}, {layers} layers, {args.regroup}"
                                       f"{where}",
                                       launch(args, setup, kind, layers, runs, seeds),
                                       runs[0][0])
            if not args.no_compress:
                runs = [(spec, {"grad_compress": spec}, "exact") for spec in COMPRESSIONS]
                lines += table(f"{graph}, gcn, 2 layers, exact, gradient compression{where}",
                               launch(args, setup, "gcn", 2, runs, args.seeds), "none")
            if args.json:
                Path(args.json).write_text(json.dumps(lines, indent=1))


if __name__ == "__main__":
    main()
