"""Peak memory of a rank: loading one part and training a 2-layer GCN on it,
against single-process PyG on the whole graph and our own code on one rank.

    python benchmarks/memory.py [--dataset synthetic-arxiv] [--num-nodes N]
                                [--parts 4] [--hidden 128] [--epochs 3]
                                [--slices T [T ...]] [--grids XxYxZ [XxYxZ ...]]
                                [--sums scatter|whole ...] [--skip-single] [--json FILE]
    python benchmarks/memory.py --probe PARTS_DIR [--rank 0] [--hidden 128]

Every run is a fresh process (so each peak includes importing torch, PyG and
pyg_dist) measured in the same invocation: PyG (``GCNConv`` on the whole
graph's ``edge_index``), our code on 1 rank (a 1-part folder), our code on
``--parts`` ranks. Each process reports its resident size after the imports,
after loading its data, and its peak (VmHWM) after ``--epochs`` training steps
and evaluations.

``--slices`` adds feature-parallel grids on the same ``--parts`` ranks: for
each :math:`T`, ``--parts``/T graph parts × T feature slices, each grid from
a folder of its own part count, trained by
``train(..., strategy=FeatureParallel(slices=T))`` (evaluations included);
one row per rank, and per grid the largest rank's peak above its imports.

``--grids`` adds 3D grids (``Grid3D``) on the same ``--parts`` ranks, read
from the ``--parts`` folder a chunk at a time: one row per rank with its
peak while it loaded and the edges of each adjacency block it holds, and per
grid the largest rank's peak above its imports, how far a block strays from
the grid's share of the edges and the bytes its ledger booked in the last
epoch; ``--sums`` runs each
grid with each way of keeping its sums (``Grid3D(sums=...)``, default
``scatter``); ``--json FILE`` keeps those rows (replacing the rows of the same
ranks, cut, grid and sums, keeping the others).
``--skip-single`` leaves out PyG and our one rank.

``--probe`` runs one rank of an existing partition folder alone, its halo
exchanges answered with zeros (no peers, no network): what that rank would
hold in a real run, and its compute time per epoch without communication,
for folders whose ranks do not fit on this machine together.
"""
import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

import rss

BENCH_DIR = str(Path(__file__).resolve().parent)


def _imports() -> None:
    import torch  # noqa: F401
    import torch_geometric.nn  # noqa: F401

    import pyg_dist.nn  # noqa: F401


def pyg_process(graph_file: str, hidden: int, epochs: int, threads: int) -> dict:
    """Single-process PyG on the whole graph (the same GNN on a plain edge_index)."""
    _imports()
    import torch
    from torch_geometric.data import Data

    torch.set_num_threads(threads)
    after_import = rss.current()
    data = Data.from_dict(torch.load(graph_file, weights_only=True))
    after_load = rss.current()
    times = _train(data, int(data.y.max()) + 1, hidden, epochs)
    return {"after_import": after_import, "after_load": after_load, "peak": rss.peak(),
            "seconds": sum(times)}


