"""The peer of ``time_to_accuracy.py``: PyG's own multi-GPU recipe, neighbour
sampling with DistributedDataParallel, on local gloo ranks.

It follows ``examples/multi_gpu/distributed_sampling.py`` of
pyg-team/pytorch_geometric as of commit 0a4d435e (the version with layer-wise
inference), written anew here:

* every rank holds the whole graph; the training nodes are split into
  ``world_size`` equal chunks, one per rank (``train_idx.split(n // world)[rank]``);
* ``NeighborLoader(num_neighbors=[25, 10], batch_size=1024, shuffle=True,
  drop_last=True)``; for 3 layers we use ``[15, 10, 5]`` (one fan-out per
  layer; the recipe has 2 layers only);
* ``SAGEConv`` layers 256 wide, ReLU and dropout 0.5 after each hidden layer
  (``GCNConv`` for ``gcn``); ``torch.manual_seed(12345)`` before the model;
* ``DistributedDataParallel`` (here over gloo, on the CPU), ``Adam(lr=0.001)``,
  cross-entropy on the seed nodes of each batch, a barrier after every epoch;
* evaluation on rank 0 alone, layer by layer over all nodes with a one-hop
  full-neighbourhood ``NeighborLoader(num_neighbors=[-1], shuffle=False)``;
  the recipe evaluates every 5 epochs, here every ``eval_every`` (default 1,
  so that the time to a target is resolved finely); the others wait at the
  barrier, and the evaluation time is part of the wall time.

Departures, each forced by this machine: gloo on the CPU instead of NCCL;
``num_workers=0`` (the recipe uses 4 workers per rank; two cores are shared by
all ranks here); the batch size is cut to the seeds a rank has when it has
fewer than 1024 (Cora: 140 training nodes, 35 per rank; with ``drop_last`` the
recipe would take no step at all). For GCN, inference uses the whole graph's
symmetric normalisation as edge weights (a one-hop subgraph does not know the
source nodes' degrees); training normalises each sampled subgraph, as
``GCNConv`` does by default.

The bytes a rank sends are computed, not measured: DDP all-reduces every
gradient each step, and a ring all-reduce sends ``4 * params * 2(n-1)/n``
bytes (fp32) per rank.
"""
from __future__ import annotations

import copy
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from rss import peak
from torch import Tensor, nn

__all__ = ["sampler_missing", "fanouts", "allreduce_bytes", "peer_rank", "INSTALL"]

#: How to get a neighbour sampler for NeighborLoader.
INSTALL = ("pip install --no-build-isolation torch_scatter torch_sparse "
           "(about 21 minutes on 2 cores) or pyg-lib")
#: The recipe's fan-outs (2 layers), and ours for 3 layers.
FANOUTS = {2: [25, 10], 3: [15, 10, 5]}
BATCH_SIZE = 1024
SEED = 12345


def sampler_missing() -> str | None:
    """Why NeighborLoader cannot sample here (:obj:`None` when it can)."""
    import torch_geometric.typing as pyg_typing

    if getattr(pyg_typing, "WITH_PYG_LIB", False) or getattr(pyg_typing, "WITH_TORCH_SPARSE",
                                                             False):
        return None
    return f"NeighborLoader needs torch_sparse or pyg-lib, neither is importable; {INSTALL}"


def fanouts(layers: int) -> list[int]:
    if layers not in FANOUTS:
        raise ValueError(f"the peer has fan-outs for {sorted(FANOUTS)} layers, not {layers}")
    return FANOUTS[layers]


def allreduce_bytes(params: int, world_size: int) -> float:
    """Bytes one rank sends in a ring all-reduce of ``params`` fp32 values."""
    return 4.0 * params * 2 * (world_size - 1) / world_size


