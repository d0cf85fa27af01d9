"""``pyg-dist``: partition a graph, or train on it across local ranks.

::

    pyg-dist partition --dataset cora --root tests/data --parts 4 --out parts/
    pyg-dist partition --distributed --input graph/ --parts 4 --out parts/
    pyg-dist convert --dataset ogbn-products --root ogb --out products/
    pyg-dist train --dataset cora --root tests/data --parts 4 --model gcn
    pyg-dist train --dataset synthetic-mag --num-nodes 20000 --parts 4 --model rgcn
    pyg-dist train --dataset cora --root tests/data --halo stale:4,compress=int8
    pyg-dist train --dataset cora --root tests/data --model sage --norm batch --labels-as-input \\
        --post cs
    pyg-dist train --model gcn2 --layers 16 --strategy layer-pipeline --stages 2 --chunks 4
    pyg-dist train --task link --dataset cora --root tests/data --decoder mlp
    pyg-dist train --task recommend --parts 2       # LightGCN on synthetic-rec, recall@20
    pyg-dist train --dataset ogbl-collab --root ogb --recipe ogbl   # OGB's split, Hits@50
    pyg-dist train --config run.json          # a run's JSON line (or its "config") again
    torchrun --nproc-per-node 4 -m pyg_dist.cli train --dataset synthetic --parts 4
    pyg-dist train --dataset cora --root tests/data --strategy auto --accept stale
    pyg-dist plan --dataset synthetic --parts 4 --accept approximate
    pyg-dist layouts --dataset cora --root tests/data --parts 4 --model gcn2 --layers 32
    pyg-dist check --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr 10.0.0.1 \\
        --parts-dir parts

``train`` spawns its ranks itself (or joins the group when started under
torchrun) and ends its output with one JSON line of results, whose ``config``
is the resolved job. ``plan`` takes ``train``'s options, runs the probe of
``--strategy auto`` on the ranks and prints a table of the strategies'
predicted epoch time and bytes against exact, the best few of each risk, the
choice marked (``--json``: one JSON line per strategy, then the choice).
``check`` tests one machine of a multi-host job before its torchrun starts.
The options of ``train`` are the fields of :mod:`pyg_dist.config`'s option
objects and of :mod:`pyg_dist.cli.job`.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import re
import sys
from typing import Any

from pyg_dist.cli.args import Parser, add_fields, given
from pyg_dist.cli.commands import (
    check_command,
    convert_command,
    layouts_command,
    partition_command,
)
from pyg_dist.cli.errors import (
    check_checkpoint_dir,
    check_dataset,
    check_out,
    check_parts_dir,
    check_world,
    reporting,
)
from pyg_dist.cli.help import (
    DESCRIPTION,
    EPILOG,
    Formatter,
    TopFormatter,
    asked_strategy,
    recipe_default,
)
from pyg_dist.cli.job import RECIPES, Graph, Job, Model, Run, resolve
from pyg_dist.cli.run import embed_rank, plan_rank, report_plan, train_command
from pyg_dist.config import STRATEGIES, Adam, Checkpoint, Evaluation, GradSync, Planned
from pyg_dist.datasets.load import HETERO_DATASETS
from pyg_dist.models.gnn import DEEP_MODELS
from pyg_dist.models.hetero import HETERO_MODELS
from pyg_dist.runtime import env
from pyg_dist.strategies.layer_pipeline.pipeline import INITIAL_ROWS
from pyg_dist.train.post import POSTS

__all__ = ["main", "build_parser", "parse_job", "read_config", "RECIPES"]

def build_parser(strategy: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``pyg-dist``; ``train --help`` (and ``plan --help``)
    shows the options of the default strategy, or of ``strategy``."""
    parser = Parser(prog="pyg-dist", description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=TopFormatter)
    _add_debug(parser)
    sub = parser.add_subparsers(dest="command", required=True, title="commands",
                                metavar="COMMAND")

    part = sub.add_parser("partition", help="cut a graph into a partition folder")
    add_fields(part, Graph, "graph", skip={"parts_dir"})
    part.add_argument("--clusters-per-part", "--clusters-per-rank", dest="clusters",
                      type=int, default=1, metavar="M",
                      help="also cut M clusters per part, for gradient-only training")
    part.add_argument("--out", "--out-dir", dest="out", required=True, help="folder to write")
    part.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    part.add_argument("--distributed", action="store_true",
                      help="cut --input on --parts ranks (spawned, or torchrun's), none of "
                           "which holds the whole graph (default method: metis-coarse)")
    part.add_argument("--input", metavar="DIR", help="graph folder read by --distributed")
    part.add_argument("--grid", metavar="XxYxZ", default=None,
                      help="with --distributed: write each rank's blocks of this 3D grid "
                           "(--strategy grid-3d) instead of parts")
    _add_debug(part)

    convert = sub.add_parser("convert", help="write a dataset as a graph folder: .npy files "
                                             "every rank memory-maps a slice of")
    add_fields(convert, Graph, "graph", skip={"parts_dir", "parts", "method"})
    convert.add_argument("--out", required=True, help="folder to write")
    convert.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    _add_debug(convert)

    _train_parser(sub, "train", "train a GNN on a partitioned graph", strategy)
    _train_parser(sub, "plan", "predict every strategy's epoch time and bytes from a short "
                               "probe on the ranks, and choose (train's options)", strategy)
    _train_parser(sub, "embed", "write every node's embedding from a run's --checkpoint to "
                                "--out (train's options)", strategy)

    layouts = sub.add_parser("layouts", help="bytes per epoch of every grid of graph parts x "
                                             "layer stages for a deep model, and the best")
    add_fields(layouts, Graph, "graph", skip={"parts_dir"})
    layouts.add_argument("--model", default=DEEP_MODELS[0], choices=DEEP_MODELS)
    layouts.add_argument("--layers", type=int, default=32)
    layouts.add_argument("--hidden", type=int, default=64)
    layouts.add_argument("--initial-rows", default=INITIAL_ROWS[0], choices=INITIAL_ROWS)
    _add_debug(layouts)

    check = sub.add_parser("check", help="check this machine before torchrun starts a "
                                         "multi-host job (same flags as its torchrun)")
    check.add_argument("--nnodes", type=int, required=True)
    check.add_argument("--node-rank", type=int, required=True)
    check.add_argument("--nproc-per-node", type=int, default=1)
    check.add_argument("--master-addr", required=True)
    check.add_argument("--master-port", type=int, default=29500)
    check.add_argument("--parts-dir", default=None, help="this machine's partition folder")
    _add_debug(check)
    return parser


