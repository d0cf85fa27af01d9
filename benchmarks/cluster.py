"""Epoch time under a real network: every halo policy on hosts joined by shaped
links (network namespaces, tc tbf), against the same ranks on one host.

    sudo python benchmarks/cluster.py [--datasets cora community] [--hosts 2 4]
        [--links 1gbit 10gbit loopback | --regime gpu-10gbe gpu-100gbit] [--seeds 3]
        [--epochs-cora 200] [--epochs-community 20] [--community-nodes 200000]
        [--eval-every 5] [--policies LABEL ...] [--cut metis|random]
        [--input-dropout P] [--json out.json]

For each dataset and host count H the graph is cut into H parts with METIS
(``--cut random``: a seeded random cut, where a part's halo is nearly the
whole graph; the floor's tiny graph and ``gradient-only``'s clusters stay METIS);
each host holds meta.json and its own part and runs one rank under torchrun
(``--nnodes H --nproc-per-node 1``). ``loopback`` runs the same H ranks on one
host. One row per policy: test accuracy (mean over seeds, at the best
validation epoch) and its difference to exact, training halo bytes per epoch
(both directions, all ranks), median epoch time and its ratio to exact in the
same run, and the fraction of communication time hidden behind compute.
``gradient-only`` trains on groups of METIS clusters (4 per host, no halo:
its bytes are the parameter gradients'), every other row graph-parallel.
``feature-parallel`` adds a row per grid of the H ranks (``feature-parallel
DxT``, D = H/T graph parts x T feature slices, every host holding the whole
partition folder; its bytes include the all-to-alls).
``grid-3d`` adds a row per 3D grid of the H ranks (``grid-3d XxYxZ``, every
host holding the whole partition folder, each rank reading its blocks; its
bytes are the grid's collectives); ``--grids`` names the grids (default:
every grid of the H ranks).
``--input-dropout 0`` trains the GCN without dropout on its input features
(default: the model's dropout 0.5 there too), where feature-parallel grids
keep layer 0's aggregate after the first step.
``auto`` adds its choice per layer; each table ends with the fastest policy
within 1 point of exact (overall and keeping every edge) and ``auto``'s time
and bytes against both. The baseline is measured in the same run.

``--regime gpu-10gbe|gpu-100gbit`` replaces ``--links``: per dataset and host
count, a calibration job on unshaped links measures exact training's compute
per epoch on the real graph and on a graph of a few hundred nodes (the floor
that does not shrink with the graph), ``benchmarks/regime.py`` computes the
H200's roofline for the same kernels on the largest part, and the links are
shaped to the GPU cluster's rate (10 or 100 Gbit/s) divided by the speedup
``f`` = testbed compute / GPU compute, so that communication takes the share
of an epoch it would take on the GPU cluster (the arithmetic is in
``regime.py``).

Datasets: ``cora`` (the Planetoid files shipped in tests/data) and
``community``, the arxiv-shaped seeded community graph of
:mod:`pyg_dist.datasets` resized to ``--community-nodes`` (heavy-tailed
degrees, communities of power-law sizes; METIS cuts 8-12% of its edges).
Needs root and iproute2 (see :mod:`pyg_dist.testing.cluster`).
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

#: The Cora raw files shipped with the tests.
CORA_ROOT = Path(__file__).resolve().parents[1] / "tests" / "data"

# (label, policy spec, compression, cache static inputs)
POLICIES = [
    ("exact, no input cache", "exact", None, False),
    ("exact", "exact", None, True),
    ("exact + int8", "exact", "int8", True),
    ("exact, pre-aggregated", "exact", None, True),
    ("stale:4 + int8", "stale:4", "int8", True),
    ("pipelined", "pipelined", None, True),
    ("pipelined + int8", "pipelined", "int8", True),
    ("sampled:0.1", "sampled:0.1", None, True),
    ("isolated", "isolated", None, True),
    ("auto", "auto", None, True),
    ("gradient-only", "exact", None, True),
    ("planned:stale", "exact", None, True),
    ("feature-parallel", "exact", None, True),
    ("grid-3d", "exact", None, True),
]
EXACT = "exact"
#: Model per dataset: (hidden width, layers).
MODELS = {"cora": (16, 2), "community": (128, 2)}
#: Label of the gradient-only row, which loads the clustered folder.
GRADIENT_ONLY = "gradient-only"
#: Label of the rows trained feature parallel, one per grid ("feature-parallel DxT").
FEATURE_PARALLEL = "feature-parallel"
#: Label of the rows trained on a 3D grid, one per grid ("grid-3d XxYxZ").
GRID_3D = "grid-3d"
#: The labels whose rows are grids of the ranks, each reading the whole partition folder.
GRIDS = (FEATURE_PARALLEL, GRID_3D)
#: Label of the row trained with strategy="auto" (Planned(accept="stale")).
PLANNED = "planned:stale"
#: The planner's label of each row's strategy (rows it does not rank are absent).
PLANNER_LABELS = {
    "exact": "graph-parallel exact",
    "exact + int8": "graph-parallel exact,compress=int8",
    "exact, pre-aggregated": "graph-parallel exact pre-aggregated",
    "stale:4 + int8": "graph-parallel stale:4,compress=int8",
    "pipelined": "graph-parallel pipelined",
    "pipelined + int8": "graph-parallel pipelined,compress=int8",
    "sampled:0.1": "graph-parallel sampled:0.1",
    "isolated": "graph-parallel isolated",
    "gradient-only": "gradient-only",
}
#: Clusters per host of the gradient-only row's folder.
CLUSTERS = 4
#: Nodes per rank of the graph the calibration's floor is measured on.
FLOOR_NODES = 300


# -- on every rank (under torchrun) ---------------------------------------------------------

def worker(args):
    """Every policy and seed on this rank's part; rank 0 prints one JSON row
    each (``--calibrate``: the calibration's one row instead)."""
    import pyg_dist
    from pyg_dist.config import (
        Evaluation,
        FeatureParallel,
        GradientOnly,
        GraphParallel,
        Grid3D,
        Planned,
    )
    from pyg_dist.halo import parse_policy
    from pyg_dist.strategies.grid_3d import grids as grids_3d

    pyg_dist.init()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if args.calibrate:
        return calibrate(args)
    chosen = [p for p in POLICIES if p[0] in args.policies]
    world = int(os.environ["WORLD_SIZE"])
    shapes = {FEATURE_PARALLEL: [f"{world // t}x{t}" for t in range(1, world + 1)
                                 if world % t == 0],
              GRID_3D: args.grids or ["x".join(map(str, g)) for g in grids_3d(world)]}
    chosen = [p for p in chosen if p[0] not in GRIDS] + [  # a row per grid
        (f"{p[0]} {shape}", *p[1:]) for p in chosen if p[0] in GRIDS for shape in shapes[p[0]]]
    predictions(args)
    for seed in range(args.seeds):  # seeds outside: a change of machine load hits every policy
        # odd seeds run the policies in reverse order, so a drift in load evens out
        for label, spec, compress, cache in (chosen if seed % 2 == 0 else chosen[::-1]):
            folder = args.clusters_dir if label == GRADIENT_ONLY else args.parts_dir
            if label.startswith(FEATURE_PARALLEL):
                strategy = FeatureParallel(slices=int(label.split("x")[-1]))
                data = strategy.load(args.whole_dir)
            elif label.startswith(GRID_3D):
                strategy = Grid3D(grid=label.split()[-1])
                data = strategy.load(args.whole_dir)
            else:
                strategy = (GradientOnly() if label == GRADIENT_ONLY
                            else Planned(accept="stale") if label == PLANNED
                            else GraphParallel(pre_aggregate=label.endswith("pre-aggregated")))
                data = pyg_dist.DistData.load(folder, halo=parse_policy(spec, compress, cache))
            result = run_policy(data, args, seed, strategy, Evaluation(every=args.eval_every))
            summary = result.summary()
            if torch.distributed.get_rank() == 0:
                print("ROW " + json.dumps({
                    "policy": label, "seed": seed, "test_acc": result.test_acc,
                    "train_bytes": (summary["halo_bytes_fwd"] + summary["halo_bytes_bwd"]
                                    + summary["grad_bytes"]
                                    + summary["all_to_all_bytes"]) / result.epochs,
                    "eval_bytes": summary["halo_bytes_eval"] / result.epochs,
                    "epoch_s": statistics.median(e.seconds for e in result.history[1:]),
                    "comm_s": (summary["comm_seconds"]
                               + summary["all_to_all_seconds"]) / result.epochs,
                    "overlap": summary["overlap_fraction"],
                    "choices": summary.get("halo_choices", {}),
                    "plan": summary.get("plan"),
                }), flush=True)
    pyg_dist.shutdown()


def predictions(args):
    """The planner's probe on this rank's part, before any row trains: rank 0
    prints every strategy's predicted epoch seconds and bytes per epoch, and
    its choice at each accepted risk. Gradient-only training is predicted as
    if the folder had clusters (its prediction, compute and the gradients,
    does not depend on the halo)."""
    import dataclasses

    import pyg_dist
    from pyg_dist.strategies import planner

    data = pyg_dist.DistData.load(args.parts_dir)
    torch.manual_seed(0)
    from pyg_dist.models import GNN

    model = GNN("gcn", data.x.size(1), args.hidden, data.meta.num_classes, layers=args.layers,
                input_dropout=args.input_dropout)
    measured = dataclasses.replace(planner.probe(model, data), clusters=True)
    candidates = planner.predict(measured, args.epochs)
    measurable = [c for c in candidates if c.label in PLANNER_LABELS.values()
                  or c.label.startswith(GRIDS)]
    if data.rank == 0:
        print("PLAN " + json.dumps({
            "rows": [c.row() for c in candidates],
            # the choice among the strategies the table measures
            "choices": {risk: planner.choose(measurable, risk).label for risk in planner.RISKS},
            "probe": dataclasses.asdict(measured)}), flush=True)


def run_policy(data, args, seed, strategy, evaluation):
    """One training run of the benchmark's GCN on ``data``."""
    from pyg_dist.models import GNN
    from pyg_dist.train import train

    torch.manual_seed(seed)
    # a feature-parallel rank's x holds its columns only
    width = getattr(data, "num_features", None) or data.x.size(1)
    model = GNN("gcn", width, args.hidden, data.meta.num_classes, layers=args.layers,
                input_dropout=args.input_dropout)
    torch.manual_seed(seed * 1000 + torch.distributed.get_rank())
    return train(model, data, args.epochs, strategy=strategy, progress=False,
                 evaluation=evaluation)


def calibrate(args):
    """Exact training on the real part and on the floor's tiny part; rank 0
    prints the compute per epoch of each (median epoch less the time spent
    waiting for halo rows, the slowest rank) and every rank's part sizes."""
    import torch.distributed as dist

    import pyg_dist
    from pyg_dist.config import Evaluation

    out = {}
    for key, folder in (("real", args.parts_dir), ("floor", args.floor_dir)):
        data = pyg_dist.DistData.load(folder)
        result = run_policy(data, args, 0, None, Evaluation(every=args.eval_every))
        epochs = [e.seconds for e in result.history[1:]]
        compute = statistics.median(epochs) - result.summary()["comm_seconds"] / result.epochs
        graph = data.edge_index
        sizes = {"owned": graph.num_owned, "entries": graph.num_edges + graph.num_owned,
                 "halo": graph.num_halo, "sent": graph.plan.num_send, "compute": compute}
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, sizes)
        out[key] = gathered
    if dist.get_rank() == 0:
        print("CAL " + json.dumps(out), flush=True)
    pyg_dist.shutdown()


