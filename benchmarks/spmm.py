"""Speed of :func:`pyg_dist.ops.spmm` against the sparse-dense products a PyG
user has, as ratios to ``torch.sparse.mm`` on a CSR tensor measured in the
same run. A script, not a test::

    python benchmarks/spmm.py --device cpu --threads 2
    python benchmarks/spmm.py --device cuda --feats 64 256

For a seeded uniform random graph and a seeded power-law graph it times, for
each feature width F, the forward pass and forward + backward (gradient with
respect to ``x``; the edge weights are constants, as in GCN) of

- ``torch.sparse.mm``: a ``torch.sparse_csr_tensor`` times ``x`` (the baseline);
- ``pyg edge_index``: PyG's ``MessagePassing`` aggregation exactly as
  ``GCNConv`` runs it on a plain ``edge_index`` (gather, weight, scatter);
- ``pyg EdgeIndex``: the same layer given a ``torch_geometric.EdgeIndex``
  sorted by target (GCNConv does not fuse it into a sparse product, so this
  is the same gather-scatter path with EdgeIndex's bookkeeping);
- ``torch_sparse``: ``torch_sparse.matmul`` on a ``SparseTensor`` (when installed);
- ``pyg_dist``: :func:`pyg_dist.ops.spmm` with its default backend.

Times are medians over ``--repeats`` rounds after ``--warmup`` untimed runs
(which also fill the per-graph caches every method keeps). In each round every
method runs once, so that load from other processes on a shared machine hits
all of them alike; a method whose timed runs add up to ``--budget`` seconds
sits out the remaining rounds (at the default sizes only PyG's gather-scatter
paths are that slow).
A ratio above 1 means faster than ``torch.sparse.mm``. On CUDA it also prints
the forward pass's achieved bandwidth as a fraction of the device's measured
copy bandwidth, counting the compulsory bytes: the indices, the values, each
source row once and the output once.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from torch_geometric import EdgeIndex
from torch_geometric.nn import MessagePassing

from pyg_dist.ops import available_backends, spmm, to_csr
from pyg_dist.typing import WITH_TORCH_SPARSE, torch_sparse

BASELINE = "torch.sparse.mm"


@dataclass
class Graph:
    """One benchmark graph, in every format the methods need."""

    name: str
    num_nodes: int
    edge_index: Tensor  # [2, E], source then target, sorted by target
    weight: Tensor  # [E] float32
    rowptr: Tensor  # [N + 1], CSR of targets (rows) over sources (columns)
    col: Tensor  # [E]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (torch)")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--nnz", type=int, default=1_000_000)
    parser.add_argument("--feats", type=int, nargs="+", default=[16, 64, 128, 256])
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (median)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per method")
    parser.add_argument("--budget", type=float, default=2.0,
                        help="seconds of timed runs after which a slow method stops repeating")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


# ------------------------------------------------------------------ graphs


def uniform_endpoints(num_nodes: int, nnz: int, g: torch.Generator) -> Tensor:
    return torch.randint(0, num_nodes, (2, nnz), generator=g)


def power_law_endpoints(num_nodes: int, nnz: int, g: torch.Generator,
                        exponent: float = 2.1) -> Tensor:
    """Chung-Lu style: both endpoints drawn with probability proportional to
    ``rank ** (-1 / (exponent - 1))``, so in- and out-degrees follow a power law
    with that exponent; node ids are shuffled so hubs are spread out."""
    rank = torch.arange(1, num_nodes + 1, dtype=torch.float64)
    weight = rank.pow(-1.0 / (exponent - 1.0))
    ends = torch.multinomial(weight, 2 * nnz, replacement=True, generator=g)
    shuffle = torch.randperm(num_nodes, generator=g)
    return shuffle[ends].view(2, nnz)


def make_graph(name: str, num_nodes: int, nnz: int, seed: int, device: str) -> Graph:
    g = torch.Generator().manual_seed(seed)
    draw = uniform_endpoints if name == "uniform" else power_law_endpoints
    edge_index = draw(num_nodes, nnz, g)
    rowptr, col, perm = to_csr(edge_index, num_nodes)
    edge_index = edge_index[:, perm]
    weight = torch.rand(nnz, generator=g)
    return Graph(name, num_nodes, edge_index.to(device), weight.to(device), rowptr.to(device),
                 col.to(device))


# ----------------------------------------------------------------- methods


class WeightedSum(MessagePassing):
    """GCNConv's propagation without the linear layer: ``sum_j w_ji * x_j``."""

    def __init__(self) -> None:
        super().__init__(aggr="add")

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor) -> Tensor:
        return self.propagate(edge_index, x=x, edge_weight=edge_weight)

    def message(self, x_j: Tensor, edge_weight: Tensor) -> Tensor:
        return edge_weight.view(-1, 1) * x_j


