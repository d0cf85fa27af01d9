"""``pyg-dist train``: a resolved :class:`~pyg_dist.cli.job.Job` on spawned
local ranks, or on the ranks torchrun started."""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch
from torch.distributed.elastic.multiprocessing.errors import get_error_handler, record
from torch_geometric.nn.models import LightGCN

import pyg_dist
from pyg_dist.cli.commands import meta_summary, partition_graph
from pyg_dist.cli.job import (
    DEFAULT_PARTS,
    EMBEDDING_MODELS,
    RECALL_K,
    TASK_MODELS,
    Job,
)
from pyg_dist.cli.plan_table import plan_table
from pyg_dist.config import Planned, as_policy
from pyg_dist.halo import Exact
from pyg_dist.loop.embeddings import write_embeddings
from pyg_dist.models.gnn import DEEP_MODELS, GNN, DeepGNN
from pyg_dist.models.hetero import HETERO_MODELS, hetero_model
from pyg_dist.models.link import LinkModel, LinkPredictor
from pyg_dist.nn import to_distributed
from pyg_dist.nn.owned import own_rows
from pyg_dist.partitioning.io import read_meta
from pyg_dist.runtime import distributed, env
from pyg_dist.runtime.peers import PeerLost
from pyg_dist.strategies import planner
from pyg_dist.strategies.grid_3d.folder import grid_ranks, is_grid_folder
from pyg_dist.strategies.link_task import LinkTask, task_for
from pyg_dist.strategies.task import labelled_type
from pyg_dist.train.checkpoint import find_checkpoint, load_checkpoint
from pyg_dist.train.loop import EpochStats, train
from pyg_dist.train.optim import make_optimizer
from pyg_dist.train.post import correct_and_smooth
from pyg_dist.train.preemption import StopSignals
from pyg_dist.train.progress import destination, summary_lines, write

__all__ = ["train_command", "train_rank", "train_joined", "plan_rank", "report_plan",
           "load_part", "job_task", "link_metric", "cut_in_words"]

def train_command(job: Job, body: Callable[[Job, str], Any] | None = None,
                  report: Callable[[dict[str, Any]], None] | None = None) -> int:
    """Runs ``job`` and prints its JSON line (rank 0's) and a summary on
    stderr; ``body`` is what each rank runs (default: :func:`train_rank`),
    ``report`` what prints rank 0's result instead."""
    body = body or train_rank
    start = time.perf_counter()
    if env.under_torchrun():
        # record: torchrun's summary of a failed job shows this rank's error.
        result = record(_run_joined)(job, body)
    else:
        graph = job.graph
        parts = graph.parts or (_folder_ranks(graph.parts_dir, job.strategy.ranks_per_part())
                                if graph.parts_dir else DEFAULT_PARTS)
        job = dataclasses.replace(job, graph=dataclasses.replace(graph, parts=parts))
        _check_ranks(job)
        with tempfile.TemporaryDirectory(prefix="pyg_dist-parts-") as tmp:
            folder = graph.parts_dir or str(Path(tmp) / "parts")
            if graph.parts_dir is None:
                meta = _partition(job, Path(folder))
                print(cut_in_words(graph.dataset, meta_summary(meta)), file=sys.stderr)
            if job.run.progress:
                print(f"starting {parts} ranks on this machine (each imports torch, joins the "
                      f"process group and loads its own part)", file=sys.stderr, flush=True)
            try:
                result = pyg_dist.launch(body, parts, args=(job, folder),
                                         timeout=job.run.timeout)[0]
            except KeyboardInterrupt:
                # a new line first: the bar's line has none (a bar only on a terminal)
                bar = job.run.progress and sys.stderr.isatty()
                print(("\n" if bar else "") + interrupted_message(job),
                      file=sys.stderr, flush=True)
                raise SystemExit(INTERRUPTED) from None
    if result is not None:
        result["seconds"] = round(time.perf_counter() - start, 3)
        (report or _report_run)(result)
    return 0


def _report_run(result: dict[str, Any]) -> None:
    """A run's JSON line on stdout, then its summary in words on stderr."""
    print(json.dumps(result), flush=True)
    if "best_epoch" in result:
        for line in summary_lines(result, destination(sys.stdout)):
            print(line, file=sys.stderr)