# -- the driver -----------------------------------------------------------------------------

def load_graph(name, args, tmp):
    if name == "cora":
        from pyg_dist.datasets import planetoid

        copy = Path(tmp) / "planetoid"
        shutil.copytree(Path(args.cora_root) / "Cora" / "raw", copy / "Cora" / "raw")
        return planetoid("cora", copy), args.epochs_cora
    if name == "community":
        from pyg_dist.datasets import community_graph, preset

        config = preset("synthetic-arxiv", num_nodes=args.community_nodes)
        return community_graph(config, seed=0), args.epochs_community
    raise SystemExit(f"unknown --datasets entry '{name}'; use cora or community")


def run_job(dataset, hosts, link, folders, epochs, seeds, args, calibrate=False):
    """One torchrun job on a fresh testbed: every policy and seed (or the
    calibration, with ``calibrate``, on unshaped links)."""
    from pyg_dist.testing.cluster import Cluster

    loopback = link == "loopback"
    hidden, layers = MODELS[dataset]
    worker_args = [str(Path(__file__).resolve()), "--worker", "--parts-dir", "parts",
                   "--clusters-dir", "clusters", "--floor-dir", "floor",
                   "--whole-dir", "whole",
                   "--epochs", str(epochs), "--seeds", str(seeds), "--eval-every",
                   str(args.eval_every), "--hidden", str(hidden), "--layers", str(layers),
                   "--policies", *args.policies] + (["--calibrate"] if calibrate else []) + (
                       [] if args.input_dropout is None else
                       ["--input-dropout", str(args.input_dropout)]) + (
                       ["--grids", *args.grids] if args.grids else [])
    rate = None if loopback or calibrate else link
    with Cluster(hosts=1 if loopback else hosts, rate=rate) as cluster:
        per_host = hosts if loopback else 1
        cluster.distribute(folders["parts"], nproc_per_node=per_host)
        cluster.distribute(folders["floor"], nproc_per_node=per_host, name="floor")
        for host in cluster.hosts:  # regrouping may read any cluster
            shutil.copytree(folders["clusters"], host.workdir / "clusters", dirs_exist_ok=True)
            if set(GRIDS) & set(args.policies) and not calibrate:  # a grid reads every part
                shutil.copytree(folders["parts"], host.workdir / "whole", dirs_exist_ok=True)
        command = cluster.torchrun(worker_args, nproc_per_node=per_host)
        results = cluster.run(command, env={"OMP_NUM_THREADS": "1",
                                            "PYG_DIST_TIMEOUT": "1800"}, timeout=6 * 3600)
    what = f"{dataset} on {hosts} hosts, {link}"
    if calibrate:
        return collected(results, what, "CAL ")
    return collected(results, what, "ROW "), collected(results, what, "PLAN ")[0]