def _add_debug(parser: Any, shown: bool = True) -> None:
    """``--debug``, before or after the command's name (in the help where ``shown``)."""
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help=f"show the traceback of an error (or {env.DEBUG}=1)" if shown
                        else argparse.SUPPRESS)


#: The options whose default is the model's recipe, by ``dest``.
_RECIPE_OPTIONS = {"model.layers": "layers", "model.hidden": "hidden", "model.heads": "heads",
                   "model.dropout": "dropout", "optimizer.lr": "lr",
                   "optimizer.weight_decay": "weight_decay"}


def _train_parser(sub: Any, name: str, help: str, shown: str | None = None) -> None:
    """``train``'s options (and ``plan``'s), one argument group per part of the
    job; of the strategies' own groups, the help shows the default one's and
    ``shown``'s (``--strategy NAME --help``)."""
    train = sub.add_parser(
        name, help=help, usage=f"pyg-dist {name} [-h] [--config FILE] [options]",
        formatter_class=Formatter, add_help=False)
    graph = train.add_argument_group("graph and model")
    first = ("dataset", "root", "parts", "parts_dir")
    rest = {f.name for f in dataclasses.fields(Graph)} - set(first)
    add_fields(graph, Graph, "graph", order=first, skip=rest)
    add_fields(graph, Model, "model", flags={"name": "--model"})
    add_fields(graph, Graph, "graph", skip=set(first))
    top = train.add_argument_group("job (on local ranks or torchrun's; the last line of "
                                   "stdout is JSON)")
    top.add_argument("-h", "--help", action="help", help=argparse.SUPPRESS)
    top.add_argument("--config", metavar="FILE", help="a job's JSON (a run's last line)")
    top.add_argument("--epochs", dest="top.epochs", type=int, default=argparse.SUPPRESS,
                     metavar="N",
                     help="optimisation steps (default: 200)")
    add_fields(top, Run, "run")
    if name == "plan":
        top.add_argument("--json", action="store_true",
                         help="print every prediction as a JSON line, then the choice")
    if name == "embed":
        top.add_argument("--out", required=True, metavar="DIR",
                         help="folder to write the embeddings to")
        top.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    _add_debug(top, shown=False)  # pyg-dist --help shows it, and every error names it
    steps = train.add_argument_group("optimisation and evaluation")
    add_fields(steps, Adam, "optimizer", flags={"schedule": "--lr-schedule"})
    add_fields(steps, GradSync, "grad_sync", prefix="grad-")
    add_fields(steps, Evaluation, "evaluation", prefix="eval-",
               flags={name: "--" + name.replace("_", "-")
                      for name in ("target_acc", "patience", "time_budget")})
    add_fields(steps, Checkpoint, "checkpoint", prefix="checkpoint-",
               flags={"dir": "--checkpoint", "resume": "--resume",
                      "switch": "--switch-strategy"})
    steps.add_argument("--post", dest="post.spec", default=argparse.SUPPRESS, metavar="SPEC",
                       help=f"{'|'.join(POSTS)}[,KEY=VALUE...] after training (Correct & "
                            f"Smooth)")
    seen: set[str] = set()
    default, *others = STRATEGIES.values()
    strategy = train.add_argument_group(
        f"strategy (default: the one whose options are given, else {default.name})")
    strategy.add_argument("--strategy", dest="strategy.name", choices=list(STRATEGIES),
                          default=argparse.SUPPRESS, metavar="NAME",
                          help=f"{'|'.join(STRATEGIES)} (NAME --help: its options)")
    add_fields(strategy, default, "strategy", seen=seen)
    for cls in others:
        title = f"strategy: {cls.name}" + (f" ({cls.summary})" if cls.summary else "")
        group = train.add_argument_group(title)
        add_fields(group, cls, "strategy", seen=seen)
        if cls.name != shown:
            for action in group._group_actions:
                action.help = argparse.SUPPRESS
    for action in train._actions:
        if action.dest in _RECIPE_OPTIONS and action.help is not argparse.SUPPRESS:
            text = re.sub(r" \(default:[^)]*\)$", "", action.help or "")
            action.help = f"{text} ({recipe_default(_RECIPE_OPTIONS[action.dest])})"