def report_plan(as_json: bool) -> Callable[[dict[str, Any]], None]:
    """What prints ``pyg-dist plan``'s result (:func:`plan_rank`'s): with
    ``as_json`` a JSON line per prediction (fastest first) and the choice's,
    else the table of :func:`~pyg_dist.cli.plan_table.plan_table`."""
    def report(result: dict[str, Any]) -> None:
        rows = result.pop("rows")
        if as_json:
            for row in rows:
                print(json.dumps(row))
            print(json.dumps(result), flush=True)
        else:
            print("\n".join(plan_table(rows, result)), flush=True)

    return report


def _folder_ranks(folder: str, ranks_per_part: int) -> int:
    """The ranks a partition folder (``ranks_per_part`` a part) or a grid folder is for."""
    return (grid_ranks(folder) if is_grid_folder(folder)
            else read_meta(folder).num_parts * ranks_per_part)


def cut_in_words(dataset: str, meta: dict[str, Any]) -> str:
    """One line on a cut, from :func:`~pyg_dist.cli.commands.meta_summary`'s
    dictionary ``meta``."""
    edges = meta["num_edges"]
    share = f" ({100 * meta['edge_cut'] / edges:.0f}%)" if edges else ""
    return (f"cut {dataset} ({meta['num_nodes']:,} nodes, {edges:,} edges) into "
            f"{meta['num_parts']} parts with {meta['method']}: {meta['edge_cut']:,} edges "
            f"cross parts{share}; {_span(meta['part_sizes'])} nodes and "
            f"{_span(meta['halo_sizes'])} halo nodes per part")


def _span(values: list[int]) -> str:
    low, high = min(values, default=0), max(values, default=0)
    return f"{low:,}" if low == high else f"{low:,}-{high:,}"


#: The exit status of a run stopped by Ctrl-C (128 + SIGINT, as shells report it).
INTERRUPTED = 130


def interrupted_message(job: Job) -> str:
    """The line a run stopped by Ctrl-C ends with: every rank was stopped,
    and what there is to resume from."""
    ckpt = job.checkpoint
    if ckpt is None:
        return ("pyg-dist train: interrupted (Ctrl-C); every rank was stopped. No checkpoint is "
                "configured, so a rerun starts at epoch 1 (add --checkpoint DIR to resume "
                "after a stop)")
    return (f"pyg-dist train: interrupted (Ctrl-C); every rank was stopped. To continue from "
            f"the last complete checkpoint in '{ckpt.dir}' (none before the first is written), "
            f"run the same command with --resume")


def _check_ranks(job: Job) -> None:
    """Fails early, naming the fix, when the job's strategy cannot share the
    graph among its ranks."""
    assert job.graph.parts is not None, "the ranks are known by now"
    try:
        job.strategy.graph_parts(job.graph.parts)
    except ValueError as exc:
        raise SystemExit(f"pyg-dist train: {exc}") from None


def _partition(job: Job, out: Path, overwrite: bool = False) -> Any:
    strategy = job.strategy
    assert job.graph.parts is not None, "the ranks are known by now"
    return partition_graph(job.graph, out, strategy.graph_parts(job.graph.parts),
                           strategy.clusters_per_part(), overwrite=overwrite)


def _run_joined(job: Job, body: Callable[[Job, str], Any]) -> dict[str, Any] | None:
    pyg_dist.init()
    try:
        result = train_joined(job, body)
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
    traceback.print_exc()
    get_error_handler().record_exception(exc)
    pyg_dist.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def train_joined(job: Job, body: Callable[[Job, str], Any] | None = None
                 ) -> dict[str, Any] | None:
    """Under torchrun: rank 0 partitions (unless a folder is given), all
    train (or run ``body``)."""
    world = distributed.world_size()
    parts = job.graph.parts
    if parts is not None and parts != world:
        raise ValueError(
            f"'pyg-dist train' got --parts {parts} but torchrun started {world} ranks "
            f"(--nnodes times --nproc-per-node); pass --parts {world} (or leave it out), or "
            f"start {parts} ranks"
        )
    job = dataclasses.replace(job, graph=dataclasses.replace(job.graph, parts=world))
    _check_ranks(job)
    folder = job.graph.parts_dir
    if folder is None:
        # One machine: ranks share torchrun's agent as parent, hence one folder.
        # Across machines, partition once on shared storage and pass --parts-dir.
        folder = str(Path(tempfile.gettempdir()) / f"pyg_dist-parts-{os.getppid()}")
        if distributed.rank() == 0:
            _partition(job, Path(folder), overwrite=True)
        distributed.barrier()
    return (body or train_rank)(job, folder)


