"""A short full-graph training loop whose steps equal single-process training."""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from pyg_dist import distributed
from pyg_dist.checkpoint import load_checkpoint, save_checkpoint
from pyg_dist.grads import GradientSync
from pyg_dist.metrics import accuracies, data_keys, evaluate, global_loss
from pyg_dist.pipeline import Pipeline
from pyg_dist.regroup import GradientOnly

__all__ = ["train", "evaluate", "accuracies", "TrainResult", "EpochStats", "sync_parameters",
           "all_reduce_gradients", "global_loss", "halo_choices"]

MODES = ("exact", "gradient-only")


@dataclass
class EpochStats:
    """One epoch, identical on every rank (all quantities are global).

    ``halo_bytes_fwd`` / ``halo_bytes_bwd`` are the bytes all ranks sent in
    the training step (halo rows, halo gradients) under the layers' policies;
    ``halo_bytes_eval`` those of the (exact) evaluation. ``comm_seconds`` is
    the time the average rank was blocked on halo exchanges, ``overlapped_seconds``
    the time exchanges travelled while it computed (pipelining).
    ``grad_bytes`` are the bytes all ranks handed the parameter gradients'
    all-reduce (compressed or not), ``grad_seconds`` the time the average
    rank waited for it after backward; ``regroup_seconds`` the time the
    average rank spent loading clusters (gradient-only mode). In a layer
    pipeline, ``stage_bytes`` are the activations and gradients all ranks sent
    between stages in training (evaluation's count as ``halo_bytes_eval``),
    ``stage_seconds`` the time the average rank waited for them.
    """

    epoch: int
    loss: float
    train_acc: float
    val_acc: float
    test_acc: float
    halo_bytes_fwd: int
    halo_bytes_bwd: int
    halo_bytes_eval: int
    comm_seconds: float
    overlapped_seconds: float
    seconds: float
    grad_bytes: int = 0
    grad_seconds: float = 0.0
    regroup_seconds: float = 0.0
    stage_bytes: int = 0
    stage_seconds: float = 0.0


@dataclass
class TrainResult:
    """What :func:`train` returns: the history, the test accuracy at the epoch
    of best validation accuracy, and what policies that choose for themselves
    (:class:`~pyg_dist.halo.Auto`) chose per layer, predicted and measured."""

    history: list[EpochStats] = field(default_factory=list)
    best_epoch: int = 0
    val_acc: float = 0.0
    test_acc: float = 0.0
    seconds: float = 0.0
    halo_choices: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def epochs(self) -> int:
        return len(self.history)

    def total(self, key: str) -> float:
        return sum(getattr(e, key) for e in self.history)

    @property
    def halo_bytes(self) -> int:
        """Everything all ranks sent: training (both directions) and evaluation."""
        return int(self.total("halo_bytes_fwd") + self.total("halo_bytes_bwd")
                   + self.total("halo_bytes_eval"))

    def summary(self) -> dict[str, Any]:
        comm, overlapped = self.total("comm_seconds"), self.total("overlapped_seconds")
        return {
            "test_acc": self.test_acc,
            "val_acc": self.val_acc,
            "best_epoch": self.best_epoch,
            "epochs": self.epochs,
            "halo_bytes": self.halo_bytes,
            "halo_bytes_fwd": int(self.total("halo_bytes_fwd")),
            "halo_bytes_bwd": int(self.total("halo_bytes_bwd")),
            "halo_bytes_eval": int(self.total("halo_bytes_eval")),
            "comm_seconds": round(comm, 4),
            "grad_bytes": int(self.total("grad_bytes")),
            "grad_seconds": round(self.total("grad_seconds"), 4),
            "regroup_seconds": round(self.total("regroup_seconds"), 4),
            "stage_bytes": int(self.total("stage_bytes")),
            "stage_seconds": round(self.total("stage_seconds"), 4),
            "overlap_fraction": round(overlapped / (comm + overlapped), 4)
            if comm + overlapped > 0 else 0.0,
            "seconds": round(self.seconds, 3),
            **({"halo_choices": self.halo_choices} if self.halo_choices else {}),
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary(), "history": [asdict(e) for e in self.history]}


