"""Link prediction against PyG's own multi-GPU recipe: ``LinkNeighborLoader``
with DistributedDataParallel, against pyg_dist's full-graph link training,
same ranks, same graph, same split, same metric, on one machine.

    python benchmarks/peer_link.py [--graphs collab recommendation] [--ranks 4]
        [--time-budget SECONDS] [--epochs 2000] [--peer-epochs 100]
        [--eval-every 1] [--num-nodes N] [--users U --items I] [--json out.json]

The graphs (``GRAPHS``, each with its model, metric and both sides' settings):

* ``collab``: ``synthetic-collab`` (shaped like ogbl-collab: 235,868 nodes,
  average degree 8.2, 128 features), cut by ``RandomLinkSplit(num_val=0.05,
  num_test=0.1, is_undirected=True, add_negative_train_samples=False)``
  (``examples/link_pred.py``'s split, seeded by
  :func:`pyg_dist.tasks.supervision.split_links`; one negative per held-out
  positive);
  a ``GraphSAGE`` encoder 2x128 to 64 with the dot product, OGB's Hits@50;
* ``recommendation``: :func:`pyg_dist.datasets.synthetic_recommendation`
  (its own split: 10% of interactions for validation, 10% for test); PyG's
  ``LightGCN`` (64 wide, 2 layers) with the BPR loss (``lambda_reg=1e-4``)
  and one per-user negative per interaction, recall@20 over every item (the
  user's training items left out).

The peer (PyG's recipe, written anew) follows
``examples/multi_gpu/taobao.py`` of pyg-team/pytorch_geometric, PyG's
``LinkNeighborLoader`` + DDP example, with ``examples/link_pred.py``'s
model and evaluation:

* every rank holds the whole graph; the training edges are split into
  ``world_size`` equal chunks, one per rank
  (``edge_label_index.split(L // world, dim=1)[rank]``, as the recipe; a
  remainder of fewer than ``world_size`` edges is not trained on);
* ``LinkNeighborLoader(num_neighbors=[8, 4], batch_size=2048, shuffle=True,
  drop_last=True)`` with ``neg_sampling="binary"`` (one random pair per
  positive, the recipe's) for ``collab``, ``"triplet"`` (one random
  destination per positive, BPR's pairs) for ``recommendation``;
* ``torch.manual_seed(12345)`` before the model (ours starts from the same
  weights), DDP, ``Adam(lr=0.001)`` (the recipe's), the loss of each batch:
  binary cross entropy with logits, or PyG's ``LightGCN.recommendation_loss``
  on the embeddings of the batch's nodes (``LGConv`` normalises each sampled
  subgraph, as ``GCNConv`` does);
* evaluation on rank 0 after every ``--eval-every`` epochs (the recipe:
  every epoch), the others waiting at a barrier: ``link_pred.py``'s one
  full-graph forward of the encoder on the training graph, then the metric of
  the validation and test edges (both scored on the training graph's
  embeddings, as pyg_dist does); its time counts in the wall time.

Ours: :func:`pyg_dist.partition` of the same split (METIS), the same model
through :func:`~pyg_dist.nn.to_distributed` (``LinkModel`` on the encoder,
``DistLightGCN``), :func:`~pyg_dist.train.train` with exact halos, one
full-graph step per epoch over all training edges with one negative each
(uniform pairs, or per-source for BPR), ``Adam`` at the graph's ``ours_lr``
(chosen on validation, see ``GRAPHS``), evaluated on the same cadence by ``LinkTask``
(``metric=`` the graph's: Hits@50, or ``"recall@20"`` with ``num_users``, BPR and
per-user negatives, ranked by :func:`pyg_dist.tasks.recall_ndcg_at_k`: distributed, no
rank holds every score). Negatives on both sides are
uniform over all nodes (users and items alike for recommendation), false
negatives kept.

Reported per graph: both sides' best validation metric, the wall seconds
(training and evaluation, set-up apart) until each first reaches the peer's
best, their ratio, set-up seconds, and every rank's peak resident memory
above its import floor (VmHWM minus VmRSS when the rank's function starts,
everything imported, before the graph is read), with the ratio of the
largest ranks.

Departures, each forced by this machine: gloo on the CPU instead of NCCL;
``num_workers=0`` (the recipe uses 16 workers per rank; two cores are shared
by all ranks here); a time budget per side instead of the recipe's 20 epochs.

The peer needs a neighbour sampler (torch_sparse or pyg-lib); without one it
is skipped with the command that installs it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from peer_sampling import sampler_missing
from rss import current, peak
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.data import Data
from torch_geometric.loader import LinkNeighborLoader
from torch_geometric.nn.models import GraphSAGE, LightGCN

import pyg_dist
from pyg_dist.config import Adam, Evaluation
from pyg_dist.datasets import load_dataset, synthetic_recommendation
from pyg_dist.models.link import LinkModel
from pyg_dist.nn import to_distributed
from pyg_dist.runtime import cpu_ext
from pyg_dist.strategies.link_task import LinkTask
from pyg_dist.tasks.supervision import split_links
from pyg_dist.train import train

__all__ = ["GRAPHS", "Setup", "train_chunk", "hits_at", "recall_at", "subgraph_embedding",
           "peer_rank", "ours_rank"]

SEED = 12345
#: The recipe's loader (``examples/multi_gpu/taobao.py``).
FANOUTS, BATCH_SIZE, PEER_LR = [8, 4], 2048, 0.001


@dataclass(frozen=True)
class Setup:
    """One graph of the benchmark: its model, metric and our learning rate."""

    model: str  # "sage" (encoder + dot product) or "lightgcn"
    metric: str  # "hits@50" or "recall@20"
    hidden: int
    out: int
    layers: int
    ours_lr: float


#: Our learning rate is the only setting chosen for our side, on validation:
#: collab, lr in {0.001, 0.003, 0.005, 0.01, 0.03} on a 30,000-node cut of the
#: graph, one process, 60 to 80 epochs: 0.003 led (Hits@50 0.124 at epoch 50;
#: 0.005 0.126 and 0.001 0.077 at 80, 0.01 0.029 and 0.03 0.010 at 60; the
#: larger rates grow the dot products too fast); recommendation,
#: full-batch LightGCN, one step per epoch: lr in {0.003, 0.01, 0.02, 0.05,
#: 0.1} on a graph of 5,000 users and 3,000 items, 30 to 60 epochs: 0.01 and
#: 0.02 reach the plateau of validation recall@20 (0.431) within 4 epochs,
#: 0.003 within 8; 0.05 and 0.1 fall from it after 10.
GRAPHS = {
    "collab": Setup("sage", "hits@50", 128, 64, 2, 0.003),
    "recommendation": Setup("lightgcn", "recall@20", 64, 64, 2, 0.01),
}
#: The recommendation graph: users, items and interactions per user.
USERS, ITEMS, AVG_DEGREE = 30_000, 20_000, 20.0
PEER = "peer (PyG LinkNeighborLoader + DDP)"
OURS = "pyg_dist (full graph, exact)"


# -- pieces both sides share, checked in tests ---------------------------------------------

def train_chunk(edge_label_index: Tensor, rank: int, world_size: int) -> Tensor:
    """The recipe's chunk of the training edges of ``rank``:
    ``split(L // world_size, dim=1)[rank]`` (a remainder of fewer than
    ``world_size`` edges falls in a chunk no rank takes)."""
    size = edge_label_index.size(1) // world_size
    if size == 0:
        raise ValueError(f"{edge_label_index.size(1)} training edges cannot be split over "
                         f"{world_size} ranks; use fewer ranks")
    return edge_label_index.split(size, dim=1)[rank].clone()


def hits_at(pos: Tensor, neg: Tensor, k: int) -> float:
    """OGB's Hits@K in one process: the share of positives scored strictly
    above the ``k``-th highest negative (1 with fewer than ``k`` negatives)."""
    if neg.numel() < k:
        return 1.0
    kth = torch.topk(neg, k).values[-1]
    return float((pos > kth).float().mean())


def recall_at(z: Tensor, num_users: int, exclude: Tensor, target: Tensor, k: int,
              chunk: int = 2048) -> float:
    """Recall@K in one process: each user's items ranked by
    :math:`z_u^\\top z_i` over every item but those of ``exclude``; the share
    of its ``target`` items in its top ``k``, averaged over the users with
    targets (PyG's ``examples/lightgcn.py``). ``exclude`` and ``target`` are
    ``[2, *]`` (user, item) pairs, items numbered after the users."""
    users, items = z[:num_users], z[num_users:]
    total, seen = 0.0, 0
    for lo in range(0, num_users, chunk):
        hi = min(lo + chunk, num_users)
        scores = users[lo:hi] @ items.t()
        mask = (exclude[0] >= lo) & (exclude[0] < hi)
        scores[exclude[0, mask] - lo, exclude[1, mask] - num_users] = float("-inf")
        top = torch.topk(scores, min(k, items.size(0)), dim=1).indices
        mask = (target[0] >= lo) & (target[0] < hi)
        user, item = target[0, mask] - lo, target[1, mask] - num_users
        hit = (top[user] == item.view(-1, 1)).any(1).float()
        hits = torch.zeros(hi - lo).index_add_(0, user, hit)
        count = torch.bincount(user, minlength=hi - lo)
        has = count > 0
        total += float((hits[has] / count[has]).sum())
        seen += int(has.sum())
    return total / seen if seen else float("nan")


def subgraph_embedding(model, n_id: Tensor, edge_index: Tensor) -> Tensor:
    """``LightGCN.get_embedding`` on a sampled subgraph: the layer-0 rows of
    its nodes ``n_id``, propagated along its ``edge_index`` (local ids)."""
    x = model.embedding(n_id)
    out = x * model.alpha[0]
    for i, conv in enumerate(model.convs):
        x = conv(x, edge_index)
        out = out + x * model.alpha[i + 1]
    return out


def build_model(setup: Setup, num_features: int, num_nodes: int) -> nn.Module:
    """The PyG model both sides start from (seeded)."""
    torch.manual_seed(SEED)
    if setup.model == "lightgcn":
        return LightGCN(num_nodes, setup.hidden, setup.layers)
    return GraphSAGE(num_features, setup.hidden, setup.layers, out_channels=setup.out)


# -- the peer, on every rank ---------------------------------------------------------------

class PeerLink(nn.Module):
    """The recipe's model under DDP: the encoder on a sampled subgraph, then
    the dot product of each labelled pair (``sage``), or LightGCN's
    embeddings of the subgraph and the scores of each triplet (``lightgcn``)."""

    def __init__(self, model: nn.Module, kind: str) -> None:
        super().__init__()
        self.model, self.kind = model, kind

    def forward(self, batch) -> tuple[Tensor, ...]:
        if self.kind == "sage":
            h = self.model(batch.x, batch.edge_index)
            src, dst = batch.edge_label_index
            return ((h[src] * h[dst]).sum(-1),)
        z = subgraph_embedding(self.model, batch.n_id, batch.edge_index)
        src, pos, neg = batch.src_index, batch.dst_pos_index, batch.dst_neg_index.view(-1)
        named = torch.cat([src, pos, neg]).unique()
        return ((z[src] * z[pos]).sum(-1), (z[src] * z[neg]).sum(-1),
                self.model.embedding(batch.n_id[named]))


def _peer_loss(ddp: nn.Module, batch, kind: str) -> Tensor:
    out = ddp(batch)
    if kind == "sage":
        return F.binary_cross_entropy_with_logits(out[0], batch.edge_label)
    pos, neg, rows = out  # PyG's BPRLoss: recommendation_loss on the named nodes
    return -F.logsigmoid(pos - neg).mean() + 1e-4 * rows.pow(2).sum() / pos.numel()


@torch.no_grad()
def _peer_metrics(model: nn.Module, graph: dict, setup: Setup) -> tuple[float, float]:
    """Rank 0's validation and test metric: one full-graph forward on the
    training graph (``link_pred.py``'s ``test``), then the metric."""
    model.eval()
    if setup.model == "lightgcn":
        z = model.get_embedding(graph["edge_index"])
        return tuple(recall_at(z, graph["num_users"], graph["train"], graph[s], 20)
                     for s in ("val", "test"))  # type: ignore[return-value]
    h = model(graph["x"], graph["edge_index"])
    out = []
    for split in ("val", "test"):
        index, label = graph[split], graph[f"{split}_label"]
        score = (h[index[0]] * h[index[1]]).sum(-1)
        out.append(hits_at(score[label > 0], score[label <= 0], 50))
    return out[0], out[1]


def _agreed(flag: bool) -> bool:
    """Rank 0's decision, on every rank."""
    value = torch.tensor([int(flag)])
    dist.broadcast(value, src=0)
    return bool(value.item())


def peer_rank(graph_file: str, setup: Setup, epochs: int, time_budget: float | None,
              eval_every: int) -> dict:
    """One rank of the recipe; its record, with the validation curve on rank 0."""
    floor, begin = current(), time.perf_counter()
    rank, world = dist.get_rank(), dist.get_world_size()
    graph = torch.load(graph_file, weights_only=False)
    data = Data(x=graph.get("x"), edge_index=graph["edge_index"], num_nodes=graph["num_nodes"])
    mode = "binary" if setup.model == "sage" else "triplet"
    loader = LinkNeighborLoader(data, num_neighbors=FANOUTS,
                                edge_label_index=train_chunk(graph["train"], rank, world),
                                neg_sampling=mode, batch_size=BATCH_SIZE, shuffle=True,
                                drop_last=True, num_workers=0)
    num_features = 0 if data.x is None else data.x.size(1)
    model = build_model(setup, num_features, data.num_nodes)
    ddp = DistributedDataParallel(PeerLink(model, setup.model))
    optimizer = torch.optim.Adam(ddp.parameters(), lr=PEER_LR)
    dist.barrier()
    setup_s = time.perf_counter() - begin

    curve, steps, stopped, start = [], 0, "epochs", time.perf_counter()
    for epoch in range(1, epochs + 1):
        ddp.train()
        for batch in loader:
            optimizer.zero_grad()
            _peer_loss(ddp, batch, setup.model).backward()
            optimizer.step()
            steps += 1
        dist.barrier()
        if rank == 0 and (epoch % eval_every == 0 or epoch == epochs):
            val, test = _peer_metrics(model, graph, setup)
            curve.append({"epoch": epoch, "steps": steps, "seconds": time.perf_counter() - start,
                          "val": val, "test": test})
        dist.barrier()
        if _agreed(time_budget is not None and time.perf_counter() - start >= time_budget):
            stopped = "time_budget"
            break
    return {"rank": rank, "setup_s": setup_s, "curve": curve, "epochs": epoch, "steps": steps,
            "stopped": stopped, "steps_per_epoch": len(loader), "floor": floor,
            "peak_rss": peak()}


# -- ours, on every rank -------------------------------------------------------------------

def ours_rank(parts: str, setup: Setup, epochs: int, time_budget: float | None,
              eval_every: int, num_users: int) -> dict:
    """One rank of pyg_dist's full-graph link training; its record, with
    the validation curve (cumulative epoch seconds) on rank 0."""
    floor, begin = current(), time.perf_counter()
    data = pyg_dist.DistData.load(parts)
    if setup.model == "lightgcn":
        model = to_distributed(build_model(setup, 0, data.meta.num_nodes))
        task = LinkTask(data, negatives="structured", loss="bpr", features=False,
                        metric=setup.metric, num_users=num_users)
    else:
        model = to_distributed(LinkModel(build_model(setup, data.x.size(1), 0)))
        task = LinkTask(data, metric=setup.metric)
    curve, elapsed = [], [0.0]

    def record(stats) -> None:
        elapsed[0] += stats.seconds
        if stats.evaluated:
            curve.append({"epoch": stats.epoch, "seconds": elapsed[0], "val": stats.val_acc,
                          "test": stats.test_acc})

    setup_s = time.perf_counter() - begin
    called = time.perf_counter()
    result = train(model, task, epochs, optimizer=Adam(lr=setup.ours_lr, weight_decay=0.0),
                   evaluation=Evaluation(every=eval_every, time_budget=time_budget),
                   callback=record, progress=False)
    setup_s += time.perf_counter() - called - elapsed[0]  # train()'s own preparation
    return {"rank": data.rank, "setup_s": setup_s, "curve": curve if data.rank == 0 else [],
            "epochs": result.epochs, "stopped": result.stopped, "floor": floor,
            "peak_rss": peak()}


# -- the driver ----------------------------------------------------------------------------

def build_split(name: str, args) -> tuple:
    """The graph's link split, as ``(train_data, val_data, test_data)``."""
    if name == "recommendation":
        return synthetic_recommendation(num_users=args.users, num_items=args.items,
                                        avg_degree=args.avg_degree, seed=0)
    graph = load_dataset("synthetic-collab", seed=0, num_nodes=args.num_nodes)
    graph = graph.__class__(x=graph.x, edge_index=graph.edge_index, num_nodes=graph.num_nodes)
    return split_links(graph, seed=0, num_val=0.05, num_test=0.1)


def peer_graph(split: tuple, num_users: int) -> dict:
    """What every peer rank loads: the training graph, its positive edges,
    and the held-out edges with their labels."""
    train, val, test = split
    graph = {"edge_index": train.edge_index, "num_nodes": train.num_nodes,
             "train": train.edge_label_index, "val": val.edge_label_index,
             "val_label": val.edge_label, "test": test.edge_label_index,
             "test_label": test.edge_label, "num_users": num_users}
    if train.x is not None:
        graph["x"] = train.x
    return graph


def summarise(side: str, ranks: list[dict]) -> dict:
    head = ranks[0]
    return {"row": side, "curve": head["curve"], "setup_s": max(r["setup_s"] for r in ranks),
            "epochs": head["epochs"], "stopped": head["stopped"],
            "steps_per_epoch": head.get("steps_per_epoch"),
            "floor": [r["floor"] for r in ranks], "peak_rss": [r["peak_rss"] for r in ranks],
            "above_floor": [r["peak_rss"] - r["floor"] for r in ranks]}


def first_at(curve: list[dict], value: float) -> dict | None:
    """The first evaluation whose validation metric reaches ``value``."""
    return next((p for p in curve if p["val"] >= value), None)


def figures(rows: list[dict]) -> dict:
    """Both rows' best validation metric, time to the peer's best and the
    ratios ours/peer (time, largest rank's peak above its floor)."""
    for row in rows:
        row["best_val"] = max((p["val"] for p in row.get("curve", [])), default=math.nan)
    peer, ours = rows
    out = {}
    if "curve" not in peer or "curve" not in ours:
        return out
    target = peer["best_val"]
    for row in rows:
        hit = first_at(row["curve"], target)
        row["to_peer_best_s"] = hit["seconds"] if hit else None
        row["epochs_to_peer_best"] = hit["epoch"] if hit else None
    out["target"] = target
    if ours["to_peer_best_s"] is not None:
        out["time_ratio"] = ours["to_peer_best_s"] / peer["to_peer_best_s"]
    out["rss_ratio"] = max(ours["above_floor"]) / max(peer["above_floor"])
    return out


def table(title: str, metric: str, rows: list[dict], ratios: dict) -> list[str]:
    lines = [f"\n{title}",
             f"| side | best val {metric} | s to the peer's best | vs peer | epochs to it "
             f"(peer: steps/epoch) | set-up s | peak RSS above floor MB, largest (per rank) | "
             f"vs peer | stopped |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if "curve" not in row:
            lines.append(f"| {row['row']} | {row['skipped']} |")
            continue
        per = ", ".join(f"{b / 2**20:.0f}" for b in row["above_floor"])
        time_s = row.get("to_peer_best_s")
        ratio = "" if row["row"] == PEER else (
            f"{ratios['time_ratio']:.2f}x" if "time_ratio" in ratios else "not reached")
        rss = "" if row["row"] == PEER else f"{ratios.get('rss_ratio', math.nan):.2f}x"
        epochs = row.get("epochs_to_peer_best")
        if row["steps_per_epoch"]:
            epochs = f"{epochs} ({row['steps_per_epoch']})"
        lines.append(
            f"| {row['row']} | {100 * row['best_val']:.2f}% | "
            f"{'–' if time_s is None else f'{time_s:.1f}'} | {ratio} | {epochs} | "
            f"{row['setup_s']:.1f} | {max(row['above_floor']) / 2**20:.0f} ({per}) | {rss} | "
            f"{row['stopped']} ({row['epochs']} epochs) |")
    print("\n".join(lines), flush=True)
    return lines


def bench_graph(args, name: str, tmp: str, threads: int) -> dict:
    setup = GRAPHS[name]
    split = build_split(name, args)
    train = split[0]
    graph_file, parts = str(Path(tmp) / f"{name}.pt"), str(Path(tmp) / f"{name}-parts")
    torch.save(peer_graph(split, args.users), graph_file)
    held = {s: int(d.edge_label.sum()) for s, d in zip(("val", "test"), split[1:])}
    print(f"\n{name}: {train.num_nodes} nodes, {train.edge_index.size(1)} message edges, "
          f"{train.edge_label_index.size(1)} training edges, held out {held}; "
          f"{args.ranks} ranks x {threads} thread(s); load {_load()}", flush=True)
    start = time.perf_counter()
    pyg_dist.partition(split, args.ranks, parts, method="metis")
    partition_s = time.perf_counter() - start
    del split, train
    missing = sampler_missing()
    if missing:
        rows = [{"row": PEER, "skipped": f"peer skipped: {missing}"}]
    else:
        rows = [summarise(PEER, pyg_dist.launch(
            peer_rank, args.ranks, threads=threads,
            args=(graph_file, setup, args.peer_epochs, args.time_budget, args.eval_every)))]
    _done(rows[-1])
    ours = summarise(OURS, pyg_dist.launch(
        ours_rank, args.ranks, threads=threads,
        args=(parts, setup, args.epochs, args.time_budget, args.eval_every, args.users)))
    ours["setup_s"] += partition_s
    rows.append(ours)
    _done(rows[-1])
    ratios = figures(rows)
    title = (f"{name}, {setup.model}, {args.ranks} ranks, eval every {args.eval_every}, "
             f"budget {args.time_budget} s, load {_load()}")
    table(title, setup.metric, rows, ratios)
    return {"graph": name, "setup": asdict(setup), "ranks": args.ranks, "threads": threads,
            "partition_s": partition_s, "time_budget": args.time_budget, **ratios,
            "rows": rows}


def _done(row: dict) -> None:
    if "curve" not in row:
        print(f"{row['row']}: {row['skipped']}", flush=True)
        return
    best = max((p["val"] for p in row["curve"]), default=math.nan)
    print(f"{row['row']}: best val {100 * best:.2f}%, {row['epochs']} epochs, "
          f"{row['curve'][-1]['seconds'] if row['curve'] else 0:.0f} s, load {_load()}",
          flush=True)


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graphs", nargs="+", default=list(GRAPHS), choices=list(GRAPHS))
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=2000, help="our epochs at most")
    parser.add_argument("--peer-epochs", type=int, default=100, help="the peer's epochs at most")
    parser.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                        help="stop each side after this many seconds of training")
    parser.add_argument("--eval-every", type=int, default=1,
                        help="evaluate every N epochs (both sides)")
    parser.add_argument("--num-nodes", type=int, default=None,
                        help="collab's nodes (default: ogbl-collab's 235,868)")
    parser.add_argument("--users", type=int, default=USERS)
    parser.add_argument("--items", type=int, default=ITEMS)
    parser.add_argument("--avg-degree", type=float, default=AVG_DEGREE,
                        help="the recommendation graph's interactions per user")
    parser.add_argument("--json", default=None,
                        help="write every row and curve here (replacing the rows of the "
                             "graphs run, keeping the others')")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    threads = max(1, (os.cpu_count() or 1) // args.ranks)  # pyg_dist.launch's default
    cpu_ext.is_available()  # a first build of the C++ kernels is nobody's set-up
    with tempfile.TemporaryDirectory(prefix="pyg_dist-peer-link-") as tmp:
        for name in args.graphs:
            result = bench_graph(args, name, tmp, threads)
            if args.json:
                write_result(Path(args.json), result)


def write_result(path: Path, result: dict) -> None:
    """Writes ``result`` into the JSON list at ``path`` in place of the row
    of its graph (the other graphs' rows kept, in ``GRAPHS``' order),
    atomically."""
    rows = json.loads(path.read_text()) if path.exists() else []
    rows = [r for r in rows if r["graph"] != result["graph"]] + [result]
    rows.sort(key=lambda r: list(GRAPHS).index(r["graph"]))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(rows, indent=1))
    tmp.replace(path)


if __name__ == "__main__":
    main()
