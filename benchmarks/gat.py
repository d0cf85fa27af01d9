"""Speed of a GAT layer built on :func:`pyg_dist.ops.gat` against PyG's own
``GATConv``, as ratios to ``GATConv`` measured in the same run. A script, not a
test::

    python benchmarks/gat.py --threads 2
    python benchmarks/gat.py --heads-channels 8x8 1x64 --rows 100000 --nnz 1000000
    python benchmarks/gat.py --bytes-only

Both sides time the whole layer, with the same weights, on the same graph
(a seeded uniform or power-law graph, sorted by target, no self-loops added):

- ``pyg GATConv``: ``GATConv(in, C, heads=H, add_self_loops=False)`` on a plain
  ``edge_index`` (its linear map, the two attention dots, then gather, softmax
  and scatter in PyTorch ops);
- ``pyg_dist <backend>``: the same linear map and attention dots, then
  :func:`pyg_dist.ops.gat` with that backend (``cpu`` is the C++ extension,
  ``torch`` the PyTorch fallback), plus the bias.

It times forward (under ``torch.no_grad``) and forward + backward (gradients
of the weights, the attention vectors and the bias; the input features are
constants, as in a first layer). Times are medians over ``--repeats`` rounds
after ``--warmup`` runs; in each round every method runs once, so that load
from other processes hits all of them alike. A ratio above 1 means faster than
``GATConv``. Before timing, the script checks that the layers agree.

Then, on ``--ranks`` local ranks (a METIS cut of a seeded community graph), the
halo bytes per layer of a training step of a two-layer GAT (the CLI's model:
8 heads of 8, then one head) with ``DistGATConv`` against the same model on
the generic path (``DistMessagePassing(GATConv)``), in the steady state (from
the third step: the second fetches layer 0's static input into its cache),
forward and backward summed over ranks, with layer 0's static input cached
(the default) and exchanged every step (``cache_inputs=False``).
"""
from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from spmm import Graph, make_graph, time_methods
from torch import Tensor
from torch_geometric.nn import GATConv

from pyg_dist.ops import available_backends, gat

BASELINE = "pyg GATConv"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (torch)")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--nnz", type=int, default=1_000_000)
    parser.add_argument("--in-channels", type=int, default=64)
    parser.add_argument("--heads-channels", nargs="+", default=["8x8", "1x64"],
                        help="HxC: heads and channels per head of each layer timed")
    parser.add_argument("--graphs", nargs="+", default=["uniform", "power-law"],
                        choices=["uniform", "power-law"])
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (median)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per method")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ranks", type=int, default=2, help="ranks of the bytes comparison")
    parser.add_argument("--bytes-nodes", type=int, default=20_000,
                        help="nodes of the community graph of the bytes comparison")
    parser.add_argument("--bytes-only", action="store_true", help="skip the timings")
    return parser.parse_args()


class OurGAT(torch.nn.Module):
    """GATConv's computation with :func:`pyg_dist.ops.gat` in place of its
    message passing, reading the parameters of ``conv``."""

    def __init__(self, conv: GATConv, graph: Graph, backend: str) -> None:
        super().__init__()
        self.conv, self.graph, self.backend = conv, graph, backend

    def forward(self, x: Tensor) -> Tensor:
        conv, heads, channels = self.conv, self.conv.heads, self.conv.out_channels
        h = conv.lin(x).view(-1, heads, channels)
        alpha_src = (h * conv.att_src).sum(dim=-1)
        alpha_dst = (h * conv.att_dst).sum(dim=-1)
        out = gat(self.graph.rowptr, self.graph.col, h, alpha_src, alpha_dst,
                  negative_slope=conv.negative_slope, backend=self.backend)
        return out.view(-1, heads * channels) + conv.bias


def layers(graph: Graph, in_channels: int, heads: int, channels: int,
           seed: int) -> dict[str, Callable[[Tensor], Tensor]]:
    torch.manual_seed(seed)
    conv = GATConv(in_channels, channels, heads=heads, add_self_loops=False)
    torch.nn.init.normal_(conv.bias)  # nonzero, so that a missing bias shows
    out: dict[str, Callable[[Tensor], Tensor]] = {
        BASELINE: lambda x: conv(x, graph.edge_index),
    }
    for backend in ("cpu", "torch"):
        if backend in available_backends("cpu"):
            out[f"pyg_dist {backend}"] = OurGAT(conv, graph, backend)
    return out


def check_agreement(fns: dict[str, Callable[[Tensor], Tensor]], x: Tensor) -> None:
    """Raises unless every layer gives GATConv's output (float32, 1e-4)."""
    with torch.no_grad():
        ref = fns[BASELINE](x)
        for name, fn in fns.items():
            err = ((fn(x) - ref).abs().max() / ref.abs().max().clamp(min=1)).item()
            if err > 1e-4:
                raise AssertionError(f"{name} differs from {BASELINE}: relative error {err:.2e}")


