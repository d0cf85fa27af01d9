"""``pyg-dist``: partition a graph, or train on it across local ranks.

::

    pyg-dist partition --dataset cora --root data --parts 4 --out parts/
    pyg-dist partition --dataset synthetic-products --parts 4 --method metis-coarse --out parts/
    pyg-dist train --dataset cora --root data --parts 4 --model gcn
    pyg-dist train --dataset cora --root data --parts 4 --model gat
    pyg-dist train --dataset cora --root data --parts 4 --model gcn2 --layers 16 \
        --stages 2 --chunks 4
    torchrun --nproc-per-node 4 -m pyg_dist.cli train --dataset synthetic --parts 4
    pyg-dist layouts --dataset cora --root data --parts 4 --model gcn2 --layers 32
    pyg-dist check --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr 10.0.0.1 \
        --parts-dir parts

``train`` spawns its ranks itself (or joins the group when started under
torchrun) and ends its output with one JSON line of results. ``check`` tests
one machine of a multi-host job before its torchrun starts.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyg_dist.datasets.load import DATASETS
from pyg_dist.partitioning.cut import METHODS

__all__ = ["main", "build_parser", "RECIPES"]

#: Defaults of ``train`` per model: the published recipes (GCN: Kipf & Welling;
#: GAT: Velickovic et al.; GCNII: Chen et al., Cora), which SAGE and GIN share
#: with GCN and the residual GCN / SAGE with GCNII here.
_GCN_RECIPE = {"hidden": 16, "heads": 1, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4,
               "layers": 2}
_DEEP_RECIPE = {"hidden": 64, "heads": 1, "dropout": 0.6, "lr": 0.01, "weight_decay": 5e-4,
                "layers": 16}
RECIPES: dict[str, dict[str, Any]] = {
    "gcn": _GCN_RECIPE,
    "sage": _GCN_RECIPE,
    "gat": {**_GCN_RECIPE, "hidden": 8, "heads": 8, "dropout": 0.6, "lr": 0.005},
    "gin": _GCN_RECIPE,
    "gcn2": _DEEP_RECIPE,
    "resgcn": _DEEP_RECIPE,
    "ressage": _DEEP_RECIPE,
}

DEFAULT_PARTS = 4


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyg-dist", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def graph_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--dataset", default=None, choices=list(DATASETS),
                       help="graph to use (default: the embedded seeded synthetic graph); "
                            "synthetic-arxiv and synthetic-products are seeded graphs shaped "
                            "like ogbn-arxiv and ogbn-products")
        p.add_argument("--root", default=None,
                       help="folder holding Planetoid data as <root>/Cora/raw/...")
        p.add_argument("--parts", type=int, default=None,
                       help="number of parts = ranks (default: 4, or torchrun's world size)")
        p.add_argument("--method", default="metis", choices=list(METHODS),
                       help="how to cut: metis, random, or metis-coarse (METIS on a graph "
                            "contracted by label propagation: far less memory on large graphs)")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--num-nodes", type=int, default=None,
                       help="nodes of a synthetic graph (default: 10,000 for synthetic, the "
                            "preset's for synthetic-arxiv / synthetic-products)")
        p.add_argument("--avg-degree", type=float, default=None,
                       help="directed edges per node of a synthetic graph (default: its own)")
        p.add_argument("--clusters-per-part", "--clusters-per-rank", type=int, default=None,
                       metavar="M",
                       help="also cut M clusters per part, for gradient-only training "
                            "(default: 1; 4 with train --mode gradient-only; with "
                            "--parts-dir, checked against the folder's)")

    part = sub.add_parser("partition", help="cut a graph into a partition folder")
    graph_args(part)
    part.add_argument("--out", required=True, help="folder to write")
    part.add_argument("--overwrite", action="store_true")

    train = sub.add_parser("train", help="train a GNN on a partitioned graph")
    graph_args(train)
    train.add_argument("--parts-dir", default=None,
                       help="existing partition folder to use (default: partition first)")
    train.add_argument("--model", default="gcn", choices=list(RECIPES),
                       help="gcn | sage | gat | gin | gcn2 | resgcn | ressage; the defaults "
                            "of --layers, --hidden, --heads, --dropout, --lr and "
                            "--weight-decay are the model's published recipe (GCN: 2, 16, -, "
                            "0.5, 0.01, 5e-4; GAT: 2, 8, 8, 0.6, 0.005, 5e-4; GCNII and the "
                            "residual models: 16, 64, -, 0.6, 0.01, 5e-4)")
    train.add_argument("--layers", type=int, default=None)
    train.add_argument("--stages", type=int, default=1, metavar="S",
                       help="layer stages of a layer pipeline (deep models): the --parts "
                            "ranks form a grid of parts/S graph parts x S stages")
    train.add_argument("--chunks", type=int, default=1, metavar="K",
                       help="chunks per graph part flowing through the layer pipeline; "
                            "above 1, rows of other chunks come from history tables "
                            "(at most one epoch old)")
    train.add_argument("--initial-rows", default="send", choices=["send", "recompute"],
                       help="gcn2 in a layer pipeline: send the initial rows along the "
                            "stages, or recompute them on every stage (half the bytes)")
    train.add_argument("--hidden", type=int, default=None,
                       help="hidden features (per head for gat)")
    train.add_argument("--heads", type=int, default=None, help="attention heads of gat")
    train.add_argument("--dropout", type=float, default=None)
    train.add_argument("--epochs", type=int, default=200)
    train.add_argument("--lr", type=float, default=None)
    train.add_argument("--weight-decay", type=float, default=None)
    train.add_argument("--halo", default="exact", metavar="POLICY",
                       help="halo policy: exact | cached | stale:K | pipelined[:SMOOTHING] | "
                            "adaptive:TOL | sampled:P | isolated | auto (default: exact)")
    train.add_argument("--eval-halo", default="exact", metavar="POLICY",
                       help="halo policy of evaluation, spelled like --halo (default: exact)")
    train.add_argument("--compress", default=None, choices=["fp16", "bf16", "int8"],
                       help="compress halo messages")
    train.add_argument("--grad-compress", default="none", metavar="SPEC",
                       help="gradient all-reduce: none | fp16 | powersgd:R | covap:K | "
                            "covap:auto (default: none, an exact sum)")
    train.add_argument("--mode", default="exact", choices=["exact", "gradient-only"],
                       help="exact: halo exchange under --halo (default); gradient-only: "
                            "clusters regrouped over the ranks, no halo, only gradients cross")
    train.add_argument("--regroup-every", type=int, default=50, metavar="R",
                       help="gradient-only: epochs between regroupings (default: 50)")
    train.add_argument("--regroup", default="sweep", choices=["sweep", "random", "home"],
                       help="gradient-only: how clusters move between ranks (default: sweep)")
    train.add_argument("--regroup-from", default="folder", choices=["folder", "peers"],
                       help="gradient-only: read a new group of clusters from the folder, "
                            "or receive it from the ranks that held its clusters")
    train.add_argument("--correction", default="node", choices=["node", "batch", "none"],
                       help="gradient-only: coverage correction (default: node)")
    train.add_argument("--shrinkage", type=float, default=0.0,
                       help="gradient-only: pull the correction's weights toward their mean, "
                            "0..1 (default: 0)")
    train.add_argument("--no-input-cache", action="store_true",
                       help="exchange static inputs (layer 0's features) every step too")
    train.add_argument("--checkpoint", default=None, metavar="DIR",
                       help="folder for checkpoints")
    train.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                       help="write a checkpoint every N epochs")
    train.add_argument("--resume", action="store_true",
                       help="continue from the last checkpoint in --checkpoint if there is one "
                            "(the same command serves the first start and every restart)")
    train.add_argument("--eval-every", type=int, default=1, metavar="N",
                       help="evaluate every N epochs (evaluation costs traffic too)")
    train.add_argument("--log-every", type=int, default=0,
                       help="print the epoch's ledger totals every N epochs (0: never)")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument("--timeout", type=float, default=None,
                       help="seconds after which the spawned ranks are stopped")

    layouts = sub.add_parser("layouts", help="bytes per epoch of every grid of graph parts x "
                                             "layer stages for a deep model, and the best")
    graph_args(layouts)
    layouts.add_argument("--model", default="gcn2", choices=["gcn2", "resgcn", "ressage"])
    layouts.add_argument("--layers", type=int, default=32)
    layouts.add_argument("--hidden", type=int, default=64)
    layouts.add_argument("--initial-rows", default="send", choices=["send", "recompute"])

    check = sub.add_parser("check", help="check this machine before torchrun starts a "
                                         "multi-host job (same flags as its torchrun)")
    check.add_argument("--nnodes", type=int, required=True)
    check.add_argument("--node-rank", type=int, required=True)
    check.add_argument("--nproc-per-node", type=int, default=1)
    check.add_argument("--master-addr", required=True)
    check.add_argument("--master-port", type=int, default=29500)
    check.add_argument("--parts-dir", default=None, help="this machine's partition folder")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "partition":
        meta = _partition(args, Path(args.out), overwrite=args.overwrite)
        print(json.dumps(_meta_summary(meta)))
        return 0
    if args.command == "check":
        return _check_command(args)
    if args.command == "layouts":
        return _layouts_command(args)
    return _train_command(args)


def _layouts_command(args: argparse.Namespace) -> int:
    """Cuts the graph into every part count dividing --parts (in a temporary
    folder) and prints each layout's predicted bytes per epoch, then the best."""
    import pyg_dist
    from pyg_dist.pipeline import best_layout, halo_rows, layout_costs

    ranks = args.parts or DEFAULT_PARTS
    data = _load_graph(args)
    halo = {}
    with tempfile.TemporaryDirectory(prefix="pyg_dist-layouts-") as tmp:
        for parts in [d for d in range(2, ranks + 1) if ranks % d == 0]:
            folder = Path(tmp) / str(parts)
            pyg_dist.partition(data, parts, folder, method=args.method, seed=args.seed)
            halo[parts] = halo_rows(folder)
    state = 2 * args.hidden if args.model == "gcn2" and args.initial_rows == "send" else None
    costs = layout_costs(ranks, data.num_nodes, halo, args.layers, args.hidden, state)
    for cost in costs:
        print(json.dumps({"layout": cost.name, "parts": cost.parts, "stages": cost.stages,
                          "halo_bytes": cost.halo_bytes, "stage_bytes": cost.stage_bytes,
                          "bytes": cost.total}))
    best = best_layout(costs)
    print(json.dumps({"best": best.name, "parts": best.parts, "stages": best.stages,
                      "command": f"pyg-dist train --parts {ranks} --model {args.model} "
                                 f"--layers {args.layers} --stages {best.stages}"
                                 + (" --initial-rows recompute" if state is None
                                    and args.model == "gcn2" and best.stages > 1 else "")}))
    return 0


