"""The link task's gather against the halo: bytes per epoch of each, with
uniform and per-source negatives, and the planner's prediction of the
gather's bytes against the ledger's.

    python benchmarks/link_bytes.py [--nodes 20000] [--parts 4] [--epochs 5]
        [--hidden 64] [--json out.json]

The graph is the arxiv-shaped seeded community graph of
:mod:`pyg_dist.datasets` (``--nodes`` nodes, 128 features), made undirected
and split by PyG's ``RandomLinkSplit`` (5% validation, 10% test, seeded:
:func:`pyg_dist.tasks.supervision.split_links`), cut by
METIS into ``--parts`` parts. A two-layer GCN (``--hidden`` wide, output
as wide) encodes, the dot product decodes, one negative per training edge;
``--epochs`` epochs of graph-parallel training under the exact halo policy
on ``--parts`` local gloo ranks, once with uniform negatives and once with
per-source negatives (``structured``: the negative shares the positive's
source). Per epoch from the third on (the first also builds the gather's
directory, the first two exchange layer 0's input: its transformed rows at the
first step, then the static features once), summed over the ranks:
``gather MB`` the bytes the pairs' rows, their gradients and their ids
moved, ``halo MB`` the halo rows forward and their gradients backward,
``ratio`` gather / halo (both measured in the same run). ``predicted``
says whether the bytes the planner worked out for every epoch
(:meth:`~pyg_dist.strategies.link_task.LinkTask.gather_bytes`) equal the
ledger's, epoch by epoch.
"""
import argparse
import json
import tempfile
from pathlib import Path

import torch
from torch_geometric.nn.models import GCN
from torch_geometric.transforms import ToUndirected

import pyg_dist
from pyg_dist.config import Evaluation
from pyg_dist.datasets import community_graph, preset
from pyg_dist.models.link import LinkModel
from pyg_dist.nn import to_distributed
from pyg_dist.strategies.link_task import LinkTask
from pyg_dist.tasks.supervision import split_links
from pyg_dist.train import train

KINDS = ("uniform", "structured")


def split_graph(args):
    data = community_graph(preset("synthetic-arxiv", num_nodes=args.nodes), seed=0)
    data = ToUndirected()(data)
    return split_links(data, seed=0, num_val=0.05, num_test=0.1)


def rank_body(parts, kind, epochs, hidden):
    data = pyg_dist.DistData.load(parts)
    torch.manual_seed(0)
    model = to_distributed(LinkModel(GCN(data.x.size(1), hidden, 2, out_channels=hidden)))
    task = LinkTask(data, negatives=kind)
    predicted = task.gather_bytes(range(1, epochs + 1), hidden * 4)
    result = train(model, task, epochs, evaluation=Evaluation(every=epochs), progress=False)
    return {"predicted": predicted,
            "gather": [e.gather_bytes for e in result.history],
            "halo": [e.halo_bytes_fwd + e.halo_bytes_bwd for e in result.history]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=20000)
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.epochs < 3:
        raise SystemExit("--epochs must be at least 3 (the first two epochs are left out)")
    split = split_graph(args)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        parts = Path(tmp) / "parts"
        pyg_dist.partition(split, args.parts, parts, method="metis", seed=0)
        for kind in KINDS:
            out = pyg_dist.launch(rank_body, args.parts,
                                  args=(str(parts), kind, args.epochs, args.hidden))[0]
            steady = range(2, args.epochs)
            gather = sum(out["gather"][e] for e in steady) / len(steady)
            halo = sum(out["halo"][e] for e in steady) / len(steady)
            rows.append({"negatives": kind, "nodes": args.nodes, "parts": args.parts,
                         "gather_mb": round(gather / 1e6, 2), "halo_mb": round(halo / 1e6, 2),
                         "ratio": round(gather / halo, 2),
                         "predicted": out["predicted"] == out["gather"],
                         "predicted_bytes": out["predicted"],
                         "gather_bytes": out["gather"], "halo_bytes": out["halo"]})
    print(f"{'negatives':<12}{'gather MB':>11}{'halo MB':>10}{'ratio':>8}  predicted")
    for r in rows:
        print(f"{r['negatives']:<12}{r['gather_mb']:>11.2f}{r['halo_mb']:>10.2f}"
              f"{r['ratio']:>7.2f}x  {'= ledger' if r['predicted'] else 'DIFFERS'}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