def train(
    model: nn.Module,
    data: Any,
    epochs: int = 200,
    lr: float = 0.01,
    weight_decay: float = 5e-4,
    optimizer: torch.optim.Optimizer | None = None,
    progress: bool = True,
    callback: Callable[[EpochStats], None] | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 0,
    resume: bool = False,
    eval_every: int = 1,
    eval_halo: Any = None,
    grad_compress: str | None = None,
    mode: str = "exact",
    regroup_every: int = 50,
    regroup: str = "sweep",
    correction: str = "node",
    shrinkage: float = 0.0,
    regroup_from: str = "folder",
    clusters_per_rank: int | None = None,
    stages: int = 1,
    chunks: int = 1,
    initial_rows: str = "send",
) -> TrainResult:
    r"""Full-graph training of ``model`` on a :class:`~pyg_dist.DistData` (or a
    plain PyG ``Data`` in one process).

    Each step computes the loss averaged over the training nodes of *all* ranks
    (each rank sums over its own and divides by the global count) and sums
    parameter gradients across ranks, so with exact halos a step equals the
    single-process step on the whole graph. Parameters start from rank 0's
    values. After each step the model is evaluated (exactly unless
    ``eval_halo`` says otherwise, whatever the training policy); accuracies
    are global. The returned ``test_acc`` is taken at the
    epoch of best validation accuracy. Rank 0 shows a tqdm bar.

    Args:
        model (torch.nn.Module): Called as ``model(data.x, data.edge_index)``;
            returns class logits for the owned nodes.
        data: Needs ``x``, ``y``, ``edge_index`` and ``train_mask`` (``val_mask``
            and ``test_mask`` if present).
        epochs (int, optional): Optimisation steps in all. (default: :obj:`200`)
        lr (float, optional): Adam learning rate. (default: :obj:`0.01`)
        weight_decay (float, optional): Adam weight decay. (default: :obj:`5e-4`)
        optimizer (torch.optim.Optimizer, optional): Replaces the default Adam.
            (default: :obj:`None`)
        progress (bool, optional): Show progress on rank 0. (default: :obj:`True`)
        callback (callable, optional): Called with every :class:`EpochStats`.
            (default: :obj:`None`)
        checkpoint (str, optional): Folder for checkpoints (see
            :mod:`pyg_dist.checkpoint`). (default: :obj:`None`)
        checkpoint_every (int, optional): Write a checkpoint every this many
            epochs (0: never). (default: :obj:`0`)
        resume (bool, optional): Continue from the last checkpoint in
            ``checkpoint``: model, optimizer, halo caches and policy state, RNG
            state, ledger and history; deterministic policies then end with the
            weights of an uninterrupted run. (default: :obj:`False`)
        eval_every (int, optional): Evaluate every this many epochs (and after
            the last); epochs in between repeat the last accuracies and are not
            candidates for the best epoch. (default: :obj:`1`)
        eval_halo (HaloPolicy or str, optional): Halo policy of evaluation (a
            policy or its spec, e.g. ``"exact,compress=int8"``); :obj:`None`
            is exact. Evaluation traffic is booked as ``halo_bytes_eval``.
            (default: :obj:`None`)
        grad_compress (str, optional): How gradients cross the ranks:
            :obj:`None` (one exact all-reduce after backward), ``"fp16"``,
            ``"powersgd:R"``, ``"covap:K"`` or ``"covap:auto"`` (DDP hooks
            overlapping with backward; see :mod:`pyg_dist.grads`). Booked as
            ``grad_bytes``. (default: :obj:`None`)
        mode (str, optional): ``"exact"`` (graph parallel: every layer's halo
            under the data's policies) or ``"gradient-only"``: each rank trains
            on a group of clusters of the partition folder (cut with
            ``clusters_per_part`` :math:`\ge 2`) with no halo exchange at all,
            regrouped every ``regroup_every`` epochs (``regroup="sweep"`` or
            ``"random"``), with a coverage ``correction`` (``"node"``,
            ``"batch"`` or ``"none"``) and its ``shrinkage`` in [0, 1] (see
            :mod:`pyg_dist.regroup`); evaluation stays on ``data``, exact.
            Under ``correction="node"`` the model is called with edge weights,
            ``model(x, edge_index, edge_weight)``. The group is handed to the
            model as a :class:`~pyg_dist.DistEdgeIndex` without halo rows, so
            its Dist layers aggregate locally, and layers' own halo policies
            other than exact are refused. (default: :obj:`"exact"`)
        regroup_from (str, optional): Where gradient-only training gets a new
            group of clusters: ``"folder"`` (read again) or ``"peers"`` (sent by
            the ranks that held them). (default: :obj:`"folder"`)
        clusters_per_rank (int, optional): Gradient-only: the clusters per
            rank :math:`m` the folder must have been cut into (the check of
            a run's assumption; clusters are cut once, by
            :func:`~pyg_dist.partition` with ``clusters_per_part=m``);
            :obj:`None` takes the folder's. (default: :obj:`None`)
        stages (int, optional): Layer stages of a layer pipeline
            (:class:`pyg_dist.pipeline.Pipeline`; ``model`` a
            :class:`~pyg_dist.models.DeepGNN`, ``data`` loaded by
            :func:`pyg_dist.pipeline.load`): the ranks form a grid of world
            size / ``stages`` graph parts × ``stages``. (default: :obj:`1`)
        chunks (int, optional): Chunks per part flowing through the pipeline;
            above 1, layers read other chunks' rows from history tables (at most
            one epoch old). (default: :obj:`1`)
        initial_rows (str, optional): How a pipeline's later stages get
            GCNII's initial rows: ``"send"`` or ``"recompute"`` (see
            :class:`~pyg_dist.pipeline.Pipeline`). (default: :obj:`"send"`)
    """
    _check_data(data)
    if mode not in MODES:
        raise ValueError(f"'train' got mode='{mode}'; use one of {', '.join(MODES)}")
    pipe = _pipeline(model, data, stages, chunks, initial_rows, mode, grad_compress,
                     checkpoint_every, resume)
    if clusters_per_rank is not None and mode != "gradient-only":
        raise ValueError(f"'train' takes clusters_per_rank in mode='gradient-only' only (got "
                         f"mode='{mode}'); leave it out")
    runner = (GradientOnly(data, regroup_every, regroup, correction, shrinkage,
                           regroup_from=regroup_from, clusters_per_rank=clusters_per_rank,
                           model=model)
              if mode == "gradient-only" else None)
    _set_halo_plan(data, eval_halo, epochs)
    if (resume or checkpoint_every) and checkpoint is None:
        raise ValueError("'train' needs checkpoint=<folder> to write or resume checkpoints")
    sync_parameters(model)
    optimizer = optimizer or torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    ledger = getattr(data, "ledger", None)
    sync = (GradientSync(model, grad_compress, ledger, planned_steps=epochs) if pipe is None
            else None)
    result, first = TrainResult(), 1
    if resume:
        done, extra = load_checkpoint(checkpoint, model, optimizer, data)  # type: ignore[arg-type]
        result = _result_from(extra)
        assert sync is not None, "a layer pipeline takes no checkpoints"
        sync.load_state_dict(extra.get("grad_sync", {}))
        first = done + 1
    bar = _progress(epochs, first - 1) if progress and distributed.rank() == 0 else None
    start = time.perf_counter() - result.seconds
    accs = _last_accuracies(result)
    for epoch in range(first, epochs + 1):
        epoch_start = time.perf_counter()
        step = ledger.step if ledger is not None else 0
        if pipe is not None:
            loss = pipe.train_step(optimizer)
        elif runner is None:
            loss = train_step(model, data, optimizer, sync)
        else:
            runner.prepare(epoch)
            loss = train_step(model, runner.data, optimizer, sync, runner.inputs(), runner.scale)
        evaluated = eval_every <= 1 or epoch % eval_every == 0 or epoch == epochs
        if evaluated:
            accs = evaluate(model, data) if pipe is None else pipe.evaluate()
        traffic = _ledger_totals(ledger, step)
        if ledger is not None:
            ledger.next_step()
        stats = EpochStats(epoch, loss, accs[0], accs[1], accs[2], traffic[0], traffic[1],
                           traffic[2], traffic[3], traffic[4], time.perf_counter() - epoch_start,
                           *traffic[5:])
        result.history.append(stats)
        if evaluated and (stats.val_acc > result.val_acc or result.best_epoch == 0):
            result.best_epoch = epoch
            result.val_acc, result.test_acc = stats.val_acc, stats.test_acc
        result.seconds = time.perf_counter() - start
        if checkpoint_every and epoch % checkpoint_every == 0:
            save_checkpoint(checkpoint, epoch, model, optimizer, data,  # type: ignore[arg-type]
                            extra={**_result_state(result),
                                   "grad_sync": sync.state_dict() if sync else {}})
        if bar is not None:
            bar.set_postfix(loss=f"{loss:.4f}", val=f"{stats.val_acc:.3f}",
                            test=f"{stats.test_acc:.3f}", halo_MB=f"{result.halo_bytes / 1e6:.1f}")
            bar.update(1)
        if callback is not None:
            callback(stats)
    if bar is not None:
        bar.close()
    if pipe is not None:
        pipe.gather_parameters()
    if hasattr(getattr(data, "edge_index", None), "flush"):
        data.edge_index.flush()
    if ledger is not None:
        result.halo_choices = halo_choices(ledger, result.history)
    return result