def _check_command(args: argparse.Namespace) -> int:
    from pyg_dist.preflight import check_host

    checks = check_host(args.nnodes, args.node_rank, args.nproc_per_node, args.master_addr,
                        args.master_port, args.parts_dir)
    for check in checks:
        print(check)
    return 0 if all(c.ok for c in checks) else 1


def _load_graph(args: argparse.Namespace) -> Any:
    from pyg_dist.datasets import load_dataset

    dataset = args.dataset or "synthetic"
    if dataset.startswith("synthetic"):
        return load_dataset(dataset, seed=args.seed, num_nodes=args.num_nodes,
                            avg_degree=args.avg_degree)
    return load_dataset(args.dataset, args.root)


def _partition(args: argparse.Namespace, out: Path, overwrite: bool = False) -> Any:
    import pyg_dist

    data = _load_graph(args)
    clusters = args.clusters_per_part
    if clusters is None:
        clusters = 4 if getattr(args, "mode", "exact") == "gradient-only" else 1
    parts = (args.parts or DEFAULT_PARTS) // getattr(args, "stages", 1)
    return pyg_dist.partition(data, parts, out, method=args.method,
                              seed=args.seed, overwrite=overwrite, clusters_per_part=clusters)


def _meta_summary(meta: Any) -> dict[str, Any]:
    return {
        "num_parts": meta.num_parts,
        "num_nodes": meta.num_nodes,
        "num_edges": meta.num_edges,
        "edge_cut": meta.edge_cut,
        "part_sizes": meta.part_sizes,
        "halo_sizes": meta.halo_sizes,
        "method": meta.method,
        "seed": meta.seed,
        "clusters_per_part": meta.clusters_per_part,
    }


