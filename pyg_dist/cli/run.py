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
from pathlib import Path
from typing import Any

import torch
from torch.distributed.elastic.multiprocessing.errors import get_error_handler, record

import pyg_dist
from pyg_dist import distributed, env, pipeline
from pyg_dist.cli.commands import meta_summary, partition_graph
from pyg_dist.cli.job import DEFAULT_PARTS, Job
from pyg_dist.config import GradientOnly, LayerPipeline, as_policy
from pyg_dist.halo import Exact
from pyg_dist.models import DEEP_MODELS, GNN, DeepGNN
from pyg_dist.partitioning.io import read_meta
from pyg_dist.peers import PeerLost
from pyg_dist.train import EpochStats, train

__all__ = ["train_command", "train_rank", "train_joined"]

#: Clusters per part that ``train`` cuts for gradient-only training when the
#: strategy does not say.
DEFAULT_CLUSTERS = 4


def train_command(job: Job) -> int:
    """Runs ``job`` and prints its JSON line (rank 0's)."""
    start = time.perf_counter()
    if env.under_torchrun():
        # record: torchrun's summary of a failed job shows this rank's error.
        result = record(_run_joined)(job)
    else:
        graph = job.graph
        parts = graph.parts or (read_meta(graph.parts_dir).num_parts * _stages(job)
                                if graph.parts_dir else DEFAULT_PARTS)
        job = dataclasses.replace(job, graph=dataclasses.replace(graph, parts=parts))
        check_pipeline(job)
        with tempfile.TemporaryDirectory(prefix="pyg_dist-parts-") as tmp:
            folder = graph.parts_dir or str(Path(tmp) / "parts")
            if graph.parts_dir is None:
                meta = _partition(job, Path(folder))
                print(f"partitioned {graph.dataset}: {meta_summary(meta)}", file=sys.stderr)
            result = pyg_dist.launch(train_rank, parts, args=(job, folder),
                                     timeout=job.run.timeout)[0]
    if result is not None:
        result["seconds"] = round(time.perf_counter() - start, 3)
        print(json.dumps(result), flush=True)
    return 0


def check_pipeline(job: Job) -> None:
    """Fails early, naming the fix, on a layer pipeline the job cannot make."""
    strategy, model = job.strategy, job.model
    if not isinstance(strategy, LayerPipeline):
        return
    if model.name not in DEEP_MODELS:
        raise SystemExit(f"--strategy layer-pipeline splits a deep model into stages; use "
                         f"--model {' | '.join(DEEP_MODELS)} (got --model {model.name})")
    parts = job.graph.parts
    if parts is not None and parts % strategy.stages:
        raise SystemExit(f"--stages {strategy.stages} does not divide --parts {parts} (the "
                         f"ranks); the graph is cut into parts / stages parts")
    if model.layers is not None and model.layers < strategy.stages:
        raise SystemExit(f"--layers {model.layers} cannot fill --stages {strategy.stages}; use "
                         f"at least as many layers as stages")


def _stages(job: Job) -> int:
    return job.strategy.stages if isinstance(job.strategy, LayerPipeline) else 1


def _partition(job: Job, out: Path, overwrite: bool = False) -> Any:
    strategy = job.strategy
    clusters = 1
    if isinstance(strategy, GradientOnly):
        clusters = strategy.clusters_per_rank or DEFAULT_CLUSTERS
    assert job.graph.parts is not None, "the ranks are known by now"
    return partition_graph(job.graph, out, job.graph.parts // _stages(job), clusters,
                           overwrite=overwrite)


def _run_joined(job: Job) -> dict[str, Any] | None:
    pyg_dist.init()
    try:
        result = train_joined(job)
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