class PeerGNN(nn.Module):
    """The recipe's model: convolutions, ReLU and dropout between them."""

    def __init__(self, kind: str, in_channels: int, hidden: int, out_channels: int,
                 layers: int, dropout: float = 0.5) -> None:
        super().__init__()
        from torch_geometric.nn import GCNConv, SAGEConv

        conv = {"sage": SAGEConv, "gcn": GCNConv}[kind]
        sizes = [in_channels] + [hidden] * (layers - 1) + [out_channels]
        self.convs = nn.ModuleList(conv(i, o) for i, o in zip(sizes[:-1], sizes[1:]))
        self.kind, self.dropout = kind, dropout

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.dropout(x.relu(), p=self.dropout, training=self.training)
        return x

    @torch.no_grad()
    def inference(self, x_all: Tensor, loader) -> Tensor:
        """Every node's logits, layer by layer over the full neighbourhood."""
        for i, conv in enumerate(self.convs):
            xs = []
            for batch in loader:
                x = x_all[batch.node_id]
                if self.kind == "gcn":  # the whole graph's normalisation
                    conv.normalize = False
                    x = conv(x, batch.edge_index, batch.edge_weight)
                    conv.normalize = True
                else:
                    x = conv(x, batch.edge_index)
                x = x[:batch.batch_size]
                xs.append(x.relu() if i < len(self.convs) - 1 else x)
            x_all = torch.cat(xs, dim=0)
        return x_all


def _eval_loader(data, kind: str):
    """The recipe's one-hop, full-neighbourhood loader over all nodes."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    graph = copy.copy(data)
    if kind == "gcn":
        graph.edge_index, graph.edge_weight = gcn_norm(data.edge_index, None, data.num_nodes)
    loader = NeighborLoader(graph, num_neighbors=[-1], batch_size=BATCH_SIZE, shuffle=False,
                            num_workers=0)
    del loader.data.x, loader.data.y
    loader.data.node_id = torch.arange(data.num_nodes)
    return loader


def _accuracies(model: PeerGNN, data, loader) -> tuple[float, float, float]:
    model.eval()
    correct = model.inference(data.x, loader).argmax(dim=-1) == data.y
    return tuple(float(correct[m].float().mean()) for m in
                 (data.train_mask, data.val_mask, data.test_mask))  # type: ignore[return-value]


def _agreed(flag: bool) -> bool:
    """Rank 0's decision, on every rank."""
    value = torch.tensor([int(flag)])
    dist.broadcast(value, src=0)
    return bool(value.item())


def peer_rank(graph_path: str, kind: str, layers: int, hidden: int, epochs: int,
              time_budget: float | None, eval_every: int, lr: float = 0.001,
              dropout: float = 0.5) -> dict:
    """One rank of the recipe: trains ``epochs`` epochs (or until rank 0's
    wall time passes ``time_budget``); returns this rank's record, with the
    validation curve on rank 0."""
    from torch.nn.parallel import DistributedDataParallel
    from torch_geometric.loader import NeighborLoader

    begin = time.perf_counter()
    rank, world = dist.get_rank(), dist.get_world_size()
    data = torch.load(graph_path, weights_only=False)
    seeds = data.train_mask.nonzero().view(-1)
    seeds = seeds.split(seeds.size(0) // world)[rank]
    batch_size = min(BATCH_SIZE, seeds.numel())
    train_loader = NeighborLoader(data, input_nodes=seeds, num_neighbors=fanouts(layers),
                                  batch_size=batch_size, shuffle=True, drop_last=True,
                                  num_workers=0)
    eval_loader = _eval_loader(data, kind) if rank == 0 else None
    torch.manual_seed(SEED)
    model = PeerGNN(kind, data.num_features, hidden, int(data.y.max()) + 1, layers, dropout)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=lr)
    params = sum(p.numel() for p in model.parameters())
    dist.barrier()
    setup = time.perf_counter() - begin

    curve, steps, stopped, start = [], 0, "epochs", time.perf_counter()
    for epoch in range(1, epochs + 1):
        ddp.train()
        for batch in train_loader:
            optimizer.zero_grad()
            out = ddp(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
            steps += 1
        dist.barrier()
        if rank == 0 and (epoch % eval_every == 0 or epoch == epochs):
            train_acc, val, test = _accuracies(model, data, eval_loader)
            curve.append({"epoch": epoch, "steps": steps, "seconds": time.perf_counter() - start,
                          "train_acc": train_acc, "val_acc": val, "test_acc": test})
        dist.barrier()
        over = time_budget is not None and time.perf_counter() - start >= time_budget
        if _agreed(over):
            stopped = "time_budget"
            break
    return {"rank": rank, "setup_s": setup, "train_s": time.perf_counter() - start,
            "curve": curve, "epochs": epoch, "steps": steps, "stopped": stopped,
            "batch_size": batch_size, "steps_per_epoch": len(train_loader), "params": params,
            "bytes_sent": allreduce_bytes(params, world) * steps,
            "bytes_per_step": allreduce_bytes(params, world), "peak_rss": peak()}