def _train_command(args: argparse.Namespace) -> int:
    import pyg_dist
    from pyg_dist import env
    from pyg_dist.grads import parse_grad_compress
    from pyg_dist.halo import parse_policy

    for key, value in RECIPES[args.model].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    parse_policy(args.halo, args.compress)  # a bad spec fails here, before any rank starts
    parse_policy(args.eval_halo)
    parse_grad_compress(args.grad_compress)
    if (args.resume or args.checkpoint_every) and not args.checkpoint:
        raise SystemExit("--resume and --checkpoint-every need --checkpoint DIR")
    _check_pipeline(args)
    start = time.perf_counter()
    under_torchrun = env.under_torchrun()
    config = vars(args).copy()
    if args.dataset is None and args.parts_dir is None:
        config["dataset"] = "synthetic"  # what is partitioned; unknown for a given folder
    if under_torchrun:
        from torch.distributed.elastic.multiprocessing.errors import record

        # record: torchrun's summary of a failed job shows this rank's error.
        result = record(_run_joined)(config)
    else:
        if args.parts is None:
            args.parts = (_folder_parts(args.parts_dir) * args.stages if args.parts_dir
                          else DEFAULT_PARTS)
        _check_pipeline(args)
        config["parts"] = args.parts
        with tempfile.TemporaryDirectory(prefix="pyg_dist-parts-") as tmp:
            parts_dir = args.parts_dir or str(Path(tmp) / "parts")
            if args.parts_dir is None:
                meta = _partition(args, Path(parts_dir))
                print(f"partitioned {config['dataset']}: {_meta_summary(meta)}",
                      file=sys.stderr)
            config["parts_dir"] = parts_dir
            result = pyg_dist.launch(_train_rank, args.parts, args=(config,),
                                     timeout=args.timeout)[0]
    if result is not None:
        result["seconds"] = round(time.perf_counter() - start, 3)
        print(json.dumps(result), flush=True)
    return 0


