"""Speed of a GAT layer built on :func:`pyg_dist.ops.gat` against PyG's own
``GATConv``, as ratios to ``GATConv`` measured in the same run. A script, not a
test::

    python benchmarks/gat.py --threads 2
    python benchmarks/gat.py --heads-channels 8x8 1x64 --rows 100000 --nnz 1000000

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
"""
from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from spmm import Graph, make_graph, median_times
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


def time_layers(fns: dict[str, Callable[[Tensor], Tensor]], x: Tensor, grad: Tensor,
                args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    def forward(fn: Callable[[Tensor], Tensor]) -> Callable[[], None]:
        def run() -> None:
            with torch.no_grad():
                fn(x)
        return run

    def forward_backward(fn: Callable[[Tensor], Tensor]) -> Callable[[], None]:
        def run() -> None:
            fn(x).backward(grad)
        return run

    for fn in fns.values():
        for _ in range(args.warmup):
            forward_backward(fn)()
    fwd = median_times({n: forward(f) for n, f in fns.items()}, "cpu", args.repeats)
    both = median_times({n: forward_backward(f) for n, f in fns.items()}, "cpu", args.repeats)
    return {name: (fwd[name], both[name]) for name in fns}


def print_table(title: str, times: dict[str, tuple[float, float]]) -> None:
    base_fwd, base_both = times[BASELINE]
    print(f"\n{title} (speedup = {BASELINE} time / method time)")
    print(f"{'method':<16} {'fwd ms':>9} {'speedup':>8} {'fwd+bwd ms':>11} {'speedup':>8}")
    for name, (fwd, both) in times.items():
        print(f"{name:<16} {fwd * 1e3:9.1f} {base_fwd / fwd:7.2f}x "
              f"{both * 1e3:11.1f} {base_both / both:7.2f}x", flush=True)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads={torch.get_num_threads()} rows={args.rows} nnz={args.nnz} "
          f"in_channels={args.in_channels} backends={available_backends('cpu')}")
    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.rows, args.in_channels, generator=g)
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
                        time_layers(fns, x, grad, args))


if __name__ == "__main__":
    main()