def _pipeline(model: nn.Module, data: Any, stages: int, chunks: int, initial_rows: str,
              mode: str, grad_compress: str | None, checkpoint_every: int, resume: bool) -> Any:
    """The layer pipeline of ``stages`` and ``chunks`` (:obj:`None`: graph parallel)."""
    if stages == 1 and chunks == 1:
        return None
    clashes = [name for name, given in (("mode='gradient-only'", mode != "exact"),
                                        ("grad_compress", grad_compress not in (None, "none")),
                                        ("checkpoints", bool(checkpoint_every or resume)))
               if given]
    if clashes:
        raise ValueError(f"'train' with stages={stages}, chunks={chunks} (a layer pipeline) "
                         f"does not take {', '.join(clashes)}; leave them out or train graph "
                         f"parallel (stages=1, chunks=1)")
    return Pipeline(model, data, stages=stages, chunks=chunks, initial_rows=initial_rows)


def halo_choices(ledger: Any, history: list[EpochStats]) -> dict[str, dict[str, Any]]:
    """The choices policies booked in the ledger's notes (per layer: the
    policy, predicted bytes of all ranks and seconds of the average rank),
    with what was measured since (bytes sent by all ranks, seconds waited by
    the average rank), and the graph's predicted against measured epoch
    seconds. Collective."""
    layers = {k.split("/", 1)[1]: note for k, note in sorted(ledger.notes.items())
              if "/" in k and "predicted_bytes" in note}
    if not layers:
        return {}
    ranks = distributed.world_size()
    out: dict[str, dict[str, Any]] = {}
    for layer, note in layers.items():
        totals = ledger.layer_totals(layer, note["from_step"])
        sent, waited = distributed.all_reduce_values([totals["bytes_sent"], totals["seconds"]])
        out[layer] = {**note, "measured_bytes": int(sent),
                      "measured_seconds": round(waited / ranks, 6)}
    graph = ledger.notes.get("auto", {})
    if "compute" in graph:
        after = [e.seconds for e in history if e.epoch > graph["decided_at"] + 1]
        predicted = graph["compute"] + sum(n["predicted_seconds"] / max(n["steps"], 1)
                                           for n in layers.values())
        out["epoch"] = {"bandwidth": round(graph["bandwidth"]), "compute": graph["compute"],
                        "predicted_seconds": round(predicted, 6),
                        "measured_seconds": round(sum(after) / max(len(after), 1), 6)}
    return out


