"""Strong scaling of exact full-graph training, and where an epoch's time goes.

    python benchmarks/scale.py [--dataset synthetic-arxiv] [--num-nodes N]
                               [--ranks 1 2 4] [--hidden 128] [--epochs 5]
                               [--method metis] [--parts-dir-root DIR]

An epoch is one training step of a 2-layer GCN (forward, backward, gradient
all-reduce, Adam; evaluation excluded). The baseline is the same model with
PyG's GCNConv on the whole graph in one process with every core's thread,
measured in the same run; R ranks get cores / R threads each (at least one,
so 4 ranks on 2 cores share them). Per rank count: median epoch time, halo
bytes sent per epoch (ledger), time blocked on halo exchanges (ledger), time
in the gradient and loss all-reduces (timed), peak RSS; and, from the PyTorch
profiler over one more epoch, time inside our SpMM kernels, dense transforms,
communication ops, other tensor ops and outside any op (Python).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from exchange import single_process_epoch

BENCH_DIR = str(Path(__file__).resolve().parent)

#: Profiler op names by category (the rest of the ops are "other ops").
SPMM_OPS = ("pyg_dist::",)
DENSE_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear")
COMM_OPS = ("c10d::", "gloo", "record_param_comms", "nccl")
#: How many of the costliest "other ops" the report names.
TOP_OTHER_OPS = 6


def _category(name: str) -> str:
    if name.startswith(SPMM_OPS):
        return "spmm"
    if name in DENSE_OPS:
        return "dense"
    if any(key in name for key in COMM_OPS):
        return "comm ops"
    return "other ops"


def profile_epoch(step) -> dict:
    """Seconds per category of one call of ``step``, from the profiler's self
    times (each op counted once), and the time outside any op."""
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        step()
        wall = time.perf_counter() - start
    seconds = {"spmm": 0.0, "dense": 0.0, "comm ops": 0.0, "other ops": 0.0}
    others = {}
    for item in prof.key_averages():
        if item.key.startswith(("ProfilerStep", "[memory]")):
            continue
        category = _category(item.key)
        seconds[category] += item.self_cpu_time_total / 1e6
        if category == "other ops":
            others[item.key] = item.self_cpu_time_total / 1e6
    seconds["outside ops"] = max(0.0, wall - sum(seconds.values()))
    seconds["profiled epoch"] = wall
    top = sorted(others.items(), key=lambda kv: -kv[1])[:TOP_OTHER_OPS]
    return {"seconds": seconds, "top_other": top}


def rank_run(parts_dir: str, hidden: int, epochs: int, warmup: int) -> dict:
    """One rank: epochs of exact training, timed, then one profiled epoch."""
    sys.path.insert(0, BENCH_DIR)
    import rss as rank_rss
    import torch

    import pyg_dist
    from pyg_dist.models import GNN
    from pyg_dist.runtime import distributed
    from pyg_dist.train import sync_parameters, train_step

    reduce_seconds = [0.0]
    for name in ("all_reduce_gradients", "all_reduce_values"):
        setattr(distributed, name, _timed(getattr(distributed, name), reduce_seconds))
    data = pyg_dist.DistData.load(parts_dir)
    torch.manual_seed(0)
    model = GNN("gcn", data.x.size(1), hidden, data.meta.num_classes)
    sync_parameters(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def step() -> None:
        distributed.barrier()
        train_step(model, data, optimizer)
        data.ledger.next_step()

    times, reduces = [], []
    for _ in range(warmup + epochs):
        reduce_seconds[0] = 0.0
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
        reduces.append(reduce_seconds[0])
    totals = data.ledger.totals()
    steps = warmup + epochs
    profile = profile_epoch(step)
    return {
        "epoch": statistics.median(times[warmup:]),
        "all_reduce": statistics.median(reduces[warmup:]),
        "exchange": totals["seconds"] / steps,
        "bytes": (totals["bytes_fwd"] + totals["bytes_bwd"]) / steps,
        "peak": rank_rss.peak(),
        "owned": data.num_nodes,
        "halo": data.edge_index.num_halo,
        "profile": profile,
    }


def _timed(fn, total):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            total[0] += time.perf_counter() - start
    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="synthetic-arxiv")
    parser.add_argument("--num-nodes", type=int, default=None)
    parser.add_argument("--avg-degree", type=float, default=None)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--method", default="metis")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-pyg", action="store_true", help="skip the PyG baseline")
    parser.add_argument("--parts-dir-root", default=None,
                        help="where to write the partition folders (default: a temp dir)")
    args = parser.parse_args()

    import pyg_dist
    from pyg_dist.datasets import load_dataset

    threads = os.cpu_count() or 1
    data = load_dataset(args.dataset, seed=args.seed, num_nodes=args.num_nodes,
                        avg_degree=args.avg_degree)
    print(f"graph: {data.num_nodes} nodes, {data.num_edges} edges, {data.num_features} "
          f"features; 2-layer GCN, hidden {args.hidden}; {threads} cores; median of "
          f"{args.epochs} epochs after {args.warmup}", flush=True)
    base = None
    if not args.no_pyg:
        base = single_process_epoch(data, args.hidden, int(data.y.max()) + 1, args.epochs,
                                    args.warmup, threads, dropout=0.5)
        print(f"single-process PyG epoch: {base:.3f} s ({threads} threads)", flush=True)
    with tempfile.TemporaryDirectory(dir=args.parts_dir_root) as tmp:
        folders = {}
        for ranks in args.ranks:
            folders[ranks] = Path(tmp) / f"p{ranks}"
            start = time.perf_counter()
            meta = pyg_dist.partition(data, ranks, folders[ranks], method=args.method,
                                      seed=args.seed)
            print(f"{ranks} part(s): {args.method} in {time.perf_counter() - start:.1f} s, "
                  f"cut {meta.edge_cut / meta.num_edges:.3f}, halo fraction "
                  f"{meta.halo_fraction:.3f}", flush=True)
        del data
        results = {ranks: pyg_dist.launch(rank_run, ranks,
                                          args=(str(folders[ranks]), args.hidden, args.epochs,
                                                args.warmup))
                   for ranks in args.ranks}
    report(results, base)


def report(results: dict, base: float | None) -> None:
    first = min(results)
    one = max(r["epoch"] for r in results[first])
    print(f"{'ranks':>5} {'epoch s':>8} {'speedup':>7} {'vs PyG':>7} {'exchange s':>10} "
          f"{'allreduce s':>11} {'halo MB/ep':>10} {'peak MiB':>8}")
    for ranks, per_rank in results.items():
        epoch = max(r["epoch"] for r in per_rank)
        vs = f"{epoch / base:>6.2f}x" if base else f"{'':>7}"
        print(f"{ranks:>5} {epoch:>8.3f} {one / epoch:>6.2f}x {vs} "
              f"{statistics.mean(r['exchange'] for r in per_rank):>10.3f} "
              f"{statistics.mean(r['all_reduce'] for r in per_rank):>11.3f} "
              f"{sum(r['bytes'] for r in per_rank) / 1e6:>10.1f} "
              f"{max(r['peak'] for r in per_rank) / 2**20:>8.0f}")
    print("one profiled epoch, mean over ranks (profiler self time; seconds):")
    keys = list(next(iter(results.values()))[0]["profile"]["seconds"])
    print(f"{'ranks':>5} " + " ".join(f"{k:>14}" for k in keys))
    for ranks, per_rank in results.items():
        print(f"{ranks:>5} " + " ".join(
            f"{statistics.mean(r['profile']['seconds'][k] for r in per_rank):>14.3f}"
            for k in keys))
    for ranks, per_rank in results.items():
        top = ", ".join(f"{name} {sec:.3f}" for name, sec in per_rank[0]["profile"]["top_other"])
        print(f"costliest other ops, rank 0 of {ranks}: {top}")


if __name__ == "__main__":
    main()