def regime_rates(dataset, hosts, folders, epochs, args):
    """The calibration job, the roofline and the shaped rate of each of
    ``args.regime``; prints the arithmetic."""
    import regime

    cal = run_job(dataset, hosts, "calibration", folders, epochs, 1, args, calibrate=True)[0]
    hidden, layers = MODELS[dataset]
    widths = [folders["features"]] + [hidden] * (layers - 1) + [folders["classes"]]
    rooflines = []
    for sizes in cal["real"]:
        part = regime.Part(sizes["owned"], sizes["entries"], sizes["halo"], sizes["sent"])
        rooflines.append(regime.gcn_step_seconds(part, widths))
    slowest = max(rooflines, key=lambda r: sum(r.values()))
    roofline = sum(slowest.values())
    cpu = max(s["compute"] for s in cal["real"])
    floor = max(s["compute"] for s in cal["floor"])
    factor = regime.speedup(cpu, floor, roofline)
    print(f"regime: testbed compute {cpu * 1e3:.1f} ms/epoch (slowest rank); floor "
          f"({FLOOR_NODES} nodes/rank) {floor * 1e3:.2f} ms; H200 roofline of the largest "
          f"part {roofline * 1e3:.3f} ms (" + ", ".join(
              f"{k} {v * 1e3:.3f}" for k, v in slowest.items()) + f"); f = {cpu * 1e3:.1f} / "
          f"({floor * 1e3:.2f} + {roofline * 1e3:.3f}) = {factor:.1f}", flush=True)
    rates = {}
    for name in args.regime:
        rates[name] = regime.shaped_rate(name, factor)
        print(f"regime {name}: {regime.REGIMES[name] / 1e9:g} Gbit/s / {factor:.1f} -> "
              f"{rates[name]}", flush=True)
    return rates, {"f": factor, "cpu_s": cpu, "floor_s": floor, "roofline_s": roofline}