def load_part(job: Job, folder: str) -> tuple[Any, Any]:
    """This rank's part of ``folder`` and the job's model for it (seeded as
    the job says; dropout differs per rank)."""
    strategy, spec = job.strategy, job.model
    if not is_grid_folder(folder) and read_meta(folder).types is not None:
        return _load_hetero_part(job, folder)
    if spec.name in HETERO_MODELS:
        raise SystemExit(f"--model {spec.name} trains a heterogeneous graph, but '{folder}' "
                         f"holds a homogeneous one; use --model "
                         f"{'|'.join(TASK_MODELS[job.graph.task])}")
    data = strategy.load(folder)
    if getattr(data, "link_splits", None):
        return data, _link_model(job, data)
    if job.graph.task != "node":
        raise SystemExit(f"--task {job.graph.task} trains supervision edges, which '{folder}' "
                         f"holds none of; cut the graph for it with 'pyg-dist partition --task "
                         f"{job.graph.task} ...' (or leave --task out for node labels)")
    if data.meta.num_classes is None:
        raise SystemExit(f"'{folder}' has no class labels (integer 'y'); partition a graph "
                         f"with node labels to train on it")
    torch.manual_seed(job.graph.seed)
    model: Any
    layers, hidden, heads, dropout = spec.sizes()
    # a rank of a feature-parallel grid holds a slice of the features' columns
    features = getattr(data, "num_features", None) or data.x.size(1)
    if spec.name in DEEP_MODELS:
        model = DeepGNN(spec.name, features, hidden, data.meta.num_classes,
                        layers=layers, dropout=dropout)
    else:
        model = GNN(spec.name, features, hidden, data.meta.num_classes, layers=layers,
                    dropout=dropout, heads=heads, **spec.options())
    model = model.to(data.x.device)
    torch.manual_seed(job.graph.seed * 1000 + distributed.rank())  # dropout differs per rank
    return data, model


def _link_model(job: Job, data: Any) -> Any:
    """The job's model for the edges of ``data``: PyG's ``LightGCN``
    (distributed, its table cut to this rank's rows), or the encoder of a
    link model (its output the hidden width) scored by the dot product or by
    OGB's ``LinkPredictor`` (``--decoder mlp``: as deep and wide as the
    encoder, its dropout the encoder's)."""
    spec = job.model
    if spec.name in DEEP_MODELS:
        raise SystemExit(f"--task link trains --model {'|'.join(TASK_MODELS['link'])}; got "
                         f"--model {spec.name}")
    torch.manual_seed(job.graph.seed)
    layers, hidden, heads, dropout = spec.sizes()
    if spec.name in EMBEDDING_MODELS:
        light = to_distributed(LightGCN(data.meta.num_nodes, hidden, layers))
        own_rows(light, data.global_id)  # a checkpoint holds a rank's own rows
        return light
    if getattr(data, "x", None) is None:
        raise SystemExit(f"the graph has no node features for --model {spec.name} to read; "
                         f"train an embedding per node with --model {'|'.join(EMBEDDING_MODELS)}")
    encoder = GNN(spec.name, data.x.size(1), hidden, hidden, layers=layers, dropout=dropout,
                  heads=heads, **spec.options())
    decoder = (LinkPredictor(hidden, hidden, 1, layers, dropout) if spec.decoder == "mlp"
               else None)
    model = LinkModel(encoder, decoder).to(data.x.device)
    torch.manual_seed(job.graph.seed * 1000 + distributed.rank())  # dropout differs per rank
    return model