def print_table(title: str, times: dict[str, tuple[float, float]]) -> None:
    base_fwd, base_both = times[BASELINE]
    print(f"\n{title} (speedup = {BASELINE} time / method time)")
    print(f"{'method':<16} {'fwd ms':>9} {'speedup':>8} {'fwd+bwd ms':>11} {'speedup':>8}")
    for name, (fwd, both) in times.items():
        print(f"{name:<16} {fwd * 1e3:9.1f} {base_fwd / fwd:7.2f}x "
              f"{both * 1e3:11.1f} {base_both / both:7.2f}x", flush=True)


def main() -> None:
    """The timings."""
    args = parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads={torch.get_num_threads()} rows={args.rows} nnz={args.nnz} "
          f"in_channels={args.in_channels} backends={available_backends('cpu')}")
    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.rows, args.in_channels, generator=g)
    timing = argparse.Namespace(device="cpu", warmup=args.warmup, repeats=args.repeats,
                                budget=float("inf"))  # what spmm.time_methods reads
    for name in args.graphs:
        graph = make_graph(name, args.rows, args.nnz, args.seed, "cpu")
        max_degree = int((graph.rowptr[1:] - graph.rowptr[:-1]).max())
        print(f"\n== {name}: {graph.num_nodes} nodes, {graph.col.numel()} edges, "
              f"max in-degree {max_degree}")
        for spec in args.heads_channels:
            heads, channels = (int(v) for v in spec.split("x"))
            fns = layers(graph, args.in_channels, heads, channels, args.seed)
            check_agreement(fns, x)
            grad = torch.randn(args.rows, heads * channels, generator=g)
            print_table(f"{name}, heads={heads}, channels={channels}",
                        time_methods(fns, x, grad, timing))


def bytes_per_layer(path: str, steps: int = 4) -> dict[tuple[str, bool], dict[str, float]]:
    """On every rank: halo bytes per layer and training step (both
    directions, this rank) of the twin and of the generic path, with and
    without caching layer 0's static input, from the third step on."""
    import pyg_dist
    from pyg_dist.halo import Exact
    from pyg_dist.models import GNN
    from pyg_dist.nn import DistMessagePassing

    out = {}
    for path_name, cache in [("DistGATConv", True), ("generic", True),
                             ("DistGATConv", False), ("generic", False)]:
        data = pyg_dist.DistData.load(path, halo=Exact(cache_inputs=cache))
        torch.manual_seed(0)
        model = GNN("gat", data.x.size(1), 8, data.meta.num_classes, dropout=0.6)
        if path_name == "generic":
            for k, conv in enumerate(model.convs):
                plain = GATConv.__new__(GATConv)
                plain.__dict__.update(conv.__dict__)
                model.convs[k] = DistMessagePassing(plain, halo_name=f"convs.{k}")
        optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
        for _ in range(steps):
            data.ledger.next_step()
            optimizer.zero_grad()
            logits = model(data.x, data.edge_index)
            torch.nn.functional.cross_entropy(logits[data.train_mask],
                                              data.y[data.train_mask]).backward()
            optimizer.step()
        out[path_name, cache] = {
            f"convs.{k}": data.ledger.layer_totals(f"convs.{k}", since=3)["bytes_sent"]
            / (steps - 2) for k in range(len(model.convs))}
    return out


def compare_bytes(args: argparse.Namespace) -> None:
    import tempfile

    import pyg_dist
    from pyg_dist.datasets import community_graph, preset

    data = community_graph(preset("synthetic-arxiv", num_nodes=args.bytes_nodes), seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        meta = pyg_dist.partition(data, args.ranks, f"{tmp}/parts", method="metis")
        per_rank = pyg_dist.launch(bytes_per_layer, args.ranks, args=(f"{tmp}/parts",))
    print(f"\nhalo bytes per training step (both directions, all {args.ranks} ranks), "
          f"{data.num_nodes} nodes, {data.num_edges} edges, {data.num_features} features, "
          f"halo {meta.halo_sizes}; 2-layer GAT, 8 heads x 8, then 1 head")
    print(f"{'input cache':<12} {'layer':<10} {'DistGATConv MB':>15} {'generic MB':>11} "
          f"{'generic / twin':>15}")
    for cache in (True, False):
        for layer in per_rank[0]["DistGATConv", cache]:
            twin = sum(r["DistGATConv", cache][layer] for r in per_rank)
            generic = sum(r["generic", cache][layer] for r in per_rank)
            ratio = f"{generic / twin:14.2f}x" if twin else f"{'-':>15}"
            print(f"{'yes' if cache else 'no':<12} {layer:<10} {twin / 1e6:15.3f} "
                  f"{generic / 1e6:11.3f} {ratio}")


def run() -> None:
    args = parse_args()
    if not args.bytes_only:
        main()
    compare_bytes(args)


if __name__ == "__main__":
    run()