def parse_job(args: argparse.Namespace) -> Job:
    """The resolved job of ``pyg-dist train``'s parsed ``args``: the config
    file, then the options given, then the model's recipe. Raises
    :class:`ValueError` naming the fix on a bad option."""
    options = given(args)
    if args.command == "plan":
        _planned(options)
    base: dict[str, Any] = {}
    if args.config:
        base = read_config(args.config)
    return resolve(base, options)


def _planned(options: dict[str, dict[str, Any]]) -> None:
    """``pyg-dist plan`` ranks every strategy itself: its strategy is the
    planner's, with the probe's options given."""
    strategy = options.setdefault("strategy", {})
    name = strategy.setdefault("name", Planned.name)
    if name != Planned.name:
        raise ValueError(f"'pyg-dist plan' ranks every strategy itself; drop --strategy {name} "
                         f"(for a layer pipeline's grid use 'pyg-dist layouts')")


def read_config(path: str) -> dict[str, Any]:
    """A job's dictionary from ``path``: a JSON job, or a run's output whose
    last line is the JSON result carrying ``config``."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError as exc:
        raise ValueError(f"--config {path}: {exc.strerror}; give a JSON file") from None
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as whole:
        lines = text.splitlines()
        try:
            loaded = json.loads(lines[-1] if lines else "")
        except json.JSONDecodeError as last:
            raise ValueError(_broken_json(path, text, whole, last)) from None
    if not isinstance(loaded, dict):
        raise ValueError(f"--config {path} holds no JSON object")
    if "config" not in loaded and {"choice", "train"} <= loaded.keys():
        raise ValueError(f"--config {path} holds the output of 'pyg-dist plan', which names "
                         f"no graph; train with the options given to 'pyg-dist plan' and "
                         f"--strategy auto, or with the strategy its 'train' key holds")
    config = loaded.get("config", loaded)
    if not isinstance(config, dict):
        raise ValueError(f"--config {path}: 'config' holds {config!r}, not a job's JSON "
                         f"object (a run's JSON line carries Job.to_dict() there)")
    return dict(config)


def _broken_json(path: str, text: str, whole: json.JSONDecodeError,
                 last: json.JSONDecodeError) -> str:
    """Why ``--config path`` holds no job: where its JSON breaks (the whole
    file's, or the last line's where that starts like a run's JSON line)."""
    if not text:
        return f"--config {path} is empty; give a job's JSON (a run's last line)"
    lines = text.splitlines()
    if len(lines) > 1 and lines[-1].lstrip().startswith("{"):  # a run's output, its line broken
        error, line, rest = last, len(lines), lines[-1]
    else:
        error, line, rest = whole, whole.lineno, text
    why = error.msg[:-3] + " there" if error.msg.endswith(" at") else error.msg
    cut = ("; the file ends inside it: it looks cut off"
           if error.pos >= len(rest) or error.msg.startswith("Unterminated string") else "")
    return (f"--config {path}: the JSON breaks at line {line}, column {error.colno} "
            f"({why}{cut}); "
            f"give a job's JSON, or a run's output whose last line is its whole JSON line")


def _refuse_hetero(args: argparse.Namespace) -> None:
    """``plan`` and ``layouts`` take homogeneous datasets only."""
    dataset = given(args).get("graph", {}).get("dataset")
    if dataset in HETERO_DATASETS:
        raise SystemExit(
            f"pyg-dist {args.command}: '{dataset}' is a heterogeneous graph, which this command "
            f"does not take; cut it with 'pyg-dist partition --dataset {dataset} --out DIR', "
            f"train it with 'pyg-dist train --dataset {dataset} --model "
            f"{'|'.join(HETERO_MODELS)}' or from Python with pyg_dist.DistHeteroData "
            f"(docs/hetero.md)")


def main(argv: list[str] | None = None) -> int:
    """``pyg-dist``: parses ``argv`` and runs the command; errors end as
    :func:`pyg_dist.cli.errors.reporting` says (exit status 2 and one or two
    lines naming the flag for the user's own, no traceback without
    ``--debug``)."""
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(asked_strategy(argv, list(STRATEGIES))).parse_args(argv)
    return reporting(args.command, lambda: _run(args), getattr(args, "debug", False),
                     bar=args.command == "train" and sys.stderr.isatty())


def _run(args: argparse.Namespace) -> int:
    if args.command == "partition":
        return partition_command(args)
    if args.command in ("plan", "layouts"):
        _refuse_hetero(args)
    if args.command == "convert":
        return convert_command(args)
    if args.command == "check":
        return check_command(args)
    if args.command == "layouts":
        return layouts_command(args)
    try:
        job = parse_job(args)
    except ValueError as exc:  # before any rank starts
        raise SystemExit(f"pyg-dist {args.command}: {exc}") from None
    if job.graph.parts_dir is not None:
        check_parts_dir(args.command, job.graph.parts_dir, job.graph.parts,
                        job.strategy.ranks_per_part())
    else:
        check_dataset(args.command, job.graph)
    check_checkpoint_dir(args.command, job.checkpoint.dir if job.checkpoint else None)
    if env.under_torchrun():
        check_world(args.command, env.world_size(), job.graph.parts, job.graph.parts_dir,
                    job.strategy.ranks_per_part())
    if args.command == "plan":
        return train_command(job, plan_rank, report_plan(args.json))
    if args.command == "embed":
        if job.checkpoint is None:
            raise SystemExit("pyg-dist embed: name the trained run's checkpoint folder with "
                             "--checkpoint DIR (and the graph options it trained with)")
        check_out("embed", args.out, args.overwrite)
        body = functools.partial(embed_rank, out=args.out, overwrite=args.overwrite)
        return train_command(job, body, lambda result: print(json.dumps(result), flush=True))
    return train_command(job)