def _train(data, classes: int, hidden: int, epochs: int) -> list[float]:
    """``epochs`` training steps of a 2-layer GCN, each followed by an
    evaluation; the seconds of each training step."""
    import torch

    from pyg_dist.models import GNN
    from pyg_dist.train import evaluate, sync_parameters, train_step

    torch.manual_seed(0)
    model = GNN("gcn", data.x.size(1), hidden, classes)
    sync_parameters(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        train_step(model, data, optimizer)
        times.append(time.perf_counter() - start)
        evaluate(model, data)
    return times


def rank_process(parts_dir: str, hidden: int, epochs: int) -> dict:
    """One rank of ours: its part only (memory-mapped), the same GNN."""
    sys.path.insert(0, BENCH_DIR)
    import rss as rank_rss  # the benchmark's helper, in the spawned rank

    _imports()

    import pyg_dist

    after_import = rank_rss.current()
    data = pyg_dist.DistData.load(parts_dir)
    after_load = rank_rss.current()
    times = _train(data, data.meta.num_classes, hidden, epochs)
    return {"after_import": after_import, "after_load": after_load, "peak": rank_rss.peak(),
            "seconds": sum(times), "owned": data.num_nodes,
            "halo": data.edge_index.num_halo, "edges": data.edge_index.num_edges}


def grid_process(parts_dir: str, slices: int, hidden: int, epochs: int) -> dict:
    """One rank of a feature-parallel grid: its columns of its part's rows."""
    sys.path.insert(0, BENCH_DIR)
    import rss as rank_rss  # the benchmark's helper, in the spawned rank

    _imports()

    import pyg_dist  # noqa: F401 - the floor of rank_process's ranks

    after_import = rank_rss.current()
    import torch

    from pyg_dist.config import FeatureParallel
    from pyg_dist.models import GNN
    from pyg_dist.train import train

    strategy = FeatureParallel(slices=slices)
    data = strategy.load(parts_dir)
    after_load = rank_rss.current()
    torch.manual_seed(0)
    model = GNN("gcn", data.num_features, hidden, data.meta.num_classes)
    result = train(model, data, epochs, strategy=strategy, progress=False)
    return {"after_import": after_import, "after_load": after_load, "peak": rank_rss.peak(),
            "seconds": sum(e.train_seconds for e in result.history),
            "owned": data.edge_index.num_owned, "halo": data.edge_index.num_halo,
            "edges": data.edge_index.num_edges, "columns": data.columns, "rows": data.rows}


def probe_process(parts_dir: str, rank: int, hidden: int, epochs: int) -> dict:
    """One rank of ``parts_dir`` alone; exchanges answered with zeros."""
    _imports()

    import pyg_dist
    from pyg_dist.halo import exchange
    from pyg_dist.halo.comm import PendingRows

    def zeros(send, send_counts, recv_counts, group=None, transport=None, async_op=False,
              tag=0):
        recv = send.new_zeros((sum(recv_counts), *send.shape[1:]))
        return PendingRows(recv, []) if async_op else recv

    exchange.exchange_rows = zeros
    after_import = rss.current()
    data = pyg_dist.DistData.load(parts_dir, rank=rank)
    after_load = rss.current()
    times = _train(data, data.meta.num_classes, hidden, epochs)
    return {"after_import": after_import, "after_load": after_load, "peak": rss.peak(),
            "epoch_seconds": times, "owned": data.num_nodes, "halo": data.edge_index.num_halo,
            "edges": data.edge_index.num_edges}


def probe(args: argparse.Namespace) -> None:
    with mp.get_context("spawn").Pool(1) as pool:
        r = pool.apply(probe_process, (args.probe, args.rank, args.hidden, args.epochs))
    mib = 2**20
    print(f"rank {args.rank} of '{args.probe}' alone: {r['owned']} owned, {r['halo']} halo, "
          f"{r['edges']} edges; RSS after imports {r['after_import'] / mib:.0f} MiB, after "
          f"loading {r['after_load'] / mib:.0f} MiB, peak {r['peak'] / mib:.0f} MiB; "
          f"training steps {', '.join(f'{t:.1f}' for t in r['epoch_seconds'])} s "
          f"(no communication)")


def grid_3d_process(parts_dir: str, shape: tuple, sums: str, hidden: int, epochs: int) -> dict:
    """One rank of a 3D grid: its adjacency blocks and its blocks of x."""
    sys.path.insert(0, BENCH_DIR)
    import rss as rank_rss  # the benchmark's helper, in the spawned rank

    _imports()

    import pyg_dist  # noqa: F401 - the floor of rank_process's ranks

    after_import = rank_rss.current()
    import torch

    from pyg_dist.config import Grid3D
    from pyg_dist.models import GNN
    from pyg_dist.train import train

    strategy = Grid3D(*shape, sums=sums)
    data = strategy.load(parts_dir)
    after_load, load_peak = rank_rss.current(), rank_rss.peak()
    torch.manual_seed(0)
    model = GNN("gcn", data.num_features, hidden, data.meta.num_classes)
    result = train(model, data, epochs, strategy=strategy, progress=False)
    edges = data.meta.num_edges
    return {"after_import": after_import, "after_load": after_load, "load_peak": load_peak,
            "peak": rank_rss.peak(), "seconds": sum(e.train_seconds for e in result.history),
            "blocks": {f"{a}{b}": block.nnz for (a, b), block in data.blocks().items()},
            "shares": {f"{a}{b}": edges / (shape[a] * shape[b])
                       for (a, b) in data.blocks()},
            "block_bytes": sum(b.nbytes() for b in data.blocks().values()),
            "x": tuple(data.x.shape),
            "step bytes": {"fwd": result.history[-1].halo_bytes_fwd,
                           "bwd": result.history[-1].halo_bytes_bwd,
                           "grad": result.history[-1].grad_bytes,
                           "eval": result.history[-1].halo_bytes_eval}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="synthetic-arxiv")
    parser.add_argument("--num-nodes", type=int, default=None)
    parser.add_argument("--avg-degree", type=float, default=None)
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--method", default="metis")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slices", type=int, nargs="*", default=[], metavar="T",
                        help="feature-parallel grids of --parts/T parts x T slices to add")
    parser.add_argument("--grids", nargs="*", default=[], metavar="XxYxZ",
                        help="3D grids of --parts ranks to add")
    parser.add_argument("--sums", nargs="+", default=["scatter"], choices=["scatter", "whole"],
                        help="how the 3D grids keep their sums (Grid3D(sums=...)), each run")
    parser.add_argument("--skip-single", action="store_true",
                        help="leave out PyG and our one rank (the grids are compared with "
                             "the --parts ranks alone)")
    parser.add_argument("--json", default=None, metavar="FILE",
                        help="write the 3D grids' rows to FILE (rows of other --parts and "
                             "--method kept)")
    parser.add_argument("--probe", default=None, metavar="PARTS_DIR",
                        help="run one rank of this partition folder alone (see above)")
    parser.add_argument("--rank", type=int, default=0, help="the rank --probe runs")
    args = parser.parse_args()
    if args.probe:
        probe(args)
        return

    import torch

    import pyg_dist
    from pyg_dist.datasets import load_dataset

    data = load_dataset(args.dataset, seed=args.seed, num_nodes=args.num_nodes,
                        avg_degree=args.avg_degree)
    threads = os.cpu_count() or 1
    print(f"graph: {data.num_nodes} nodes, {data.num_edges} edges, {data.num_features} "
          f"features, {rss.tensor_bytes(data) / 2**20:.0f} MiB of tensors; 2-layer GCN, hidden "
          f"{args.hidden}, {args.epochs} epochs (train step + evaluation)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        graph_file = str(Path(tmp) / "graph.pt")
        torch.save(data.to_dict(), graph_file)
        grids = [(args.parts // t, t) for t in args.slices]
        singles = () if args.skip_single else (1,)
        for parts in sorted({*singles, args.parts} | {d for d, _ in grids}):
            pyg_dist.partition(data, parts, Path(tmp) / f"p{parts}", method=args.method,
                               seed=args.seed)
        del data
        pyg = None
        if not args.skip_single:
            with mp.get_context("spawn").Pool(1) as pool:
                pyg = pool.apply(pyg_process, (graph_file, args.hidden, args.epochs, threads))
        ours = {parts: pyg_dist.launch(rank_process, parts,
                                       args=(str(Path(tmp) / f"p{parts}"), args.hidden,
                                             args.epochs))
                for parts in (*singles, args.parts)}
        feature = {(d, t): pyg_dist.launch(grid_process, args.parts,
                                           args=(str(Path(tmp) / f"p{d}"), t, args.hidden,
                                                 args.epochs))
                   for d, t in grids}
        from pyg_dist.strategies.grid_3d import parse_grid

        cubes = {(text, sums): pyg_dist.launch(grid_3d_process, args.parts,
                                               args=(str(Path(tmp) / f"p{args.parts}"),
                                                     parse_grid(text), sums, args.hidden,
                                                     args.epochs))
                 for text in args.grids for sums in args.sums}
    if pyg is not None:
        report(pyg, ours, args.parts)
    else:
        report_parts(ours[args.parts], args.parts)
    report_grids(feature, ours, args.parts)
    rows = report_grid_3d(cubes, ours, args.parts, args.method)
    if args.json and rows:
        write_rows(args.json, rows)


def report(pyg: dict, ours: dict, parts: int) -> None:
    mib = 2**20
    print(f"{'run':>22} {'import MiB':>10} {'loaded MiB':>10} {'peak MiB':>9} "
          f"{'peak-import':>11} {'vs PyG':>7} {'vs 1 rank':>9}")
    rows = [("PyG, 1 process", pyg)] + [("ours 1 rank", r) for r in ours[1]] + [
        (f"ours rank {k}/{parts}", r) for k, r in enumerate(ours[parts])]
    one = ours[1][0]["peak"]
    for name, r in rows:
        print(f"{name:>22} {r['after_import'] / mib:>10.0f} {r['after_load'] / mib:>10.0f} "
              f"{r['peak'] / mib:>9.0f} {(r['peak'] - r['after_import']) / mib:>11.0f} "
              f"{r['peak'] / pyg['peak']:>6.2f}x {r['peak'] / one:>8.2f}x")
    largest = max(r["peak"] for r in ours[parts])
    largest_data = max(r["peak"] - r["after_import"] for r in ours[parts])
    print(f"largest of {parts} ranks: {largest / pyg['peak']:.2f}x of PyG, "
          f"{largest / one:.2f}x of our 1 rank (peak RSS); above the imports: "
          f"{largest_data / (pyg['peak'] - pyg['after_import']):.2f}x of PyG, "
          f"{largest_data / (one - ours[1][0]['after_import']):.2f}x of our 1 rank")
    for k, r in enumerate(ours[parts]):
        print(f"  rank {k}: {r['owned']} owned, {r['halo']} halo, {r['edges']} edges, "
              f"{r['seconds']:.1f} s")


def report_parts(ranks: list, parts: int) -> None:
    """A row per graph-parallel rank (without PyG and our one rank)."""
    mib = 2**20
    for k, r in enumerate(ranks):
        print(f"  rank {k}/{parts}: {r['owned']} owned, {r['halo']} halo, {r['edges']} edges, "
              f"peak {r['peak'] / mib:.0f} MiB, {(r['peak'] - r['after_import']) / mib:.0f} "
              f"MiB above its imports, {r['seconds']:.1f} s")
    largest = max(r["peak"] - r["after_import"] for r in ranks)
    print(f"largest of {parts} graph-parallel ranks: {largest / mib:.0f} MiB above its imports")


def write_rows(path: str, rows: list) -> None:
    """Writes ``rows`` to the JSON file ``path``, replacing its rows of the
    same ranks, cut, grid and sums and keeping the others."""
    import json

    def key(row: dict) -> tuple:
        return row["ranks"], row["cut"], row["grid"], row["sums"]

    file = Path(path)
    kept = json.loads(file.read_text()) if file.is_file() else []
    done = {key(r) for r in rows}
    kept = [r for r in kept if key(r) not in done] + rows
    kept.sort(key=key)
    file.write_text(json.dumps(kept, indent=1) + "\n")
    print(f"wrote {path}")


def report_grids(feature: dict, ours: dict, parts: int) -> None:
    """A row per rank of each feature-parallel grid; per grid its largest
    rank's peak above the imports, against our graph-parallel ranks'."""
    if not feature:
        return
    mib = 2**20
    above = max(r["peak"] - r["after_import"] for r in ours[parts])
    print(f"{'grid, rank':>22} {'import MiB':>10} {'loaded MiB':>10} {'peak MiB':>9} "
          f"{'peak-import':>11} {'rows x columns':>16} {'halo':>7} {'train s':>7}")
    for (d, t), ranks in feature.items():
        for k, r in enumerate(ranks):
            shape = f"{r['rows'][1] - r['rows'][0]} x {r['columns'][1] - r['columns'][0]}"
            print(f"{f'{d}x{t} rank {k}/{parts}':>22} {r['after_import'] / mib:>10.0f} "
                  f"{r['after_load'] / mib:>10.0f} {r['peak'] / mib:>9.0f} "
                  f"{(r['peak'] - r['after_import']) / mib:>11.0f} {shape:>16} "
                  f"{r['halo']:>7} {r['seconds']:>7.1f}")
    for (d, t), ranks in feature.items():
        largest = max(r["peak"] - r["after_import"] for r in ranks)
        print(f"grid {d}x{t}: largest rank {largest / mib:.0f} MiB above its imports, "
              f"{largest / above:.2f}x of our graph-parallel {parts} ranks' largest "
              f"({above / mib:.0f} MiB)")


def report_grid_3d(cubes: dict, ours: dict, parts: int, method: str) -> list:
    """A row per rank of each 3D grid (its blocks' edges and its x block);
    per grid its largest rank's peak above the imports, against our
    graph-parallel ranks', and the farthest a rank's block strays from the
    grid's share of the edges (:math:`E / (s_r s_c)` per layout). Returns a
    row per grid."""
    if not cubes:
        return []
    mib = 2**20
    above = max(r["peak"] - r["after_import"] for r in ours[parts])
    print(f"{'3D grid, rank':>22} {'peak MiB':>9} {'peak-import':>11} {'load-import':>11} "
          f"{'x block':>12} {'train s':>7}  edges per block (targets' axis, sources' axis)")
    axes = "xyz"
    for (text, sums), ranks in cubes.items():
        for k, r in enumerate(ranks):
            blocks = ", ".join(f"{axes[int(key[0])]}{axes[int(key[1])]} {n}"
                               for key, n in r["blocks"].items())
            shape = f"{r['x'][0]} x {r['x'][1]}"
            print(f"{f'{text} {sums} {k}/{parts}':>22} {r['peak'] / mib:>9.0f} "
                  f"{(r['peak'] - r['after_import']) / mib:>11.0f} "
                  f"{(r['load_peak'] - r['after_import']) / mib:>11.0f} {shape:>12} "
                  f"{r['seconds']:>7.1f}  {blocks}")
    rows = []
    for (text, sums), ranks in cubes.items():
        largest = max(r["peak"] - r["after_import"] for r in ranks)
        booked = ranks[0]["step bytes"]
        stray = max(abs(n / r["shares"][key] - 1) for r in ranks
                    for key, n in r["blocks"].items())
        block_mib = max(r["block_bytes"] for r in ranks) / mib
        print(f"grid {text}, sums {sums}: largest rank {largest / mib:.0f} MiB above its "
              f"imports, {largest / above:.2f}x of our graph-parallel {parts} ranks' largest "
              f"({above / mib:.0f} MiB); a block at most {100 * stray:.1f}% from the "
              f"grid's share; blocks at most {block_mib:.0f} MiB a rank; the ledger's last "
              f"epoch (all ranks): " + ", ".join(f"{way} {n:,} B" for way, n in booked.items()))
        rows.append({"ranks": parts, "grid": text, "sums": sums, "cut": method,
                     "grid MiB": round(largest / mib), "graph-parallel MiB": round(above / mib),
                     "ratio": round(largest / above, 2), "stray %": round(100 * stray, 1),
                     "blocks MiB": round(block_mib)})
    return rows


if __name__ == "__main__":
    main()
