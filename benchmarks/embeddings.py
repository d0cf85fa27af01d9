"""Embeddings out of a partitioned graph: each rank's memory while it writes
its rows, and the reader's result against a single-process forward.

    python benchmarks/embeddings.py [--nodes 2000000] [--width 128] [--parts 4]
        [--check-nodes 100000] [--json out.json]

A seeded random graph (``--avg-degree`` edges per node, 16 features) is cut
at random into ``--parts`` parts; every rank runs a one-layer GCN (``--width``
output channels) on its part and writes its rows with
:func:`pyg_dist.loop.write_embeddings`, the write step of
:func:`pyg_dist.save_embeddings`. Per rank: ``rows MiB`` its own rows,
``write peak KiB`` the most its resident memory (VmHWM, the high-water mark
reset just before) rose above what it held when the write began, and
``python peak KiB`` the most Python and numpy allocated during the write
(tracemalloc);
the bound is ``rows + one chunk``, the chunk being the 4 MiB block in which
the checksums are read: a rank holds its rows when the write begins, so
``beyond the chunk KiB`` is how far its write rose above that plus one chunk.
The write of ``--nodes`` nodes is timed; the whole pipeline runs again on
``--check-nodes`` nodes, where :func:`pyg_dist.read_embeddings` must return
PyG's ``GCN`` forward on the whole graph in one process (largest difference,
float32).
"""
import argparse
import json
import tempfile
import time
import tracemalloc
from pathlib import Path

import rss
import torch
from torch_geometric.data import Data
from torch_geometric.nn.models import GCN

import pyg_dist
from pyg_dist.loop import write_embeddings
from pyg_dist.nn import to_distributed

FEATURES = 16
#: The block in which the checksums are read (pyg_dist.utils.files.file_sha256).
CHUNK = 4 << 20


def make_graph(nodes, avg_degree, seed=0):
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, nodes, (2, nodes * avg_degree), generator=gen)
    x = torch.randn(nodes, FEATURES, generator=gen)
    return Data(x=x, edge_index=edge_index, num_nodes=nodes)


def make_model(width):
    torch.manual_seed(0)
    return GCN(FEATURES, width, 1)


def rank_body(parts, out, width):
    data = pyg_dist.DistData.load(parts)
    model = to_distributed(make_model(width)).eval()
    with torch.no_grad():
        rows = model(data.x, data.edge_index)
    before = rss.live()
    rss.reset_peak()
    tracemalloc.start()
    start = time.perf_counter()
    write_embeddings(rows, data.global_id, out)
    seconds = time.perf_counter() - start
    numpy_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    peak = rss.peak()
    rows_bytes = rows.numel() * rows.element_size()
    return {"rows": rows_bytes, "write_peak": max(peak - before, 0), "numpy_peak": numpy_peak,
            "seconds": seconds}


def run(nodes, args, tmp):
    graph = make_graph(nodes, args.avg_degree)
    parts, out = Path(tmp) / f"parts-{nodes}", Path(tmp) / f"emb-{nodes}"
    pyg_dist.partition(graph, args.parts, parts, method="random", seed=0)
    ranks = pyg_dist.launch(rank_body, args.parts, args=(str(parts), str(out), args.width),
                            timeout=3600)
    return graph, out, ranks


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2_000_000)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--avg-degree", type=int, default=4)
    parser.add_argument("--check-nodes", type=int, default=100_000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    mib = 1 << 20
    with tempfile.TemporaryDirectory() as tmp:
        _, _, ranks = run(args.nodes, args, tmp)
        graph, out, _ = run(args.check_nodes, args, tmp)
        with torch.no_grad():
            ref = make_model(args.width)(graph.x, graph.edge_index)
        got = torch.from_numpy(pyg_dist.read_embeddings(out).numpy())
        error = float((got - ref).abs().max() / max(float(ref.abs().max()), 1.0))
    rows = [{"nodes": args.nodes, "width": args.width, "rank": r,
             "rows_mib": round(x["rows"] / mib, 1), "write_peak_kib": x["write_peak"] // 1024,
             "python_peak_kib": x["numpy_peak"] // 1024,
             "beyond_chunk_kib": max(x["write_peak"] - CHUNK, 0) // 1024,
             "write_s": round(x["seconds"], 2), "check_nodes": args.check_nodes,
             "max_error": float(f"{error:.1e}")} for r, x in enumerate(ranks)]
    print(f"{'rank':>4}{'rows MiB':>10}{'write peak KiB':>16}{'python peak KiB':>17}"
          f"{'beyond the chunk KiB':>22}{'write s':>9}")
    for r in rows:
        print(f"{r['rank']:>4}{r['rows_mib']:>10.1f}{r['write_peak_kib']:>16,}"
              f"{r['python_peak_kib']:>17,}{r['beyond_chunk_kib']:>22,}{r['write_s']:>9.2f}")
    print(f"read back on {args.check_nodes:,} nodes against one process: largest error {error:.1e}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