def job_task(job: Job, data: Any) -> Any:
    """What ``train`` trains for ``job`` on this rank's part ``data``: the
    part itself (node classification), or the :class:`LinkTask` of its
    supervision edges reporting the job's metric (:func:`link_metric`),
    LightGCN with BPR and per-source negatives. Collective for recall@K (the
    users are counted)."""
    if not getattr(data, "link_splits", None):
        return data
    embedding = job.model.name in EMBEDDING_MODELS
    return LinkTask(data, negatives="structured" if embedding else "uniform",
                    loss="bpr" if embedding else "bce", features=not embedding,
                    metric=link_metric(job))


def link_metric(job: Job) -> str:
    """The metric of a job's link task: the graph's (``Graph.metric``), or
    ROC-AUC for a partition folder of a link split named without ``--task``."""
    return "auc" if job.graph.task == "node" else job.graph.metric


def _load_hetero_part(job: Job, folder: str) -> tuple[Any, Any]:
    """This rank's part of the heterogeneous folder ``folder`` and the job's
    model of :mod:`pyg_dist.models.hetero` for it, distributed."""
    spec = job.model
    if spec.name not in HETERO_MODELS:
        raise SystemExit(f"'{folder}' holds a heterogeneous graph; use --model "
                         f"{'|'.join(HETERO_MODELS)} (got --model {spec.name})")
    data = pyg_dist.DistHeteroData.load(folder)
    if data.meta.num_classes is None:
        raise SystemExit(f"'{folder}' has no class labels (integer 'y'); partition a graph "
                         f"with node labels to train on it")
    node_type = labelled_type(data)
    layers, hidden, heads, _ = spec.sizes()
    model = hetero_model(spec.name, data.metadata(), data[node_type].x.size(1), hidden,
                         data.meta.num_classes, node_type, layers=layers, heads=heads,
                         seed=job.graph.seed)
    return data, to_distributed(model)


def train_rank(job: Job, folder: str) -> dict[str, Any] | None:
    """What each rank runs: load its part, build the model, train. Rank 0
    returns the results (identical on every rank)."""
    strategy, spec = job.strategy, job.model
    with StopSignals():  # a signal while loading stops at once: nothing to save yet
        data, model = load_part(job, folder)
        task = job_task(job, data)
    rank = distributed.rank()
    if rank == 0 and job.run.progress:
        layers, hidden, _, _ = spec.sizes()
        print(f"ranks ready; training {spec.name} ({layers} layers, {hidden} hidden) for "
              f"{job.epochs} epochs, {strategy.name}", file=sys.stderr, flush=True)
    result = train(model, task, job.epochs, strategy=strategy, grad_sync=job.grad_sync,
                   optimizer=job.optimizer, checkpoint=job.checkpoint,
                   evaluation=job.evaluation, callback=_logger(job.run.log_every, rank),
                   progress=job.run.progress)
    post = None
    if job.post is not None:
        if result.best_state is not None:  # the best epoch's weights, a resumed run's too
            model.load_state_dict(result.best_state)
        post = correct_and_smooth(model, data, job.post).summary()
    ranking = _ranking(job, task, model, result.best_state)
    if job.run.save is not None:
        pyg_dist.save_model(model, job.run.save)
    if rank != 0:
        return None
    hetero = isinstance(data, pyg_dist.DistHeteroData)
    metric = link_metric(job)
    setup = dict(result.setup)
    halo, input_cache = setup.pop("halo"), setup.pop("input_cache")
    last = result.history[-1] if result.history else None
    return {
        **result.summary(),
        "training_seconds": round(result.seconds, 3),
        "final_val_acc": last.val_acc if last else None,
        "final_test_acc": last.test_acc if last else None,
        **({"metric": metric, f"val_{metric}": result.val_acc,
            f"test_{metric}": result.test_acc, **ranking}
           if isinstance(task, LinkTask) else {}),
        "dataset": job.graph.dataset,
        "parts": distributed.world_size(),
        "method": data.meta.method,
        "model": spec.name,
        "layers": spec.layers,
        "hidden": spec.hidden,
        **({"heads": spec.heads} if spec.name in ("gat", "hgt") else {}),
        **({"node_type": labelled_type(data)} if hetero else {}),
        "strategy": strategy.name,
        **{k: v for k, v in strategy.to_dict().items() if k != "halo"},
        **({"chosen": result.plan["choice"]} if result.plan else {}),
        **setup,
        "halo": halo,
        "eval_halo": (as_policy(job.evaluation.halo) or Exact()).spec(),
        "input_cache": input_cache,
        "grad_compress": job.grad_sync.spec,
        **({"post": post} if post is not None else {}),
        **({"saved": os.path.abspath(job.run.save)} if job.run.save is not None else {}),
        "config": job.to_dict(),
    }