def methods(graph: Graph) -> dict[str, Callable[[Tensor], Tensor]]:
    """Each method as ``x -> A @ x``, its per-graph structures built here."""
    n = graph.num_nodes
    csr = torch.sparse_csr_tensor(graph.rowptr, graph.col, graph.weight, size=(n, n))
    conv = WeightedSum()
    edge_index = EdgeIndex(graph.edge_index, sparse_size=(n, n), sort_order="col")
    out: dict[str, Callable[[Tensor], Tensor]] = {
        BASELINE: lambda x: torch.sparse.mm(csr, x),
        "pyg edge_index": lambda x: conv(x, graph.edge_index, graph.weight),
        "pyg EdgeIndex": lambda x: conv(x, edge_index, graph.weight),
    }
    if WITH_TORCH_SPARSE:
        adj = torch_sparse.SparseTensor(rowptr=graph.rowptr, col=graph.col, value=graph.weight,
                                        sparse_sizes=(n, n))
        out["torch_sparse"] = lambda x: torch_sparse.matmul(adj, x)
    out["pyg_dist"] = lambda x: spmm(graph.rowptr, graph.col, x, graph.weight)
    return out


# ------------------------------------------------------------------ timing


def elapsed(fn: Callable[[], object], device: str) -> float:
    """Wall time of one call of ``fn`` in seconds."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def median_times(fns: dict[str, Callable[[], object]], device: str, repeats: int,
                 budget: float = float("inf")) -> dict[str, float]:
    """Median wall time of each function over ``repeats`` runs. The functions
    take turns, round after round, so that a slow spell of a shared machine
    hits all of them; one whose runs took ``budget`` seconds in all sits out
    the remaining rounds."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            if sum(times[name]) < budget:
                times[name].append(elapsed(fn, device))
    return {name: statistics.median(values) for name, values in times.items()}


def time_methods(fns: dict[str, Callable[[Tensor], Tensor]], x: Tensor, grad: Tensor,
                 args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """Forward and forward + backward time of each method, after warm-up runs
    of forward + backward (which fill the caches of both)."""

    def forward(fn: Callable[[Tensor], Tensor]) -> Callable[[], None]:
        def run() -> None:
            with torch.no_grad():
                fn(x)
        return run

    def forward_backward(fn: Callable[[Tensor], Tensor]) -> Callable[[], None]:
        def run() -> None:
            x.grad = None
            fn(x).backward(grad)
        return run

    for fn in fns.values():
        for _ in range(args.warmup):
            forward_backward(fn)()
    fwd = median_times({n: forward(f) for n, f in fns.items()}, args.device, args.repeats,
                       args.budget)
    both = median_times({n: forward_backward(f) for n, f in fns.items()}, args.device,
                        args.repeats, args.budget)
    return {name: (fwd[name], both[name]) for name in fns}


def copy_bandwidth(device: str) -> float:
    """Bytes per second of a large device-to-device copy (read + write)."""
    src = torch.empty(256 * 2**20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    seconds = median_times({"copy": lambda: dst.copy_(src)}, device, repeats=10)
    return 2 * src.numel() / seconds["copy"]


def compulsory_bytes(graph: Graph, x: Tensor) -> int:
    """Indices, values, every source row once and the output once."""
    index = graph.rowptr.numel() * graph.rowptr.element_size()
    index += graph.col.numel() * graph.col.element_size()
    values = graph.weight.numel() * graph.weight.element_size()
    num_rows = graph.rowptr.numel() - 1
    return index + values + (x.size(0) + num_rows) * x.size(1) * x.element_size()


# ------------------------------------------------------------------- report


def run_graph(graph: Graph, args: argparse.Namespace, bandwidth: float | None) -> None:
    fns = methods(graph)
    g = torch.Generator().manual_seed(args.seed)
    for feats in args.feats:
        x = torch.randn(graph.num_nodes, feats, generator=g).to(args.device).requires_grad_()
        grad = torch.randn(graph.num_nodes, feats, generator=g).to(args.device)
        times = time_methods(fns, x, grad, args)
        print_table(graph, feats, times, compulsory_bytes(graph, x), bandwidth)


def print_table(graph: Graph, feats: int, times: dict[str, tuple[float, float]],
                num_bytes: int, bandwidth: float | None) -> None:
    base_fwd, base_both = times[BASELINE]
    header = f"{'method':<16} {'fwd ms':>9} {'speedup':>8} {'fwd+bwd ms':>11} {'speedup':>8}"
    if bandwidth is not None:
        header += f" {'fwd bw/copy':>12}"
    print(f"\n{graph.name} graph, F={feats} (speedup = {BASELINE} time / method time)")
    print(header)
    for name, (fwd, both) in times.items():
        line = (f"{name:<16} {fwd * 1e3:9.2f} {base_fwd / fwd:7.2f}x "
                f"{both * 1e3:11.2f} {base_both / both:7.2f}x")
        if bandwidth is not None:
            line += f" {num_bytes / fwd / bandwidth:12.2f}"
        print(line, flush=True)


def main() -> None:
    args = parse_args()
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    bandwidth = copy_bandwidth(args.device) if args.device == "cuda" else None
    print(f"device={args.device} threads={torch.get_num_threads()} rows={args.rows} "
          f"nnz={args.nnz} backends={available_backends(args.device)}")
    if bandwidth is not None:
        print(f"measured copy bandwidth: {bandwidth / 1e9:.0f} GB/s")
    for name in ("uniform", "power-law"):
        graph = make_graph(name, args.rows, args.nnz, args.seed, args.device)
        max_degree = int((graph.rowptr[1:] - graph.rowptr[:-1]).max())
        print(f"\n== {name}: {graph.num_nodes} nodes, {graph.col.numel()} edges, "
              f"max in-degree {max_degree}")
        run_graph(graph, args, bandwidth)


if __name__ == "__main__":
    main()
