"""Heterogeneous training, distributed vs single-process PyG, on synthetic-mag.

Trains the same model of ``pyg_dist.models.hetero`` (``hetero-sage``:
``to_hetero`` of a two-layer GraphSAGE; ``hgt``: two ``HGTConv`` layers and a
linear head; ``rgcn``: two ``RGCNConv`` layers with basis decomposition on the
homogeneous view) full-batch
with Adam on the papers' training loss, once in one process on the whole
``HeteroData`` (PyG) and once on ``--ranks`` ranks of a METIS cut per halo
policy, and prints per run: test accuracy, mean epoch time (first epoch left
out), peak RSS of the largest rank and of the single process, and the halo
bytes per epoch (sent, forward and backward, summed over ranks) per exchange:
``<layer>[<source type>]``, one per layer and source type.

    python benchmarks/hetero.py                      # 1/10 of ogbn-mag, 4 ranks
    python benchmarks/hetero.py --num-nodes 20000 --epochs 10 --model hgt rgcn \
        [--json out.json]

Several ``--model`` run one after another on the same cut; ``--json`` also
writes each model's runs to the file.

Not a test: numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F

import pyg_dist
from pyg_dist.datasets import synthetic_mag
from pyg_dist.datasets.hetero import MAG_NODES
from pyg_dist.halo import parse_policy
from pyg_dist.models.hetero import HETERO_MODELS, hetero_model
from pyg_dist.nn import to_distributed
from pyg_dist.runtime.distributed import all_reduce_gradients, all_reduce_values


def build(kind: str, metadata, hidden: int, out: int, width: int):
    return hetero_model(kind, metadata, width, hidden, out, "paper", seed=0)


def paper_logits(kind: str, model, data, homogeneous):
    """The model's paper rows: it reads the homogeneous view (RGCN) or the
    dicts."""
    if kind != "rgcn":
        return model(data.x_dict, data.edge_index_dict)
    h = homogeneous
    return model(h.x, h.edge_index, h.edge_type, h.node_type)


def fit(kind, model, data, homogeneous, epochs, lr, reduce):
    """Trains full-batch; returns test accuracy and epoch times. ``reduce``
    sums a list of floats over ranks (identity in one process)."""
    paper = data["paper"]
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    num_train = reduce([float(paper.train_mask.sum())])[0]
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        model.train()
        optimizer.zero_grad()
        out = paper_logits(kind, model, data, homogeneous)
        loss = F.cross_entropy(out[paper.train_mask], paper.y[paper.train_mask],
                               reduction="sum") / num_train
        loss.backward()
        all_reduce_gradients(model.parameters())
        optimizer.step()
        times.append(time.perf_counter() - start)
        if hasattr(data, "ledger"):
            data.ledger.next_step()
    model.eval()
    with torch.no_grad():
        pred = paper_logits(kind, model, data, homogeneous).argmax(-1)
    correct, total = reduce([float((pred[paper.test_mask] == paper.y[paper.test_mask]).sum()),
                             float(paper.test_mask.sum())])
    return correct / total, times


def single_process(kind, num_nodes, seed, epochs, lr, hidden):
    data = synthetic_mag(num_nodes=num_nodes, seed=seed)
    homogeneous = None
    if kind == "rgcn":
        homogeneous = data.to_homogeneous()
    model = build(kind, data.metadata(), hidden, int(data["paper"].y.max()) + 1, 128)
    acc, times = fit(kind, model, data, homogeneous, epochs, lr, lambda v: v)
    return {"test_acc": acc, "epoch_s": sum(times[1:]) / max(len(times) - 1, 1),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def rank_main(folder, kind, halo, epochs, lr, hidden, num_classes):
    data = pyg_dist.DistHeteroData.load(folder, halo=parse_policy(halo))
    homogeneous = data.to_homogeneous() if kind == "rgcn" else None
    if homogeneous is not None:
        homogeneous.edge_index.registry = data.registry
    model = to_distributed(build(kind, data.metadata(), hidden, num_classes, 128))
    acc, times = fit(kind, model, data, homogeneous, epochs, lr,
                     lambda v: all_reduce_values(v, "sum"))
    ledger = homogeneous.ledger if homogeneous is not None else data.ledger
    traffic = defaultdict(float)
    for (_, name, direction), entry in ledger.entries.items():
        if direction in ("fwd", "bwd") and entry.bytes_sent:
            traffic[name] += entry.bytes_sent / epochs
    return {"test_acc": acc, "epoch_s": sum(times[1:]) / max(len(times) - 1, 1),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "bytes_per_epoch": dict(traffic)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-nodes", type=int, default=sum(MAG_NODES.values()) // 10)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--model", nargs="+", choices=HETERO_MODELS, default=["hetero-sage"])
    parser.add_argument("--halo", default="exact;auto",
                        help="halo policy specs, separated by ';'")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write every model's runs to this file")
    args = parser.parse_args()

    graph = synthetic_mag(num_nodes=args.num_nodes, seed=args.seed)
    num_classes = int(graph["paper"].y.max()) + 1
    folder = tempfile.mkdtemp() + "/mag"
    meta = pyg_dist.partition(graph, args.ranks, folder, method="metis", seed=args.seed)
    del graph
    print(f"synthetic-mag, {meta.num_nodes} nodes, {meta.num_edges} edges, {args.ranks} "
          f"parts (METIS: {meta.edge_cut} edges cut)")
    models = []
    for kind in args.model:
        models.append({"model": kind, "rows": compare(args, kind, folder, num_classes)})
        if args.json:
            Path(args.json).write_text(json.dumps(
                {"args": vars(args), "num_nodes": meta.num_nodes, "num_edges": meta.num_edges,
                 "edge_cut": meta.edge_cut, "models": models}, indent=1))


def compare(args, kind: str, folder: str, num_classes: int) -> list[dict]:
    """One model in one process and on the ranks per halo policy; prints
    and returns the runs."""
    base = pyg_dist.launch(single_process, 1, args=(kind, args.num_nodes, args.seed,
                                                    args.epochs, args.lr, args.hidden))[0]
    rows = [{"run": "PyG, 1 process", **base}]
    for halo in args.halo.split(";"):
        results = pyg_dist.launch(rank_main, args.ranks, args=(
            folder, kind, halo, args.epochs, args.lr, args.hidden, num_classes))
        traffic: dict[str, float] = defaultdict(float)
        for r in results:
            for name, value in r["bytes_per_epoch"].items():
                traffic[name] += value
        rows.append({"run": f"{args.ranks} ranks, {halo}", "ranks": args.ranks, "halo": halo,
                     "test_acc": results[0]["test_acc"],
                     "epoch_s": max(r["epoch_s"] for r in results),
                     "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
                     "bytes_per_epoch": dict(sorted(traffic.items()))})
    print(f"\nmodel {kind}\n{'run':<22} {'test acc':>8} {'epoch s':>8} {'x PyG':>6} "
          f"{'peak RSS MB':>11} {'x PyG':>6} {'MB/epoch':>9}")
    for row in rows:
        mb = sum(row.get("bytes_per_epoch", {}).values()) / 2**20
        print(f"{row['run']:<22} {row['test_acc']:>8.4f} {row['epoch_s']:>8.3f} "
              f"{row['epoch_s'] / base['epoch_s']:>6.2f} {row['peak_rss_mb']:>11.0f} "
              f"{row['peak_rss_mb'] / base['peak_rss_mb']:>6.2f} {mb:>9.2f}")
    for row in rows[1:]:
        print(f"bytes per epoch per exchange, {row['run']}:")
        for name, value in row["bytes_per_epoch"].items():
            if value:
                print(f"  {name:<28} {value / 2**20:10.3f} MB")
    return rows


if __name__ == "__main__":
    main()