def _check_pipeline(args: argparse.Namespace) -> None:
    """Fails early, naming the fix, on a layer pipeline the options cannot make."""
    from pyg_dist.models import DEEP_MODELS

    if args.stages < 1 or args.chunks < 1:
        raise SystemExit(f"--stages and --chunks must be at least 1 (got {args.stages}, "
                         f"{args.chunks})")
    if args.stages == 1 and args.chunks == 1:
        return
    if args.model not in DEEP_MODELS:
        raise SystemExit(f"--stages/--chunks split a deep model into a layer pipeline; use "
                         f"--model {' | '.join(DEEP_MODELS)} (got --model {args.model})")
    if args.parts is not None and args.parts % args.stages:
        raise SystemExit(f"--stages {args.stages} does not divide --parts {args.parts} (the "
                         f"ranks); the graph is cut into parts / stages parts")
    if args.layers < args.stages:
        raise SystemExit(f"--layers {args.layers} cannot fill --stages {args.stages}; use at "
                         f"least as many layers as stages")


def _folder_parts(parts_dir: str) -> int:
    from pyg_dist.partitioning.io import read_meta

    return read_meta(parts_dir).num_parts


def _run_joined(config: dict[str, Any]) -> dict[str, Any] | None:
    import pyg_dist
    from pyg_dist import distributed
    from pyg_dist.peers import PeerLost

    pyg_dist.init()
    try:
        result = _train_joined(config)
        # No rank closes its connections while a peer may still be reading.
        distributed.barrier()
        return result
    except PeerLost as exc:
        _exit_now(exc)
    finally:
        pyg_dist.shutdown()  # a group left for interpreter exit can abort the process
    return None


def _exit_now(exc: BaseException) -> None:
    """Reports ``exc`` (here and to torchrun) and exits at once: tearing down
    connections to unreachable peers can hold a process for seconds."""
    import traceback

    from torch.distributed.elastic.multiprocessing.errors import get_error_handler

    import pyg_dist

    traceback.print_exc()
    get_error_handler().record_exception(exc)
    pyg_dist.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def _train_joined(config: dict[str, Any]) -> dict[str, Any] | None:
    """Under torchrun: rank 0 partitions (unless a folder is given), all train."""
    from pyg_dist import distributed

    world = distributed.world_size()
    if config["parts"] is not None and config["parts"] != world:
        raise ValueError(
            f"'pyg-dist train' got --parts {config['parts']} but torchrun started {world} ranks "
            f"(--nnodes times --nproc-per-node); pass --parts {world} (or leave it out), or "
            f"start {config['parts']} ranks"
        )
    config["parts"] = world
    if config["parts_dir"] is None:
        # One machine: ranks share torchrun's agent as parent, hence one folder.
        # Across machines, partition once on shared storage and pass --parts-dir.
        parts_dir = Path(tempfile.gettempdir()) / f"pyg_dist-parts-{os.getppid()}"
        config["parts_dir"] = str(parts_dir)
        if distributed.rank() == 0:
            _partition(argparse.Namespace(**config), parts_dir, overwrite=True)
        distributed.barrier()
    return _train_rank(config)


