"""Rows a vertex cover saves: halo rows per layer exchange today against the
minimum vertex cover of each pair's cut edges (rows plus partial sums).

    python benchmarks/preaggregate.py [--datasets cora community]
        [--parts 2 4 8] [--community-nodes 169343] [--json out.json]
    python benchmarks/preaggregate.py --train [--datasets cora community]
        [--parts 2 4] [--epochs 20] [--community-nodes 20000] [--json out.json]

Each graph is cut with METIS (:func:`pyg_dist.partitioning.cut.metis_cut`, no
folder written). ``today`` is the rows one exchange of one layer sends, summed
over ordered pairs of ranks (every rank's halo); ``cover`` the same under
:func:`pyg_dist.partitioning.cover.vertex_cover_plan`; ``ratio`` is
cover / today (the baseline is measured in the same run); ``plan s`` the time
to compute the cover plan. Datasets: ``cora`` (the Planetoid files shipped in
tests/data) and ``community``, the arxiv-shaped seeded community graph of
:mod:`pyg_dist.datasets` at ``--community-nodes``.

``--train`` runs real exchanges instead: a two-layer GCN (16 hidden, dropout
0.5, exact halo) trained for ``--epochs`` on ``--parts`` local gloo ranks,
from the same weights and seeds, with rows (``rows``) and with
``GraphParallel(pre_aggregate=True)`` (``pre-agg``). Per epoch from the third
on (the first two also fetch layer 0's static input halo once, and set the
cover up), summed over ranks and over training and evaluation traffic: halo
rows and partial sums sent, and payload bytes; ``ratio`` is pre-agg / rows.
``total B`` is every byte of the run, one-offs included, ``setup B`` the
cover's setup exchange among them. Both runs must give the same losses and
accuracies (exact, float32 summation order aside).
"""
import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch

import pyg_dist
from pyg_dist.config import GraphParallel
from pyg_dist.datasets import community_graph, load_dataset, preset
from pyg_dist.models import GNN
from pyg_dist.partitioning.cover import vertex_cover_plan
from pyg_dist.partitioning.cut import metis_cut
from pyg_dist.train import train

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


def train_rank(folder, classes, epochs, pre_aggregate, seed=0):
    """One rank's training run: its traffic per step and direction (rows,
    partial sums, bytes; the cover's setup apart) and the run's history."""
    data = pyg_dist.DistData.load(folder)
    torch.manual_seed(seed)
    model = GNN("gcn", data.x.size(1), 16, classes, dropout=0.5)
    result = train(model, data, epochs, progress=False,
                   strategy=GraphParallel(pre_aggregate=pre_aggregate))
    traffic = [(e["step"], e["layer"], e["direction"], e["rows_sent"], e["partial_sums_sent"],
                e["bytes_sent"]) for e in data.ledger.rows()
               if e["direction"] in ("fwd", "bwd", "eval")]
    history = [(e.loss, e.train_acc, e.val_acc, e.test_acc) for e in result.history]
    return traffic, history


#: Steps of one-off traffic (layer 0's static halo: a first call, then one fetch).
WARMUP = 2


def per_epoch(per_rank, epochs):
    """Rows, partial sums and bytes sent per epoch after :data:`WARMUP`
    (all ranks), every byte of the run, and the cover's setup bytes."""
    rows = sums = nbytes = total = setup = 0
    for traffic, _ in per_rank:
        for step, layer, _, r, p, b in traffic:
            total += b
            if layer == "cover":
                setup += b
            elif step >= WARMUP:
                rows, sums, nbytes = rows + r, sums + p, nbytes + b
    steps = max(epochs - WARMUP, 1)
    return rows / steps, sums / steps, nbytes / steps, total, setup


def measure_training(name, data, num_parts, epochs, tmp):
    folder = Path(tmp) / f"{name}-{num_parts}"
    pyg_dist.partition(data, num_parts, folder, method="metis", seed=0, overwrite=True)
    classes = int(data.y.max()) + 1
    out = {}
    for label, flag in (("rows", False), ("pre-agg", True)):
        per_rank = pyg_dist.launch(train_rank, num_parts,
                                   args=(str(folder), classes, epochs, flag))
        rows, sums, nbytes, total, setup = per_epoch(per_rank, epochs)
        out[label] = {"rows": rows, "partial_sums": sums, "bytes": nbytes, "total": total,
                      "setup": setup, "history": per_rank[0][1]}
    plain, pre = out["rows"]["history"], out["pre-agg"]["history"]
    loss_diff = max(abs(a[0] - b[0]) for a, b in zip(plain, pre))
    return {"dataset": name, "parts": num_parts, "epochs": epochs,
            "rows": out["rows"], "pre_agg": out["pre-agg"],
            "ratio_rows": ((out["pre-agg"]["rows"] + out["pre-agg"]["partial_sums"])
                           / max(out["rows"]["rows"], 1)),
            "ratio_bytes": out["pre-agg"]["bytes"] / max(out["rows"]["bytes"], 1),
            "ratio_total": out["pre-agg"]["total"] / max(out["rows"]["total"], 1),
            "max_loss_diff": loss_diff,
            "same_accuracy": all(a[1:] == b[1:] for a, b in zip(plain, pre)),
            "test_acc": (plain[-1][3], pre[-1][3])}


def train_table(args):
    rows = []
    header = (f"{'dataset':<10} {'parts':>5} {'run':<8} {'rows/ep':>9} {'sums/ep':>8} "
              f"{'bytes/ep':>10} {'ratio':>6} {'total B':>10} {'setup B':>8} {'test acc':>8} "
              f"{'max dloss':>9}")
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.datasets:
            data = load_graph(name, args)
            for num_parts in args.parts:
                r = measure_training(name, data, num_parts, args.epochs, tmp)
                rows.append(r)
                for label, key, acc in (("rows", "rows", 0), ("pre-agg", "pre_agg", 1)):
                    run = r[key]
                    ratio = "" if key == "rows" else f"{r['ratio_bytes']:.3f}"
                    print(f"{name:<10} {num_parts:>5} {label:<8} {run['rows']:>9.0f} "
                          f"{run['partial_sums']:>8.0f} {run['bytes']:>10.0f} {ratio:>6} "
                          f"{run['total']:>10} {run['setup']:>8} {r['test_acc'][acc]:>8.4f} "
                          f"{r['max_loss_diff'] if key == 'pre_agg' else 0.0:>9.2g}",
                          flush=True)
                print(f"{'':<10} {'':>5} rows+sums / rows {r['ratio_rows']:.3f}, total bytes "
                      f"{r['ratio_total']:.3f}, same accuracies every epoch: "
                      f"{r['same_accuracy']}", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["cora", "community"])
    parser.add_argument("--parts", nargs="+", type=int, default=None,
                        help="(default: 2 4 8; with --train: 2 4)")
    parser.add_argument("--community-nodes", type=int, default=None,
                        help="(default: 169343; with --train: 20000)")
    parser.add_argument("--train", action="store_true",
                        help="train GCN with and without pre-aggregation on local ranks")
    parser.add_argument("--epochs", type=int, default=20, help="with --train")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    if args.parts is None:
        args.parts = [2, 4] if args.train else [2, 4, 8]
    if args.community_nodes is None:
        args.community_nodes = 20000 if args.train else 169343
    if args.train:
        rows = train_table(args)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
        return
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