def _set_halo_plan(data: Any, eval_halo: Any, epochs: int) -> None:
    """Tells the graph's halo registry the evaluation policy and the planned steps."""
    registry = getattr(getattr(data, "edge_index", None), "registry", None)
    if registry is None:
        return
    if isinstance(eval_halo, str):
        from pyg_dist.halo import parse_policy

        eval_halo = parse_policy(eval_halo)
    registry.eval_default = eval_halo
    registry.planned_steps = epochs


def _last_accuracies(result: TrainResult) -> tuple[float, float, float]:
    if not result.history:
        return float("nan"), float("nan"), float("nan")
    last = result.history[-1]
    return last.train_acc, last.val_acc, last.test_acc


def _result_state(result: TrainResult) -> dict[str, Any]:
    return {"history": [asdict(e) for e in result.history], "best_epoch": result.best_epoch,
            "val_acc": result.val_acc, "test_acc": result.test_acc, "seconds": result.seconds}


def _result_from(state: dict[str, Any]) -> TrainResult:
    return TrainResult([EpochStats(**e) for e in state.get("history", [])],
                       state.get("best_epoch", 0), state.get("val_acc", 0.0),
                       state.get("test_acc", 0.0), state.get("seconds", 0.0))


def train_step(model: nn.Module, data: Any, optimizer: torch.optim.Optimizer,
               sync: GradientSync | None = None, inputs: tuple[Any, ...] | None = None,
               loss_scale: float = 1.0) -> float:
    """One optimisation step on the global loss; returns the global loss.
    ``sync`` (default: a plain one) runs the model on ``inputs`` (default:
    ``data.x, data.edge_index``) and sums the gradients of this rank's share
    of the loss times ``loss_scale``."""
    sync = sync or GradientSync(model)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    out = sync(*(inputs or (data.x, data.edge_index)))
    loss, value = global_loss(out, data.y, data.train_mask)
    sync.backward(loss * loss_scale if loss_scale != 1.0 else loss)
    optimizer.step()
    return value