def testbed_arguments(parser):
    """``--testbed LINK`` and the hidden options a benchmark's testbed
    workers are started with (``--worker``, ``--runs``, ``--worker-layers``,
    ``--classes``, ``--seed``, ``--epochs``)."""
    parser.add_argument("--testbed", default=None, metavar="LINK",
                        help="one host per rank on the namespace testbed, links shaped to "
                             "LINK (e.g. 1gbit); needs root")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--runs", help=argparse.SUPPRESS)
    parser.add_argument("--worker-layers", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--classes", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--epochs", type=int, help=argparse.SUPPRESS)


def collected(results, what, prefix):
    """The JSON after ``prefix`` on each such line host 0 printed in a
    testbed run; exits naming ``what`` and the host's account if any failed."""
    for r in results:
        if not r.ok:
            raise SystemExit(f"{what}: {r.describe()}")
    return [json.loads(line[len(prefix):]) for line in results[0].stdout.splitlines()
            if line.startswith(prefix)]


def table(dataset, hosts, link, rows, extra=None, plan=None):
    """Prints one table; returns its lines as dicts."""
    by_policy = {}
    for row in rows:
        by_policy.setdefault(row["policy"], []).append(row)
    exact = by_policy[EXACT]
    exact_acc = statistics.mean(r["test_acc"] for r in exact)
    exact_time = statistics.median(r["epoch_s"] for r in exact)
    print(f"\n{dataset}, {hosts} host(s) x 1 rank, {link}; {len(exact)} seed(s); "
          f"load {_load()}", flush=True)
    predicted = {r["strategy"]: r for r in (plan or {}).get("rows", [])}
    print("| policy | test acc | Δ acc | MB/epoch | epoch s | vs exact | overlap | "
          "predicted s | predicted MB | choice |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = []
    for label, runs in by_policy.items():
        acc = statistics.mean(r["test_acc"] for r in runs)
        epoch = statistics.median(r["epoch_s"] for r in runs)
        line = {
            "dataset": dataset, "hosts": hosts, "link": link, "policy": label,
            "test_acc": acc, "delta": acc - exact_acc, "seeds": [r["test_acc"] for r in runs],
            "train_mb": statistics.mean(r["train_bytes"] for r in runs) / 1e6,
            "epoch_s": epoch, "ratio": epoch / exact_time,
            "comm_s": statistics.median(r["comm_s"] for r in runs),
            "overlap": statistics.mean(r["overlap"] for r in runs),
            "choice": _choice(runs[0]["choices"]), "choices": runs[0]["choices"],
            **(extra or {}),
        }
        guess = predicted.get(label if label.startswith(GRIDS)
                              else PLANNER_LABELS.get(label, ""))
        if label == PLANNED and runs[0].get("plan"):
            line["choice"] = runs[0]["plan"]["choice"]
            guess = predicted.get(line["choice"])
        if guess is not None:
            line["predicted_s"] = guess["predicted_epoch_s"]
            line["predicted_mb"] = guess["predicted_bytes_per_epoch"] / 1e6
        lines.append(line)
        guessed = (f"{line['predicted_s']:.3f} ({line['predicted_s'] / epoch:.2f}x) | "
                   f"{line['predicted_mb']:.3f}" if "predicted_s" in line else " | ")
        print(f"| {label} | {100 * acc:.2f}% | {100 * line['delta']:+.2f} | "
              f"{line['train_mb']:.3f} | {epoch:.3f} | {line['ratio']:.2f}x | "
              f"{100 * line['overlap']:.0f}% | {guessed} | {line['choice']} |", flush=True)
    print(_verdict(lines), flush=True)
    if plan:
        print(_plan_verdict(lines, plan), flush=True)
    return lines


def _plan_verdict(lines, plan):
    """The planner's choice at each risk against the fastest row measured at
    that risk, and how far its predictions are from the measured epochs."""
    risks = {"exact": "exact", "exact, pre-aggregated": "exact", "exact + int8": "compressed",
             "stale:4 + int8": "stale",
             "pipelined": "stale", "pipelined + int8": "stale", "sampled:0.1": "approximate",
             "isolated": "approximate", "gradient-only": "approximate"}
    risks.update({x["policy"]: "exact" for x in lines
                  if x["policy"].startswith(GRIDS)})
    by_planner = {PLANNER_LABELS.get(x["policy"], x["policy"]): x for x in lines
                  if x["policy"] in PLANNER_LABELS or x["policy"].startswith(GRIDS)}
    order = ["exact", "compressed", "stale", "approximate"]
    parts = []
    for risk in order:
        label = plan["choices"][risk]
        allowed = [x for x in lines if x["policy"] in risks
                   and order.index(risks[x["policy"]]) <= order.index(risk)]
        fastest = min(allowed, key=lambda x: x["epoch_s"])
        mine = by_planner.get(label)
        parts.append(f"{risk}: {label} " + (f"{mine['epoch_s'] / fastest['epoch_s']:.2f}x of "
                                            f"{fastest['policy']}" if mine else "(not measured)"))
    errors = [x["predicted_s"] / x["epoch_s"] for x in lines if "predicted_s" in x]
    return ("planner: " + "; ".join(parts)
            + (f"; predicted/measured epoch {min(errors):.2f}-{max(errors):.2f}x"
               if errors else ""))


#: Policies that drop edges (the model sees another graph): compared apart.
EDGE_DROPPING = ("sampled:0.1", "isolated", GRADIENT_ONLY)


def _verdict(lines):
    """The fastest hand-picked policy at equal accuracy (within 1 point of
    exact, either way), overall and among those that keep every edge, and
    how ``auto`` compares with both; a faster policy more than 1 point better
    than exact is named apart."""
    hand = [x for x in lines if x["policy"] != "auto"]
    eligible = [x for x in hand if abs(x["delta"]) <= 0.01]
    best = min(eligible, key=lambda x: x["epoch_s"])
    keeping = min((x for x in eligible if x["policy"] not in EDGE_DROPPING),
                  key=lambda x: x["epoch_s"])
    out = (f"fastest within 1 point of exact: {best['policy']} ({best['ratio']:.2f}x of exact); "
           f"keeping every edge: {keeping['policy']} ({keeping['ratio']:.2f}x)")
    better = [x for x in hand if x["delta"] > 0.01 and x["epoch_s"] < best["epoch_s"]]
    if better:
        out += "; faster and over 1 point better: " + ", ".join(
            f"{x['policy']} ({x['ratio']:.2f}x, {100 * x['delta']:+.2f})" for x in better)
    auto = next((x for x in lines if x["policy"] == "auto"), None)
    if auto is not None:
        for name, other in (("best", best), ("best keeping every edge", keeping)):
            out += (f"; auto vs {name}: {auto['epoch_s'] / other['epoch_s']:.2f}x time, "
                    f"{_bytes_ratio(auto, other)} bytes")
        out += f" (auto Δ acc {100 * auto['delta']:+.2f})"
    return out


def _bytes_ratio(line, other):
    """``line``'s training bytes over ``other``'s (``=`` when both send none)."""
    if other["train_mb"] <= 0:
        return "=" if line["train_mb"] <= 0 else f"+{line['train_mb']:.3f} MB"
    return f"{line['train_mb'] / other['train_mb']:.2f}x"


def _choice(choices):
    layers = {k: v for k, v in choices.items() if k != "epoch"}
    return "; ".join(f"{k}: {v['choice']}" for k, v in layers.items())


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _load():
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["cora", "community"])
    parser.add_argument("--hosts", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--links", nargs="+", default=["1gbit", "10gbit", "loopback"])
    parser.add_argument("--regime", nargs="+", default=None, metavar="REGIME",
                        help="instead of --links: gpu-10gbe, gpu-100gbit (see regime.py)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--seeds-other-links", type=int, default=None,
                        help="seeds for links other than the first (default: --seeds)")
    parser.add_argument("--cora-root", default=str(CORA_ROOT))
    parser.add_argument("--community-nodes", type=int, default=200_000)
    parser.add_argument("--epochs-cora", type=int, default=200)
    parser.add_argument("--epochs-community", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--policies", nargs="+", default=[p[0] for p in POLICIES])
    parser.add_argument("--cut", choices=["metis", "random"], default="metis",
                        help="how the graph is cut into the hosts' parts (default metis)")
    parser.add_argument("--input-dropout", type=float, default=None, metavar="P",
                        help="the GCN's dropout of its input features (default: its dropout)")
    parser.add_argument("--grids", nargs="+", default=None, metavar="XxYxZ",
                        help="the 3D grids of grid-3d's rows (default: every grid of the hosts)")
    parser.add_argument("--json", default=None, help="write the table rows here")
    # on the ranks
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--calibrate", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--parts-dir", help=argparse.SUPPRESS)
    parser.add_argument("--clusters-dir", help=argparse.SUPPRESS)
    parser.add_argument("--floor-dir", help=argparse.SUPPRESS)
    parser.add_argument("--whole-dir", help=argparse.SUPPRESS)
    parser.add_argument("--epochs", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--hidden", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--layers", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    signal.signal(signal.SIGTERM, _interrupt)  # tear the testbed down on kill, as on Ctrl-C
    unknown = sorted(set(args.policies) - {p[0] for p in POLICIES})
    if unknown:
        raise SystemExit(f"unknown --policies {unknown}; use labels of {[p[0] for p in POLICIES]}")
    if EXACT not in args.policies:
        args.policies.append(EXACT)
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # regime.py
    import pyg_dist
    from pyg_dist.datasets import community_graph, preset

    lines = []
    print(f"start: load {_load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="pyg_dist-bench-") as tmp:
        for dataset in args.datasets:
            data, epochs = load_graph(dataset, args, tmp)
            classes = int(data.y.max()) + 1
            for hosts in args.hosts:
                folders = {"parts": Path(tmp) / f"{dataset}-{hosts}",
                           "clusters": Path(tmp) / f"{dataset}-{hosts}-clusters",
                           "floor": Path(tmp) / f"{dataset}-{hosts}-floor",
                           "features": data.num_features, "classes": classes}
                meta = pyg_dist.partition(data, hosts, folders["parts"], method=args.cut)
                pyg_dist.partition(data, hosts, folders["clusters"], method="metis",
                                   clusters_per_part=CLUSTERS)
                tiny = community_graph(preset("synthetic-arxiv", num_nodes=FLOOR_NODES * hosts,
                                              num_features=data.num_features,
                                              num_classes=classes), seed=0)
                pyg_dist.partition(tiny, hosts, folders["floor"], method="metis")
                print(f"\n{dataset}: {data.num_nodes} nodes, {data.num_edges} edges, "
                      f"{epochs} epochs, model {MODELS[dataset]}"
                      + ("" if args.input_dropout is None else
                         f", input dropout {args.input_dropout:g}")
                      + f"; {hosts} parts, {args.cut} cut "
                      f"{meta.edge_cut / meta.num_edges:.1%} of edges, halo {meta.halo_sizes}",
                      flush=True)
                if args.regime:
                    rates, extra = regime_rates(dataset, hosts, folders, epochs, args)
                    runs = [(f"{name} ({rate})", rate, dict(extra, regime=name, cut=args.cut))
                            for name, rate in rates.items()]
                else:
                    runs = [(link, link, {"cut": args.cut}) for link in args.links]
                if args.input_dropout is not None:
                    runs = [(label, link, dict(extra, input_dropout=args.input_dropout))
                            for label, link, extra in runs]
                for i, (label, link, extra) in enumerate(runs):
                    seeds = args.seeds if i == 0 else (args.seeds_other_links or args.seeds)
                    start = time.time()
                    rows, plan = run_job(dataset, hosts, link, folders, epochs, seeds, args)
                    lines += table(dataset, hosts, label, rows, extra, plan)
                    print(f"({time.time() - start:.0f} s)", flush=True)
                    if args.json:
                        Path(args.json).write_text(json.dumps(lines, indent=1))
    print(f"end: load {_load()}")


if __name__ == "__main__":
    sys.exit(main())