def _train_rank(config: dict[str, Any]) -> dict[str, Any] | None:
    """What each rank runs: load its part, build the model, train. Rank 0
    returns the results (identical on every rank)."""
    import torch

    import pyg_dist
    from pyg_dist import distributed, pipeline
    from pyg_dist.halo import parse_policy
    from pyg_dist.models import DEEP_MODELS, GNN, DeepGNN
    from pyg_dist.train import train

    policy = parse_policy(config["halo"], config["compress"], not config["no_input_cache"])
    eval_policy = parse_policy(config["eval_halo"])
    stages, chunks = config["stages"], config["chunks"]
    if stages > 1 or chunks > 1:
        data = pipeline.load(config["parts_dir"], stages, halo=policy)
    else:
        data = pyg_dist.DistData.load(config["parts_dir"], halo=policy)
    if data.meta.num_classes is None:
        raise SystemExit(f"'{config['parts_dir']}' has no class labels (integer 'y'); "
                         f"partition a graph with node labels to train on it")
    torch.manual_seed(config["seed"])
    model: Any
    if config["model"] in DEEP_MODELS:
        model = DeepGNN(config["model"], data.x.size(1), config["hidden"],
                        data.meta.num_classes, layers=config["layers"],
                        dropout=config["dropout"]).to(data.x.device)
    else:
        model = GNN(config["model"], data.x.size(1), config["hidden"], data.meta.num_classes,
                    layers=config["layers"], dropout=config["dropout"],
                    heads=config["heads"]).to(data.x.device)
    rank = distributed.rank()
    torch.manual_seed(config["seed"] * 1000 + rank)  # dropout differs per rank
    log_every = config["log_every"]

    def log(stats: Any) -> None:
        if log_every and stats.epoch % log_every == 0 and rank == 0:
            print(f"epoch {stats.epoch:4d}  loss {stats.loss:.4f}  val {stats.val_acc:.4f}  "
                  f"test {stats.test_acc:.4f}  halo fwd {stats.halo_bytes_fwd / 1e6:.3f} MB  "
                  f"bwd {stats.halo_bytes_bwd / 1e6:.3f} MB  eval "
                  f"{stats.halo_bytes_eval / 1e6:.3f} MB  comm {stats.comm_seconds:.3f} s",
                  file=sys.stderr, flush=True)

    result = train(model, data, epochs=config["epochs"], lr=config["lr"],
                   weight_decay=config["weight_decay"], progress=not config["no_progress"],
                   callback=log, checkpoint=config["checkpoint"],
                   checkpoint_every=config["checkpoint_every"], resume=_resume(config),
                   eval_every=config["eval_every"], eval_halo=eval_policy,
                   grad_compress=config["grad_compress"], mode=config["mode"],
                   regroup_every=config["regroup_every"], regroup=config["regroup"],
                   correction=config["correction"], shrinkage=config["shrinkage"],
                   regroup_from=config["regroup_from"],
                   clusters_per_rank=(config.get("clusters_per_part")
                                      if config["mode"] == "gradient-only" else None),
                   stages=stages, chunks=chunks, initial_rows=config["initial_rows"])
    if rank != 0:
        return None
    return {
        **result.summary(),
        "dataset": config["dataset"],
        "parts": distributed.world_size(),
        "method": data.meta.method,
        "model": config["model"],
        "layers": config["layers"],
        "hidden": config["hidden"],
        "stages": stages,
        "chunks": chunks,
        **({"initial_rows": config["initial_rows"]} if stages > 1 else {}),
        **({"heads": config["heads"]} if config["model"] == "gat" else {}),
        "halo": policy.spec(),
        "eval_halo": eval_policy.spec(),
        "compress": config["compress"],
        "grad_compress": config["grad_compress"],
        "mode": config["mode"],
        **({**{key: config[key] for key in ("regroup", "regroup_every", "regroup_from",
                                            "correction", "shrinkage")},
            "clusters_per_rank": data.meta.clusters_per_part}
           if config["mode"] == "gradient-only" else {}),
        "input_cache": not config["no_input_cache"],
    }


def _resume(config: dict[str, Any]) -> bool:
    """``--resume``: continue from the last checkpoint when there is one, else
    start at epoch 1 (so that torchrun's restarts and the first start share
    one command line). Collective."""
    from pyg_dist import distributed
    from pyg_dist.checkpoint import find_checkpoint

    if not config["resume"]:
        return False
    epoch = find_checkpoint(config["checkpoint"])
    if distributed.rank() == 0:
        print(f"no checkpoint in '{config['checkpoint']}' yet: starting at epoch 1"
              if epoch is None else f"resuming from the checkpoint of epoch {epoch} in "
              f"'{config['checkpoint']}'", file=sys.stderr, flush=True)
    return epoch is not None


if __name__ == "__main__":
    raise SystemExit(main())
