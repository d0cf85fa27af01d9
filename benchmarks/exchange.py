"""Exact halo exchange on local gloo ranks: bytes and time per epoch, each
transport, and the distributed epoch against a single-process PyG epoch.

    python benchmarks/exchange.py [--nodes 20000] [--parts 4] [--hidden 64] [--epochs 20]

An epoch is one training step (forward + backward + gradient all-reduce +
Adam) of a 2-layer GCN on the embedded synthetic graph. The baseline is the
same model with PyG's GCNConv on the whole graph in one process, measured in
the same run with the same threads in total.
"""
import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch_geometric.nn import GCNConv

import pyg_dist
from pyg_dist.datasets import synthetic
from pyg_dist.models import GNN
from pyg_dist.train import train_step


def rank_epochs(parts_dir, hidden, classes, epochs, transport, warmup):
    os.environ["PYG_DIST_TRANSPORT"] = transport
    data = pyg_dist.DistData.load(parts_dir)
    torch.manual_seed(0)
    model = GNN("gcn", data.x.size(1), hidden, classes, dropout=0.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    times = []
    for _ in range(warmup + epochs):
        torch.distributed.barrier()
        start = time.perf_counter()
        train_step(model, data, optimizer)
        times.append(time.perf_counter() - start)
        data.ledger.next_step()
    totals = data.ledger.totals()
    steps = warmup + epochs
    return {
        "epoch_s": statistics.median(times[warmup:]),
        "bytes_per_epoch": (totals["bytes_fwd"] + totals["bytes_bwd"]) / steps,
        "comm_s": totals["seconds"] / steps,
        "halo": data.edge_index.num_halo,
        "owned": data.num_nodes,
    }


def single_process_epoch(data, hidden, classes, epochs, warmup, threads, dropout=0.0):
    """Median training-step time of the 2-layer GCN with PyG's GCNConv, one process."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = GNN("gcn", data.num_features, hidden, classes, dropout=dropout)
    for conv in model.convs:  # plain PyG layers, same weights
        conv.__class__ = GCNConv
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    times = []
    for _ in range(warmup + epochs):
        start = time.perf_counter()
        train_step(model, data, optimizer)
        times.append(time.perf_counter() - start)
    return statistics.median(times[warmup:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--method", default="metis", choices=["metis", "random"])
    args = parser.parse_args()

    data = synthetic(num_nodes=args.nodes, seed=0)
    classes = int(data.y.max()) + 1
    threads = os.cpu_count() or 1
    print(f"graph: {data.num_nodes} nodes, {data.num_edges} edges, {data.num_features} features;"
          f" 2-layer GCN, hidden {args.hidden}; {args.parts} ranks on {threads} cores")
    base = single_process_epoch(data, args.hidden, classes, args.epochs, args.warmup, threads)
    print(f"single-process PyG epoch: {1e3 * base:.1f} ms")
    with tempfile.TemporaryDirectory() as tmp:
        parts_dir = Path(tmp) / "parts"
        meta = pyg_dist.partition(data, args.parts, parts_dir, method=args.method)
        print(f"{args.method} cut: {meta.edge_cut} edges cut, halo {meta.halo_sizes}")
        print(f"{'transport':>10} {'epoch ms':>9} {'comm ms':>8} {'halo KB/epoch':>14} "
              f"{'vs 1-proc PyG':>14}")
        for transport in ("p2p", "all_to_all"):
            per_rank = pyg_dist.launch(
                rank_epochs, args.parts,
                args=(str(parts_dir), args.hidden, classes, args.epochs, transport, args.warmup),
            )
            epoch = max(r["epoch_s"] for r in per_rank)
            comm = statistics.mean(r["comm_s"] for r in per_rank)
            sent = sum(r["bytes_per_epoch"] for r in per_rank)
            print(f"{transport:>10} {1e3 * epoch:>9.1f} {1e3 * comm:>8.1f} {sent / 1e3:>14.1f} "
                  f"{epoch / base:>13.2f}x")


if __name__ == "__main__":
    main()
