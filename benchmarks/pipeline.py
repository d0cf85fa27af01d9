"""Deep GNNs on a grid of graph parts × layer stages, against exact graph-parallel
training of the same model, on local gloo ranks.

    python benchmarks/pipeline.py [--datasets cora community] [--layers 8 16 32]
        [--ranks 4] [--chunks 4] [--model gcn2] [--initial-rows recompute]
        [--accuracy-layers 16] [--seeds 3]
        [--epochs-cora 300] [--epochs-timing 8] [--community-nodes 100000]
        [--eval-every 10] [--json out.json]
    sudo python benchmarks/pipeline.py --testbed 1gbit [--datasets community] [--layers 32] ...

For each graph and depth, every layout of ``--ranks`` ranks (parts × stages:
4x1 is graph parallelism, 1x4 a pure layer pipeline) trained with
``--chunks`` chunks, and the baseline: 4x1 with one chunk (exact graph
parallel). Per row: training bytes per epoch of all ranks (halo rows and
their gradients, stage-boundary activations and their gradients; counted,
and predicted by :mod:`pyg_dist.strategies.layer_pipeline.cost`), their ratio to the
baseline's, the median epoch time and its ratio, the bubble (share of an
epoch the average rank waited on a stage boundary) and, at the depths of
``--accuracy-layers``, test accuracy (mean over seeds, best validation epoch)
and its difference to the baseline. Other depths train ``--epochs-timing``
epochs, one seed. The cost model's pick per depth is printed and checked
against the counted bytes. Baselines are measured in the same run.

GCNII's initial rows are recomputed on every stage unless ``--initial-rows
send`` (then they cross every stage boundary with the rows).
``community`` is the arxiv-shaped community graph of :mod:`pyg_dist.datasets`
resized to ``--community-nodes``. With ``--testbed LINK`` (root, iproute2) the
ranks run one per host of the network-namespace testbed
(:mod:`pyg_dist.testing.cluster`) on links shaped to ``LINK`` under torchrun,
each host holding meta.json and its own part of every cut. The GCNII recipe (hidden 64, dropout 0.6,
Adam lr 0.01, weight decay 0.01 on convolutions and 5e-4 on the projections).
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from cluster import CORA_ROOT, collected, load_graph, testbed_arguments

import pyg_dist
from pyg_dist.config import Evaluation, GraphParallel, LayerPipeline
from pyg_dist.models import DeepGNN
from pyg_dist.strategies import layer_pipeline as pipeline
from pyg_dist.strategies.layer_pipeline import best_layout, halo_rows, layout_costs
from pyg_dist.train import train

HIDDEN = 64


def layouts(ranks, layers, chunks):
    """(name, parts, stages, chunks): the baseline first."""
    out = [(f"{ranks}x1", ranks, 1, 1)]
    for stages in range(1, ranks + 1):
        if ranks % stages == 0 and stages <= layers:
            out.append((f"{ranks // stages}x{stages}", ranks // stages, stages, chunks))
    return out


def rank_body(folders, kind, layers, classes, seed, epochs, eval_every, runs, initial_rows):
    rows = []
    for name, parts, stages, chunks in runs:
        if stages == 1 and chunks == 1:
            data = pyg_dist.DistData.load(folders[parts])
        else:
            data = pipeline.load(folders[parts], stages)
        torch.manual_seed(seed)
        model = DeepGNN(kind, data.x.size(1), HIDDEN, classes, layers=layers, dropout=0.6)
        torch.manual_seed(seed * 1000 + pyg_dist.runtime.distributed.rank())
        optimizer = torch.optim.Adam([
            {"params": model.convs.parameters(), "weight_decay": 0.01},
            {"params": model.lins.parameters(), "weight_decay": 5e-4}], lr=0.01)
        strategy = (GraphParallel() if stages == 1 and chunks == 1 else
                    LayerPipeline(stages=stages, chunks=chunks, initial_rows=initial_rows))
        result = train(model, data, epochs, strategy=strategy, optimizer=optimizer,
                       evaluation=Evaluation(every=eval_every), progress=False)
        later = result.history[1:]  # the first epoch fills the history tables
        rows.append({
            "layout": name, "chunks": chunks, "test_acc": result.test_acc,
            "bytes": statistics.mean(e.halo_bytes_fwd + e.halo_bytes_bwd + e.stage_bytes
                                     for e in later),
            "stage_bytes": statistics.mean(e.stage_bytes for e in later),
            "epoch_s": statistics.median(e.seconds for e in later),
            "bubble": statistics.median(e.stage_seconds / e.seconds for e in later),
        })
    return rows if pyg_dist.runtime.distributed.rank() == 0 else None


def worker(args):
    """A torchrun rank on the testbed: every layout; rank 0 prints one JSON line."""
    pyg_dist.init()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    folders = {int(k): v for k, v in json.loads(args.folders).items()}
    rows = rank_body(folders, args.model, args.worker_layers, args.classes, args.seed,
                     args.epochs, args.eval_every, [tuple(r) for r in json.loads(args.runs)],
                     args.initial_rows)
    if rows is not None:
        print("ROWS " + json.dumps(rows), flush=True)
    pyg_dist.shutdown()


def on_testbed(link, folders, layers, classes, seed, epochs, eval_every, runs, args):
    """``rank_body`` on one host per rank of the namespace testbed."""
    from pyg_dist.testing.cluster import Cluster

    with Cluster(hosts=args.ranks, rate=link) as cluster:
        for host in cluster.hosts:  # what a machine holds: its own part of every cut
            for parts, folder in folders.items():
                target = host.workdir / f"parts{parts}"
                target.mkdir(parents=True)
                shutil.copy(Path(folder) / "meta.json", target)
                shutil.copy(Path(folder) / f"part_{host.index % parts}.pt", target)
        worker_args = [str(Path(__file__).resolve()), "--worker", "--folders",
                       json.dumps({p: f"parts{p}" for p in folders}), "--runs",
                       json.dumps(runs), "--worker-layers", str(layers), "--classes",
                       str(classes), "--seed", str(seed), "--epochs", str(epochs),
                       "--eval-every", str(eval_every), "--model", args.model,
                       "--initial-rows", args.initial_rows]
        results = cluster.run(cluster.torchrun(worker_args),
                              env={"OMP_NUM_THREADS": "1", "PYG_DIST_TIMEOUT": "3600"},
                              timeout=6 * 3600)
    return collected(results, "testbed run failed", "ROWS ")[0]


def table(title, runs, costs, baseline, accuracy):
    """runs: one list of rows per seed; ``baseline`` the exact graph-parallel
    layout's name; prints and returns the lines."""
    by_run = {}
    for rows in runs:
        for row in rows:
            by_run.setdefault((row["layout"], row["chunks"]), []).append(row)
    base = by_run[(baseline, 1)]
    base_acc = statistics.mean(r["test_acc"] for r in base)
    base_time = statistics.median(r["epoch_s"] for r in base)
    base_bytes = base[0]["bytes"]
    print(f"\n{title}; {len(runs)} seed(s)")
    print("| layout | chunks | MB/epoch | predicted | vs exact | epoch s | vs exact | bubble | "
          "test acc | Δ acc |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = []
    for (layout, chunks), rows in by_run.items():
        acc = statistics.mean(r["test_acc"] for r in rows)
        line = {"title": title, "layout": layout, "chunks": chunks, "test_acc": acc,
                "delta": acc - base_acc, "seeds": [r["test_acc"] for r in rows],
                "mb": rows[0]["bytes"] / 1e6, "predicted_mb": costs[layout].total / 1e6,
                "bytes_ratio": rows[0]["bytes"] / max(base_bytes, 1),
                "epoch_s": statistics.median(r["epoch_s"] for r in rows),
                "bubble": statistics.median(r["bubble"] for r in rows)}
        line["ratio"] = line["epoch_s"] / base_time
        lines.append(line)
        acc_cells = (f"{100 * acc:.2f}% | {100 * line['delta']:+.2f}" if accuracy else "- | -")
        print(f"| {layout} | {chunks} | {line['mb']:.3f} | {line['predicted_mb']:.3f} | "
              f"{line['bytes_ratio']:.3f}x | {line['epoch_s']:.3f} | {line['ratio']:.2f}x | "
              f"{line['bubble']:.2f} | {acc_cells} |", flush=True)
    pick = best_layout(list(costs.values()))
    counted = {line["layout"]: line["mb"] for line in lines
               if (line["layout"], line["chunks"]) != (baseline, 1)}
    fewest = min(counted, key=counted.get)
    exact_mb = base_bytes / 1e6
    predicted_factor = costs[baseline].total / max(pick.total, 1)
    print(f"cost model picks {pick.name} (predicted {predicted_factor:.2f}x fewer bytes than "
          f"exact graph parallel); counted: fewest bytes {fewest}, "
          f"{exact_mb / max(counted[pick.name], 1e-12):.2f}x fewer for {pick.name}", flush=True)
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["cora", "community"])
    parser.add_argument("--layers", nargs="+", type=int, default=[8, 16, 32])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--model", default="gcn2", choices=["gcn2", "resgcn", "ressage"])
    parser.add_argument("--initial-rows", default="recompute", choices=["send", "recompute"],
                        help="gcn2: send the initial rows across stage boundaries or "
                             "recompute them on every stage")
    parser.add_argument("--accuracy-layers", nargs="*", type=int, default=[16],
                        help="depths trained for accuracy (cora only), over --seeds")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cora-root", default=str(CORA_ROOT))
    parser.add_argument("--community-nodes", type=int, default=100_000)
    parser.add_argument("--epochs-cora", type=int, default=300)
    parser.add_argument("--epochs-community", type=int, default=4)
    parser.add_argument("--epochs-timing", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--json", default=None, help="write the table rows here")
    testbed_arguments(parser)
    parser.add_argument("--folders", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    lines = []
    with tempfile.TemporaryDirectory(prefix="pyg_dist-bench-") as tmp:
        for graph in args.datasets:
            data, epochs = load_graph(graph, args, tmp)
            folders, halo = {}, {}
            for parts in [d for d in range(1, args.ranks + 1) if args.ranks % d == 0]:
                folders[parts] = str(Path(tmp) / f"{graph}-{parts}")
                meta = pyg_dist.partition(data, parts, folders[parts], method="metis")
                halo[parts] = halo_rows(folders[parts])
            print(f"\n{graph}: {data.num_nodes} nodes, {data.num_edges} edges; halo rows per "
                  f"cut: {halo}", flush=True)
            for layers in args.layers:
                accuracy = graph == "cora" and layers in args.accuracy_layers
                seeds = args.seeds if accuracy else 1
                run_epochs = epochs if accuracy else min(epochs, args.epochs_timing)
                eval_every = args.eval_every if accuracy else run_epochs
                runs = layouts(args.ranks, layers, args.chunks)
                costs = {c.name: c for c in layout_costs(
                    args.ranks, data.num_nodes, halo, layers, HIDDEN,
                    2 * HIDDEN if args.model == "gcn2" and args.initial_rows == "send"
                    else HIDDEN)}
                if args.testbed:
                    results = [on_testbed(args.testbed, folders, layers, meta.num_classes,
                                          seed, run_epochs, eval_every, runs, args)
                               for seed in range(seeds)]
                else:
                    results = [pyg_dist.launch(rank_body, args.ranks, timeout=4 * 3600, args=(
                        folders, args.model, layers, meta.num_classes, seed, run_epochs,
                        eval_every, runs, args.initial_rows))[0] for seed in range(seeds)]
                where = f", testbed {args.testbed}" if args.testbed else ""
                lines += table(f"{graph}, {args.model}, {layers} layers, {run_epochs} "
                               f"epochs{where}", results, costs, runs[0][0], accuracy)
                if args.json:
                    Path(args.json).write_text(json.dumps(lines, indent=1))


if __name__ == "__main__":
    sys.exit(main())