def train_joined(job: Job) -> dict[str, Any] | None:
    """Under torchrun: rank 0 partitions (unless a folder is given), all train."""
    world = distributed.world_size()
    parts = job.graph.parts
    if parts is not None and parts != world:
        raise ValueError(
            f"'pyg-dist train' got --parts {parts} but torchrun started {world} ranks "
            f"(--nnodes times --nproc-per-node); pass --parts {world} (or leave it out), or "
            f"start {parts} ranks"
        )
    job = dataclasses.replace(job, graph=dataclasses.replace(job.graph, parts=world))
    check_pipeline(job)
    folder = job.graph.parts_dir
    if folder is None:
        # One machine: ranks share torchrun's agent as parent, hence one folder.
        # Across machines, partition once on shared storage and pass --parts-dir.
        folder = str(Path(tempfile.gettempdir()) / f"pyg_dist-parts-{os.getppid()}")
        if distributed.rank() == 0:
            _partition(job, Path(folder), overwrite=True)
        distributed.barrier()
    return train_rank(job, folder)


def train_rank(job: Job, folder: str) -> dict[str, Any] | None:
    """What each rank runs: load its part, build the model, train. Rank 0
    returns the results (identical on every rank)."""
    strategy, spec = job.strategy, job.model
    if isinstance(strategy, LayerPipeline):
        data = pipeline.load(folder, strategy.stages)
    else:
        data = pyg_dist.DistData.load(folder)
    if data.meta.num_classes is None:
        raise SystemExit(f"'{folder}' has no class labels (integer 'y'); partition a graph "
                         f"with node labels to train on it")
    torch.manual_seed(job.graph.seed)
    model: Any
    layers, hidden, heads, dropout = spec.sizes()
    if spec.name in DEEP_MODELS:
        model = DeepGNN(spec.name, data.x.size(1), hidden, data.meta.num_classes,
                        layers=layers, dropout=dropout)
    else:
        model = GNN(spec.name, data.x.size(1), hidden, data.meta.num_classes, layers=layers,
                    dropout=dropout, heads=heads, edge_dropout=spec.edge_dropout)
    model = model.to(data.x.device)
    rank = distributed.rank()
    torch.manual_seed(job.graph.seed * 1000 + rank)  # dropout differs per rank
    result = train(model, data, job.epochs, strategy=strategy, grad_sync=job.grad_sync,
                   optimizer=job.optimizer, checkpoint=job.checkpoint,
                   evaluation=job.evaluation, callback=_logger(job.run.log_every, rank),
                   progress=job.run.progress)
    if rank != 0:
        return None
    policy = data.edge_index.registry.policy(None)
    return {
        **result.summary(),
        "dataset": job.graph.dataset,
        "parts": distributed.world_size(),
        "method": data.meta.method,
        "model": spec.name,
        "layers": spec.layers,
        "hidden": spec.hidden,
        **({"heads": spec.heads} if spec.name == "gat" else {}),
        "strategy": strategy.name,
        **{k: v for k, v in strategy.to_dict().items() if k != "halo"},
        **({"clusters_per_rank": data.meta.clusters_per_part}
           if isinstance(strategy, GradientOnly) else {}),
        "halo": policy.spec(),
        "eval_halo": (as_policy(job.evaluation.halo) or Exact()).spec(),
        "input_cache": bool(getattr(policy, "cache_inputs", True)),
        "grad_compress": job.grad_sync.spec,
        "config": job.to_dict(),
    }


def _logger(every: int, rank: int) -> Any:
    def log(stats: EpochStats) -> None:
        if every and stats.epoch % every == 0 and rank == 0:
            print(f"epoch {stats.epoch:4d}  loss {stats.loss:.4f}  val {stats.val_acc:.4f}  "
                  f"test {stats.test_acc:.4f}  halo fwd {stats.halo_bytes_fwd / 1e6:.3f} MB  "
                  f"bwd {stats.halo_bytes_bwd / 1e6:.3f} MB  eval "
                  f"{stats.halo_bytes_eval / 1e6:.3f} MB  comm {stats.comm_seconds:.3f} s",
                  file=sys.stderr, flush=True)

    return log