def _ranking(job: Job, task: Any, model: Any, best: dict[str, Any] | None) -> dict[str, float]:
    """A recommendation's NDCG@K of the validation and test interactions at
    the best validation epoch (the model takes its weights), beside the
    recall@K the run reported there; empty for other tasks. Collective."""
    if job.graph.task != "recommend":
        return {}
    if best is not None:
        model.load_state_dict(best)
    model.eval()
    with torch.no_grad():
        h = model(*task.inputs)
    out = {}
    for split in ("val", "test"):
        _, ndcg = task.ranking(h, split, RECALL_K)
        out[f"{split}_ndcg@{RECALL_K}"] = ndcg
    return out


def embed_rank(job: Job, folder: str, out: str, overwrite: bool = False
               ) -> dict[str, Any] | None:
    """What each rank of ``pyg-dist embed`` runs: load its part and the
    job's model, restore the model from the checkpoint, write its rows
    (:func:`pyg_dist.save_embeddings`). Rank 0 returns the folder and epoch."""
    assert job.checkpoint is not None, "checked before the ranks start"
    data, model = load_part(job, folder)
    directory = job.checkpoint.dir
    if find_checkpoint(directory) is None:
        raise SystemExit(f"pyg-dist embed: '{directory}' holds no checkpoint; train with "
                         f"--checkpoint {directory} first (the same graph options)")
    optimizer, _ = make_optimizer(model, job.optimizer, job.epochs)
    epoch, _ = load_checkpoint(directory, model, optimizer)
    if job.model.name in EMBEDDING_MODELS:  # reads the graph alone, whatever its features
        model.eval()
        with torch.no_grad():
            write_embeddings(model(data.edge_index), data.global_id, out, overwrite)
    else:
        pyg_dist.save_embeddings(model, data, out, overwrite=overwrite)
    if distributed.rank() != 0:
        return None
    return {"embeddings": os.path.abspath(out), "epoch": epoch,
            "num_nodes": data.meta.num_nodes, "parts": distributed.world_size(),
            "config": job.to_dict()}


def plan_rank(job: Job, folder: str) -> dict[str, Any] | None:
    """What each rank of ``pyg-dist plan`` runs: the probe on its part and
    the predictions; rank 0 returns the choice, with every strategy's row
    (fastest first) under ``rows`` for :func:`report_plan`. The job's strategy is the planner's
    (:func:`pyg_dist.cli.parse_job` makes it so)."""
    if read_meta(folder).types is not None:
        raise SystemExit(f"'pyg-dist plan' ranks homogeneous strategies; '{folder}' holds a "
                         f"heterogeneous graph, which trains graph parallel: pyg-dist train "
                         f"--parts-dir {folder} --halo exact|auto|...")
    strategy = cast(Planned, job.strategy)
    data, model = load_part(job, folder)
    chosen = planner.plan(model, task_for(job_task(job, data), model), job.epochs,
                          strategy.accept, strategy.probe_steps, job.evaluation.every)
    if distributed.rank() != 0:
        return None
    choice = chosen.choice
    return {"rows": chosen.table(), **chosen.summary(), "epochs": job.epochs,
            "parts": distributed.world_size(),
            "probe": dataclasses.asdict(chosen.probe),
            "train": {"strategy": choice.strategy.describe(),
                      "grad_sync": choice.grad_sync.to_dict()}}


def _logger(every: int, rank: int) -> Any:
    def log(stats: EpochStats) -> None:
        if every and stats.epoch % every == 0 and rank == 0:
            write(f"epoch {stats.epoch:4d}  loss {stats.loss:.4f}  val {stats.val_acc:.4f}  "
                  f"test {stats.test_acc:.4f}  halo fwd {stats.halo_bytes_fwd / 1e6:.3f} MB  "
                  f"bwd {stats.halo_bytes_bwd / 1e6:.3f} MB  eval "
                  f"{stats.halo_bytes_eval / 1e6:.3f} MB  comm {stats.comm_seconds:.3f} s")

    return log
