"""The 3D grid's collectives alone on the testbed: seconds per call of the
gather and the reduce a grid's aggregations and transforms issue, over axes of
2, 4 and 8 hosts, against the link model the planner charges (one latency a
call plus the busiest rank's bytes over the link's rate).

    sudo python benchmarks/grid_collectives.py [--hosts 8] [--rate 990mbit]
        [--repeats 5] [--json out.json]

Every host runs one rank (torchrun across network namespaces, links shaped
with tbf to ``--rate``, as ``benchmarks/cluster.py`` does); the ranks form
the grid's own groups (``grid_place``: ``1x2x4`` for axes of 2 and 4,
``1x1x8`` for 8), every group of an axis busy at once, as in a training
step. Each row: one operation (``gather``: ``distributed.all_gather_rows``,
what an aggregation's chunk and a transform's rows read; ``reduce``:
``distributed.reduce_row_range`` over the whole run, what they write) of a
``[rows, width]`` float32 run over an axis of ``g`` ranks; the busiest rank's
bytes sent (``(rows - rows / g) * width * 4``); the median of ``--repeats``
calls (the slowest rank's); what the link alone would take (bytes / rate);
and the ratio. A fit per axis of ``t = alpha + bytes / beta`` over the rows
ends each axis's table: ``beta`` against the shaped rate is the share of the
link a rank gets when every rank of the axis sends at once; then what the
planner's probe (``grid_3d.axis_costs``, two sizes) measures for the same
axis.

Nothing but the collectives runs: no compute, no other rank's work to wait
for. Needs root and iproute2 (see :mod:`pyg_dist.testing.cluster`).
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

#: (rows, width) of the runs timed: chunks of 8 columns (an aggregation's)
#: from a few rows to the community graph's 200,000, and a transform's
#: 16,384 rows of 128 columns.
RUNS = [(512, 8), (4096, 8), (32768, 8), (200000, 8), (16384, 128)]
#: The grid whose groups each axis size uses, and the axis.
AXES = {2: ((1, 2, 4), 1), 4: ((1, 2, 4), 2), 8: ((1, 1, 8), 2)}


def worker(args):
    """On every rank: each axis, operation and run, timed; rank 0 prints a
    JSON row each."""
    import torch
    import torch.distributed as dist

    import pyg_dist
    from pyg_dist.runtime import distributed
    from pyg_dist.strategies.grid_3d import axis_costs, axis_key
    from pyg_dist.strategies.grid_3d.grid import grid_place
    from pyg_dist.strategies.grid_3d.ops import piece_bytes

    pyg_dist.init()
    torch.set_num_threads(1)
    world = dist.get_world_size()
    for g, (shape, axis) in AXES.items():
        if g > world or world % g or shape[0] * shape[1] * shape[2] != world:
            continue
        group = grid_place(shape).group(axis)
        for rows, width in RUNS:
            x = torch.ones(rows, width)
            lo, hi = distributed.row_piece(rows, g, distributed.rank(group))
            piece = x[lo:hi].contiguous()
            for name in ("gather", "reduce"):
                times = []
                for _ in range(args.repeats + 1):  # the first call opens the connections
                    dist.barrier()
                    start = time.perf_counter()
                    if name == "gather":
                        distributed.all_gather_rows(piece, rows, group)
                    else:
                        distributed.reduce_row_range(x, rows, 0, group)
                    times.append(time.perf_counter() - start)
                times = times[1:]
                slowest = torch.tensor(times)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
                if dist.get_rank() == 0:
                    print("ROW " + json.dumps({
                        "axis": g, "kind": axis_key(shape, axis), "op": name, "rows": rows,
                        "width": width,
                        "bytes": max(piece_bytes(rows, width, g, q) for q in range(g)),
                        "seconds": statistics.median(slowest.tolist())}), flush=True)
    probed = axis_costs(world)  # what the planner's probe measures, on the same testbed
    if dist.get_rank() == 0:
        print("PROBE " + json.dumps(probed), flush=True)
    pyg_dist.shutdown()


def fit(rows):
    """Least squares ``t = alpha + bytes / beta`` over ``rows``."""
    xs = [r["bytes"] for r in rows]
    ys = [r["seconds"] for r in rows]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = (sum((x - mx) * (y - my) for x, y in zip(xs, ys))
             / sum((x - mx) ** 2 for x in xs))
    return my - slope * mx, 1.0 / slope


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--rate", default="990mbit")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="write the rows and fits here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from pyg_dist.testing.cluster import Cluster
    from pyg_dist.testing.cluster.shaping import parse_rate

    rate = parse_rate(args.rate) / 8  # bytes/s
    with Cluster(hosts=args.hosts, rate=args.rate) as cluster:
        command = cluster.torchrun([str(Path(__file__).resolve()), "--worker",
                                    "--repeats", str(args.repeats)])
        results = cluster.run(command, env={"OMP_NUM_THREADS": "1"}, timeout=1800)
    if not all(r.ok for r in results):
        for r in results:
            if not r.ok:
                print(r.describe(), file=sys.stderr)
        raise SystemExit("a host failed")
    rows = [json.loads(line[4:]) for line in results[0].stdout.splitlines()
            if line.startswith("ROW ")]
    probed = next(json.loads(line[6:]) for line in results[0].stdout.splitlines()
                  if line.startswith("PROBE "))
    fits = []
    print(f"{args.hosts} hosts, links {args.rate} ({rate / 1e6:.1f} MB/s), "
          f"median of {args.repeats} calls, the slowest rank's")
    for g in sorted({r["axis"] for r in rows}):
        print(f"\naxis of {g} ranks\n| op | rows x width | MB sent | seconds | link alone s "
              f"| measured / link |\n|---|---|---|---|---|---|")
        for r in (r for r in rows if r["axis"] == g):
            link = r["bytes"] / rate
            r["link_s"] = link
            print(f"| {r['op']} | {r['rows']} x {r['width']} | {r['bytes'] / 1e6:.3f} | "
                  f"{r['seconds']:.4f} | {link:.4f} | {r['seconds'] / link:.2f}x |")
        kind = next(r["kind"] for r in rows if r["axis"] == g)
        for op in ("gather", "reduce"):
            runs = [r for r in rows if r["axis"] == g and r["op"] == op]
            alpha, beta = fit(runs)
            fits.append({"axis": g, "kind": kind, "op": op, "alpha_s": alpha,
                         "beta_bytes_s": beta, "beta_share": beta / rate, "runs": runs})
            print(f"fit {op}: alpha {alpha * 1e3:.2f} ms, beta {beta / 1e6:.1f} MB/s "
                  f"({beta / rate:.2f}x the link)")
        alpha, beta = probed[kind]
        fits.append({"axis": g, "kind": kind, "op": "planner's probe", "alpha_s": alpha,
                     "beta_bytes_s": beta, "beta_share": beta / rate, "runs": []})
        print(f"the planner's probe ({kind}): alpha {alpha * 1e3:.2f} ms, beta "
              f"{beta / 1e6:.1f} MB/s ({beta / rate:.2f}x the link)")
    if args.json:  # a row per axis and fit, with the calls it was fitted on
        Path(args.json).write_text(json.dumps(
            [{"hosts": args.hosts, "rate": args.rate, **f} for f in fits], indent=1) + "\n")


if __name__ == "__main__":
    main()