def sync_parameters(model: nn.Module) -> None:
    """Copies rank 0's parameters and buffers to every rank."""
    distributed.sync_tensors([*model.parameters(), *model.buffers()])


def all_reduce_gradients(model: nn.Module) -> None:
    """Sums every parameter's gradient over the ranks, in one flat buffer."""
    distributed.all_reduce_gradients(model.parameters())


def _check_data(data: Any) -> None:
    keys = data_keys(data)
    missing = [k for k in ("x", "y", "edge_index", "train_mask") if k not in keys]
    if missing:
        raise ValueError(
            f"'train' needs data.{', data.'.join(missing)}; partition a graph that has them "
            f"(node features 'x', labels 'y' and a boolean 'train_mask')"
        )


def _ledger_totals(ledger: Any, step: int) -> tuple[Any, ...]:
    """Halo bytes sent forward, backward and in evaluation in ``step``, summed
    over ranks; blocked and overlapped halo seconds of the average rank; the
    gradient all-reduce's bytes (all ranks) and wait (average rank); the
    average rank's seconds of regrouping; the stage-boundary bytes (all
    ranks) and wait (average rank) of a layer pipeline."""
    if ledger is None:
        return 0, 0, 0, 0.0, 0.0, 0, 0.0, 0.0, 0, 0.0
    totals = ledger.totals(step)
    keys = ("bytes_fwd", "bytes_bwd", "bytes_eval", "seconds", "overlapped", "bytes_grad",
            "seconds_grad", "seconds_regroup", "bytes_stage", "seconds_stage")
    stats = distributed.all_reduce_values([float(totals.get(k, 0.0)) for k in keys])
    ranks = distributed.world_size()
    return (int(stats[0]), int(stats[1]), int(stats[2]), stats[3] / ranks, stats[4] / ranks,
            int(stats[5]), stats[6] / ranks, stats[7] / ranks, int(stats[8]), stats[9] / ranks)


def _progress(total: int, done: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, desc="train", unit="epoch", dynamic_ncols=True)
