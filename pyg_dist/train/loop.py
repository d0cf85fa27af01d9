"""A short full-graph training loop whose steps equal single-process training."""
from __future__ import annotations

import functools
import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn
from torch.optim import lr_scheduler

from pyg_dist.config import (
    Adam,
    Checkpoint,
    Evaluation,
    GradientOnly,
    GradSync,
    GraphParallel,
    LayerPipeline,
    LRSchedule,
    Planned,
    Strategy,
    as_policy,
)
from pyg_dist.grads import GradientSync
from pyg_dist.halo import Exact
from pyg_dist.halo.layer import registry_of
from pyg_dist.metrics import accuracies, data_keys, evaluate, global_loss
from pyg_dist.pipeline import Pipeline
from pyg_dist.regroup import GroupRunner
from pyg_dist.runtime import distributed
from pyg_dist.strategies import planner
from pyg_dist.strategies.task import HeteroTask, check_hetero_strategy, is_hetero
from pyg_dist.train.checkpoint import find_checkpoint, load_checkpoint, save_checkpoint

__all__ = ["train", "evaluate", "accuracies", "TrainResult", "EpochStats", "sync_parameters",
           "all_reduce_gradients", "global_loss", "halo_choices"]



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

    Attributes:
        epoch (int): The epoch, from :obj:`1`.
        loss (float): The training loss of the epoch's step (all ranks' nodes).
        train_acc (float): Accuracy on ``train_mask``.
        val_acc (float): Accuracy on ``val_mask``.
        test_acc (float): Accuracy on ``test_mask``.
        halo_bytes_fwd (int): Halo rows' bytes all ranks sent in the training step.
        halo_bytes_bwd (int): Halo gradients' bytes all ranks sent in the training step.
        halo_bytes_eval (int): Bytes all ranks sent in the (exact) evaluation.
        comm_seconds (float): Seconds the average rank was blocked on halo exchanges.
        overlapped_seconds (float): Seconds exchanges travelled while the
            average rank computed.
        seconds (float): Seconds of the epoch.
        grad_bytes (int, optional): Bytes all ranks handed the gradients'
            all-reduce. (default: :obj:`0`)
        grad_seconds (float, optional): Seconds the average rank waited for it
            after backward. (default: :obj:`0.0`)
        regroup_seconds (float, optional): Seconds the average rank spent
            loading clusters (gradient-only mode). (default: :obj:`0.0`)
        stage_bytes (int, optional): Bytes all ranks sent between pipeline
            stages in training. (default: :obj:`0`)
        stage_seconds (float, optional): Seconds the average rank waited for
            them. (default: :obj:`0.0`)
        train_seconds (float, optional): Seconds of the average rank in the
            training step (forward, backward, gradient sum, optimizer).
            (default: :obj:`0.0`)
        forward_seconds (float, optional): Seconds of the average rank in the
            step's forward alone. (default: :obj:`0.0`)
        eval_seconds (float, optional): Seconds of the average rank in
            evaluation. (default: :obj:`0.0`)
        evaluated (bool, optional): Whether the accuracies were measured after
            this epoch (else repeated from the last evaluation).
            (default: :obj:`True`)
        lr (float, optional): The learning rate of this epoch's step (of the
            first parameter group). (default: :obj:`0.0`)
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
    train_seconds: float = 0.0
    forward_seconds: float = 0.0
    eval_seconds: float = 0.0
    evaluated: bool = True
    lr: float = 0.0


@dataclass
class TrainResult:
    """What :func:`train` returns: the history, the test accuracy at the epoch
    of best validation accuracy, what policies that choose for themselves
    (:class:`~pyg_dist.halo.Auto`) chose per layer, predicted and measured,
    and why training stopped (one of :data:`~pyg_dist.config.STOPS`).

    ``time_to_target`` are the seconds of training (evaluations included)
    until validation accuracy first reached the evaluation's ``target_acc``,
    ``epochs_to_target`` the epochs; :obj:`None` while it has not.

    Attributes:
        history (list[EpochStats]): Every epoch trained, in order.
        best_epoch (int): The epoch of best validation accuracy.
        val_acc (float): The best validation accuracy.
        test_acc (float): The test accuracy at :obj:`best_epoch`.
        seconds (float): Seconds of training, evaluations included.
        halo_choices (dict): What policies that choose for themselves chose,
            per layer (see :func:`halo_choices`).
        stopped (str): Why training stopped, one of
            :data:`~pyg_dist.config.STOPS`.
        time_to_target (float, optional): Seconds until validation accuracy
            first reached the target.
        epochs_to_target (int, optional): Epochs until it did.
        plan (dict, optional): Under ``strategy="auto"``, the chosen strategy
            with its predicted epoch seconds and bytes beside the measured
            ones (see :mod:`pyg_dist.strategies.planner`).
    """

    history: list[EpochStats] = field(default_factory=list)
    best_epoch: int = 0
    val_acc: float = 0.0
    test_acc: float = 0.0
    seconds: float = 0.0
    halo_choices: dict[str, dict[str, Any]] = field(default_factory=dict)
    plan: dict[str, Any] | None = None
    stopped: str = "epochs"
    time_to_target: float | None = None
    epochs_to_target: int | None = None

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
            **{key: round(self.total(key), 4) for key in ("train_seconds", "forward_seconds",
                                                          "eval_seconds")},
            "stopped": self.stopped,
            "time_to_target": None if self.time_to_target is None
            else round(self.time_to_target, 3),
            "epochs_to_target": self.epochs_to_target,
            **({"halo_choices": self.halo_choices} if self.halo_choices else {}),
            **({"plan": self.plan} if self.plan else {}),
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary(), "history": [asdict(e) for e in self.history]}

#: Keywords of earlier releases, each with the option object that replaced it.
LEGACY_KEYWORDS = {
    "lr": "optimizer=Adam(lr=...)", "weight_decay": "optimizer=Adam(weight_decay=...)",
    "checkpoint_every": "checkpoint=Checkpoint(dir, every=...)",
    "resume": "checkpoint=Checkpoint(dir, resume=True)",
    "eval_every": "evaluation=Evaluation(every=...)",
    "eval_halo": "evaluation=Evaluation(halo=...)",
    "grad_compress": "grad_sync=GradSync(compress=...)",
    "mode": "strategy=GradientOnly(...) or GraphParallel()",
    **{name: f"strategy=GradientOnly({name}=...)" for name in (
        "regroup_every", "regroup", "correction", "shrinkage", "regroup_from",
        "clusters_per_rank")},
    **{name: f"strategy=LayerPipeline({name}=...)" for name in (
        "stages", "chunks", "initial_rows")},
}
_MODES = ("exact", "gradient-only")


def _legacy_keywords(fn: Callable[..., TrainResult]) -> Callable[..., TrainResult]:
    """Lets :func:`train` take the keywords of earlier releases, with a
    :class:`DeprecationWarning` naming each one's new spelling."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> TrainResult:
        old = {k: kwargs.pop(k) for k in list(kwargs) if k in LEGACY_KEYWORDS}
        folder = kwargs.get("checkpoint")
        if isinstance(folder, (str, os.PathLike)):
            old["checkpoint"] = kwargs.pop("checkpoint")
        if old:
            spelled = "; ".join(f"{k}= -> {LEGACY_KEYWORDS.get(k, 'checkpoint=Checkpoint(dir)')}"
                                for k in old)
            warnings.warn(f"'train' keywords of earlier releases are deprecated and go in the "
                          f"next one: {spelled} (pyg_dist.config)", DeprecationWarning,
                          stacklevel=2)
            kwargs.update(_translate(old, kwargs))
        return fn(*args, **kwargs)

    return wrapper


def _translate(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The option objects that the keywords ``old`` of earlier releases spell."""
    out: dict[str, Any] = {}
    if ("lr" in old or "weight_decay" in old) and new.get("optimizer") is None:
        out["optimizer"] = Adam(lr=old.get("lr", 0.01),
                                weight_decay=old.get("weight_decay", 5e-4))
    if "checkpoint" in old:
        out["checkpoint"] = Checkpoint(old["checkpoint"], every=old.get("checkpoint_every", 0),
                                       resume=bool(old.get("resume", False)))
    elif old.get("checkpoint_every") or old.get("resume"):
        raise ValueError("'train' needs checkpoint=<folder> to write or resume checkpoints: "
                         "pass checkpoint=Checkpoint(dir, every=..., resume=...)")
    if "eval_every" in old or "eval_halo" in old:
        out["evaluation"] = Evaluation(every=old.get("eval_every", 1), halo=old.get("eval_halo"))
    if "grad_compress" in old:
        compress = old["grad_compress"]
        out["grad_sync"] = GradSync(None if compress == "none" else compress)
    mode = old.get("mode", "exact")
    if mode not in _MODES:
        raise ValueError(f"'train' got mode='{mode}'; use one of {', '.join(_MODES)} (or "
                         f"strategy=GraphParallel() / GradientOnly(...))")
    grouped = {k: old[k] for k in ("regroup_every", "regroup", "correction", "shrinkage",
                                   "regroup_from", "clusters_per_rank") if k in old}
    piped = {k: old[k] for k in ("stages", "chunks", "initial_rows") if k in old}
    if mode == "gradient-only":
        out["strategy"] = GradientOnly(**grouped)
    elif grouped.get("clusters_per_rank") is not None:
        raise ValueError("'train' takes clusters_per_rank in mode='gradient-only' only (got "
                         "mode='exact'); leave it out, or pass strategy=GradientOnly(...)")
    if piped.get("stages", 1) > 1 or piped.get("chunks", 1) > 1:
        if mode == "gradient-only":
            raise ValueError("'train' with stages or chunks (a layer pipeline) does not take "
                             "mode='gradient-only'; choose one strategy")
        out["strategy"] = LayerPipeline(**{"stages": 1, **piped})
    return out


@_legacy_keywords
def train(
    model: nn.Module,
    data: Any,
    epochs: int = 200,
    *,
    strategy: Strategy | str | None = None,
    grad_sync: GradSync | None = None,
    optimizer: torch.optim.Optimizer | tuple[torch.optim.Optimizer, Any] | Adam | None = None,
    checkpoint: Checkpoint | None = None,
    evaluation: Evaluation | None = None,
    callback: Callable[[EpochStats], None] | None = None,
    progress: bool = True,
) -> TrainResult:
    r"""Full-graph training of ``model`` on a :class:`~pyg_dist.DistData` or a
    :class:`~pyg_dist.DistHeteroData` (or a plain PyG ``Data`` or
    ``HeteroData`` in one process).

    Each step computes the loss averaged over the training nodes of *all* ranks
    (each rank sums over its own and divides by the global count) and sums
    parameter gradients across ranks, so with exact halos a step equals the
    single-process step on the whole graph. Parameters start from rank 0's
    values. The model is evaluated on the schedule of ``evaluation`` (exactly
    unless it says otherwise, whatever the training policy); accuracies are
    global. Training stops after ``epochs`` steps, or earlier under the
    evaluation's stop rules (a target accuracy, patience, a time budget). The
    returned ``test_acc`` is taken at the epoch of best validation accuracy.
    Rank 0 shows a tqdm bar.

    On a heterogeneous graph, loss and accuracies are those of the one node
    type with labels ``y`` and a ``train_mask``; the model is called as
    ``model(data.x_dict, data.edge_index_dict)``, or, when its ``reads``
    attribute is :obj:`"homogeneous"` (:class:`~pyg_dist.models.hetero.RGCN`),
    on ``data.to_homogeneous()`` as ``model(x, edge_index, edge_type,
    node_type)``, and returns the labelled type's logits (or a dictionary
    holding them; see :class:`~pyg_dist.strategies.task.HeteroTask`). It trains
    graph parallel only, under any halo policy the model's layers take.

    Args:
        model (torch.nn.Module): Called as ``model(data.x, data.edge_index)``;
            returns class logits for the owned nodes.
        data: Needs ``x``, ``y``, ``edge_index`` and ``train_mask`` (``val_mask``
            and ``test_mask`` if present); a heterogeneous graph, ``x`` on
            every node type and ``y`` and ``train_mask`` on one.
        epochs (int, optional): Optimisation steps at most. (default: :obj:`200`)
        strategy (GraphParallel or GradientOnly or LayerPipeline or Planned, optional):
            How the ranks share the work (see :mod:`pyg_dist.config`);
            :obj:`None` is :class:`~pyg_dist.config.GraphParallel` under the
            graph's own halo policy; ``"auto"`` is
            :class:`~pyg_dist.config.Planned`: a short probe, then the fastest
            predicted strategy at the accepted risk. (default: :obj:`None`)
        grad_sync (GradSync, optional): How gradients are summed; :obj:`None`
            is one exact all-reduce after backward. (default: :obj:`None`)
        optimizer (torch.optim.Optimizer or tuple or Adam, optional): The
            optimizer; or the pair of an optimizer and its
            :mod:`torch.optim.lr_scheduler` scheduler (stepped after every
            epoch, a ``ReduceLROnPlateau`` with ``mode="max"`` after every
            evaluation, on validation accuracy); or the settings of the
            default Adam and its :class:`~pyg_dist.config.LRSchedule`;
            :obj:`None` is :class:`~pyg_dist.config.Adam` ``()``. The
            scheduler's state is saved in checkpoints. (default: :obj:`None`)
        checkpoint (Checkpoint, optional): Where and how often to write
            checkpoints, and whether to resume from the last. (default: :obj:`None`)
        evaluation (Evaluation, optional): When and under which halo policy
            to evaluate, and when to stop early; :obj:`None` is every epoch,
            exactly, to the last epoch. (default: :obj:`None`)
        callback (Callable, optional): Called with every :class:`EpochStats`.
            (default: :obj:`None`)
        progress (bool, optional): Show progress on rank 0. (default: :obj:`True`)

    The keywords of earlier releases (``lr``, ``weight_decay``, ``mode``,
    ``eval_every``, ``grad_compress``, ``stages``, ...) still work for this
    release, with a :class:`DeprecationWarning` naming the new spelling.
    """
    if is_hetero(data):
        check_hetero_strategy(strategy, grad_sync)
        data = HeteroTask(data, model)
    else:
        _check_data(data)
    strategy = GraphParallel() if strategy is None else strategy
    strategy = Planned() if strategy == "auto" else strategy
    grad_sync = GradSync() if grad_sync is None else grad_sync
    evaluation = Evaluation() if evaluation is None else evaluation
    _check_types(strategy, grad_sync, optimizer, checkpoint, evaluation)
    planned, strategy, grad_sync = _planned(model, data, strategy, grad_sync, epochs,
                                            evaluation.every)
    pipe = _pipeline(model, data, strategy, grad_sync, checkpoint)
    runner = _gradient_only(model, data, strategy)
    _set_halo_plan(data, strategy, evaluation, epochs)
    sync_parameters(model)
    optimizer, scheduler = _optimizer(model, optimizer, epochs)
    plateau = isinstance(scheduler, lr_scheduler.ReduceLROnPlateau)
    ledger = getattr(data, "ledger", None)
    sync = (GradientSync(model, grad_sync.compress, ledger, planned_steps=epochs)
            if pipe is None else None)
    result, first = TrainResult(), 1
    if checkpoint is not None and checkpoint.resume and _resumable(checkpoint):
        done, extra = load_checkpoint(checkpoint.dir, model, optimizer, data)
        result = _result_from(extra)
        assert sync is not None, "a layer pipeline takes no checkpoints"
        sync.load_state_dict(extra.get("grad_sync", {}))
        if scheduler is not None and extra.get("schedule") is not None:
            scheduler.load_state_dict(extra["schedule"])
        first = done + 1
    reuse = _reusable(evaluation, strategy)
    phases = _Phases(data, strategy, first)
    rules = _StopRules(evaluation, result)
    bar = _progress(epochs, first - 1) if progress and distributed.rank() == 0 else None
    start = _clock() - result.seconds
    accs = _last_accuracies(result)
    for epoch in range(first, epochs + 1):
        epoch_start = _clock()
        phases.enter(epoch)
        step = ledger.step if ledger is not None else 0
        lr = float(optimizer.param_groups[0]["lr"])
        forward = 0.0
        if pipe is not None:
            loss = pipe.train_step(optimizer)
        elif runner is None:
            loss, out, forward = _step(model, data, optimizer, sync,
                                       compare=reuse and epoch == first)
        else:
            runner.prepare(epoch)
            loss, _, forward = _step(model, runner.data, optimizer, sync, runner.inputs(),
                                     runner.scale)
        if scheduler is not None and not plateau:
            scheduler.step()
        trained = _clock()
        evaluated = (epoch % evaluation.every == 0 or epoch == epochs
                     or rules.over_budget(trained - start))
        if reuse and epoch == first:
            _check_exact_halos(data)
        if evaluated:
            if reuse:
                accs = accuracies(out.detach().argmax(dim=-1), data)
            elif pipe is not None:
                accs = pipe.evaluate()
            else:
                accs = (data.evaluate(model) if isinstance(data, HeteroTask)
                        else evaluate(model, data))
            if plateau:
                scheduler.step(accs[1])
        times = (trained - epoch_start, forward, _clock() - trained)
        totals = _epoch_totals(ledger, step, times)
        if ledger is not None:
            ledger.next_step()
        stats = EpochStats(epoch, loss, *accs, seconds=_clock() - epoch_start,
                           evaluated=evaluated, lr=lr, **totals)
        result.history.append(stats)
        if evaluated and (stats.val_acc > result.val_acc or result.best_epoch == 0):
            result.best_epoch = epoch
            result.val_acc, result.test_acc = stats.val_acc, stats.test_acc
        result.seconds = _clock() - start
        stopped = rules.after(stats, result) if evaluated else None
        if checkpoint is not None and checkpoint.every and epoch % checkpoint.every == 0:
            save_checkpoint(checkpoint.dir, epoch, model, optimizer, data,
                            extra={**_result_state(result),
                                   "grad_sync": sync.state_dict() if sync else {},
                                   "schedule": scheduler.state_dict() if scheduler else None})
        if bar is not None:
            bar.set_postfix(loss=f"{loss:.4f}", val=f"{stats.val_acc:.3f}",
                            test=f"{stats.test_acc:.3f}", halo_MB=f"{result.halo_bytes / 1e6:.1f}")
            bar.update(1)
        if callback is not None:
            callback(stats)
        if stopped is not None:
            result.stopped = stopped
            break
    if bar is not None:
        bar.close()
    if pipe is not None:
        pipe.gather_parameters()
    registry = registry_of(data)
    if registry is not None:
        registry.flush()
    if ledger is not None:
        result.halo_choices = halo_choices(ledger, result.history)
    if planned is not None:
        result.plan = {**planned.summary(), **_measured(result)}
    return result


def _planned(model: nn.Module, data: Any, strategy: Any, grad_sync: GradSync,
             epochs: int, eval_every: int) -> tuple[Any, Any, GradSync]:
    """The plan of a :class:`Planned` strategy (collective) with the strategy
    and gradient sync it chose; the gradient sync given wins over the plan's
    unless it is the default. Other strategies pass through."""
    if not isinstance(strategy, Planned):
        return None, strategy, grad_sync
    if not hasattr(getattr(data, "edge_index", None), "channel"):
        return None, GraphParallel(), grad_sync  # one process: nothing to choose
    chosen = planner.plan(model, data, epochs, strategy.accept, strategy.probe_steps,
                          eval_every)
    if grad_sync == GradSync():
        grad_sync = chosen.choice.grad_sync
    return chosen, chosen.choice.strategy, grad_sync


def _measured(result: TrainResult) -> dict[str, Any]:
    """What a run measured, to set beside a plan's predictions: the median
    training step and the mean epoch after the first, and training bytes per
    epoch (all ranks)."""
    epochs = result.history[1:] or result.history
    steps = sorted(e.train_seconds for e in epochs)
    trained = sum(e.halo_bytes_fwd + e.halo_bytes_bwd + e.grad_bytes for e in result.history)
    return {"measured_step_s": round(steps[len(steps) // 2], 6) if steps else 0.0,
            "measured_epoch_s": round(sum(e.seconds for e in epochs) / max(len(epochs), 1), 6),
            "measured_bytes_per_epoch": int(trained / max(len(result.history), 1))}


#: The clock of epoch times and the time budget (tests replace it).
_clock = time.perf_counter


class _StopRules:
    """The evaluation's stop rules: decides after each evaluation whether
    training stops, and why; the same on every rank."""

    def __init__(self, evaluation: Evaluation, result: TrainResult) -> None:
        self.evaluation = evaluation
        # Evaluations since the best one (a resumed run counts from its history).
        self.waited = sum(1 for e in result.history if e.evaluated and e.epoch > result.best_epoch)

    def over_budget(self, elapsed: float) -> bool:
        """Whether the slowest rank has trained ``elapsed`` seconds past the
        budget. Collective when there is a budget."""
        budget = self.evaluation.time_budget
        if budget is None:
            return False
        return distributed.all_reduce_values([elapsed], op="max")[0] >= budget

    def after(self, stats: EpochStats, result: TrainResult) -> str | None:
        """Why training stops after the evaluation ``stats`` (:obj:`None`: it goes on)."""
        rules = self.evaluation
        self.waited = 0 if result.best_epoch == stats.epoch else self.waited + 1
        if rules.target_acc is not None and stats.val_acc >= rules.target_acc:
            if result.epochs_to_target is None:
                result.time_to_target, result.epochs_to_target = result.seconds, stats.epoch
            return "target"
        if rules.patience is not None and self.waited >= rules.patience:
            return "patience"
        if rules.time_budget is not None and result.seconds >= rules.time_budget:
            return "time_budget"
        return None


class _Phases:
    """Switches the graph's default halo policy at the epochs a
    :class:`GraphParallel` strategy's ``phases`` name (the same epochs on
    every rank)."""

    def __init__(self, data: Any, strategy: Any, first: int) -> None:
        registry = registry_of(data)
        phases = getattr(strategy, "phases", ())
        self.registry = registry if phases else None
        self.switches = {start: as_policy(policy) for start, policy in phases}
        current = strategy.policy_at(first) if phases else None
        if self.registry is not None and current is not None:
            self.registry.default = as_policy(current)

    def enter(self, epoch: int) -> None:
        if self.registry is not None and epoch in self.switches:
            self.registry.default = self.switches[epoch]


def _optimizer(model: nn.Module, given: Any, epochs: int) -> tuple[torch.optim.Optimizer, Any]:
    """The optimizer ``train`` was given (or makes) and its scheduler (or :obj:`None`)."""
    if isinstance(given, torch.optim.Optimizer):
        return given, None
    if isinstance(given, tuple):
        return _pair(model, given)
    adam = given or Adam()
    optimizer = torch.optim.Adam(model.parameters(), lr=adam.lr, weight_decay=adam.weight_decay)
    schedule: LRSchedule | None = adam.schedule  # type: ignore[assignment]
    return optimizer, None if schedule is None else schedule.build(optimizer, epochs)


def _pair(model: nn.Module, pair: tuple[Any, ...]) -> tuple[torch.optim.Optimizer, Any]:
    """An (optimizer, scheduler) pair, checked: the scheduler steps that
    optimizer, which steps ``model``'s parameters."""
    fix = "pass optimizer=(opt, scheduler) with scheduler = e.g. CosineAnnealingLR(opt, T_max)"
    if len(pair) != 2 or not isinstance(pair[0], torch.optim.Optimizer) \
            or not isinstance(pair[1], (lr_scheduler.LRScheduler,
                                        lr_scheduler.ReduceLROnPlateau)):
        raise TypeError(f"'train' got optimizer={pair!r}; {fix}")
    optimizer, scheduler = pair
    if scheduler.optimizer is not optimizer:
        raise ValueError("'train' got a scheduler made for a different optimizer than the one "
                         "paired with it; make the scheduler with that optimizer: " + fix)
    owned = {id(p) for p in model.parameters()}
    if not any(id(p) in owned for group in optimizer.param_groups for p in group["params"]):
        raise ValueError("'train' got an optimizer of none of the model's parameters; make "
                         "it with model.parameters()")
    if isinstance(scheduler, lr_scheduler.ReduceLROnPlateau) and scheduler.mode != "max":
        raise ValueError("'train' steps ReduceLROnPlateau on validation accuracy (higher is "
                         "better); make it with mode='max'")
    return optimizer, scheduler


def _resumable(checkpoint: Checkpoint) -> bool:
    """Whether ``checkpoint.dir`` holds a checkpoint to resume from (rank 0
    says which, or that training starts at epoch 1). Collective."""
    epoch = find_checkpoint(checkpoint.dir)
    if distributed.rank() == 0:
        print(f"no checkpoint in '{os.fspath(checkpoint.dir)}' yet: starting at epoch 1"
              if epoch is None else f"resuming from the checkpoint of epoch {epoch} in "
              f"'{os.fspath(checkpoint.dir)}'", file=sys.stderr, flush=True)
    return epoch is not None


def _check_types(strategy: Any, grad_sync: Any, optimizer: Any, checkpoint: Any,
                 evaluation: Any) -> None:
    """Each option where its type is expected, or an error naming the right type."""
    expected = (("strategy", strategy, (GraphParallel, GradientOnly, LayerPipeline, Planned),
                 "GraphParallel(...), GradientOnly(...), LayerPipeline(...) or Planned(...) "
                 "(\"auto\")"),
                ("grad_sync", grad_sync, (GradSync,), "GradSync(compress=...)"),
                ("optimizer", optimizer, (torch.optim.Optimizer, tuple, Adam, type(None)),
                 "a torch.optim.Optimizer, (optimizer, scheduler) or Adam(lr=..., ...)"),
                ("checkpoint", checkpoint, (Checkpoint, type(None)),
                 "Checkpoint(dir, every=..., resume=...)"),
                ("evaluation", evaluation, (Evaluation,), "Evaluation(every=..., halo=...)"))
    for name, value, types, fix in expected:
        if not isinstance(value, types):
            raise TypeError(f"'train' got {name}={value!r}; pass {fix} from pyg_dist.config")


def _pipeline(model: nn.Module, data: Any, strategy: Any, grad_sync: GradSync,
              checkpoint: Checkpoint | None) -> Pipeline | None:
    """The layer pipeline of a :class:`LayerPipeline` strategy (else :obj:`None`)."""
    if not isinstance(strategy, LayerPipeline):
        return None
    clashes = [name for name, given in (("grad_sync compression", grad_sync.compress
                                         not in (None, "none")),
                                        ("checkpoints", checkpoint is not None))
               if given]
    if clashes:
        raise ValueError(f"'train' with strategy={strategy} (a layer pipeline) does not take "
                         f"{', '.join(clashes)}; leave them out or train GraphParallel()")
    return Pipeline(model, data, stages=strategy.stages, chunks=strategy.chunks,
                    initial_rows=strategy.initial_rows)


def _gradient_only(model: nn.Module, data: Any, strategy: Any) -> GroupRunner | None:
    """The runner of a :class:`GradientOnly` strategy (else :obj:`None`)."""
    if not isinstance(strategy, GradientOnly):
        return None
    return GroupRunner(data, strategy.regroup_every, strategy.regroup, strategy.correction,
                       strategy.shrinkage, regroup_from=strategy.regroup_from,
                       clusters_per_rank=strategy.clusters_per_rank, model=model)


def halo_choices(ledger: Any, history: list[EpochStats]) -> dict[str, dict[str, Any]]:
    """The choices policies recorded in the ledger (per layer: the policy,
    predicted bytes of all ranks and seconds of the average rank; the graph's
    predicted epoch seconds under ``"epoch"`` once the link is measured),
    with what was measured since (bytes sent by all ranks, seconds waited by
    the average rank, the epoch seconds after the decision). Collective.

    Args:
        ledger (Ledger): The graph's ledger (``data.ledger``), holding the
            recorded choices.
        history (list[EpochStats]): The epochs trained, for the measured
            epoch seconds.
    """
    choices = ledger.choices
    out = choices.predicted()
    ranks = distributed.world_size()
    for layer in sorted(choices.layers):
        totals = ledger.layer_totals(layer, choices.layers[layer].from_step)
        sent, waited = distributed.all_reduce_values([totals["bytes_sent"], totals["seconds"]])
        out[layer].update(measured_bytes=int(sent), measured_seconds=round(waited / ranks, 6))
    if "epoch" in out:
        after = [e.seconds for e in history if e.epoch > choices.link.decided_at + 1]
        out["epoch"]["measured_seconds"] = round(sum(after) / max(len(after), 1), 6)
    return out


def _set_halo_plan(data: Any, strategy: Any, evaluation: Evaluation, epochs: int) -> None:
    """Tells the graph's halo registry the training and evaluation policies
    and the planned steps, and the graph whether to pre-aggregate."""
    registry = registry_of(data)
    if registry is None:
        return
    if getattr(strategy, "pre_aggregate", False):
        data.edge_index.pre_aggregate = True
    halo = getattr(strategy, "halo", None)
    if halo is not None:
        registry.default = as_policy(halo)
    registry.eval_default = as_policy(evaluation.halo)
    registry.planned_steps = epochs


def _last_accuracies(result: TrainResult) -> tuple[float, float, float]:
    if not result.history:
        return float("nan"), float("nan"), float("nan")
    last = result.history[-1]
    return last.train_acc, last.val_acc, last.test_acc


def _result_state(result: TrainResult) -> dict[str, Any]:
    return {"history": [asdict(e) for e in result.history], "best_epoch": result.best_epoch,
            "val_acc": result.val_acc, "test_acc": result.test_acc, "seconds": result.seconds,
            "time_to_target": result.time_to_target,
            "epochs_to_target": result.epochs_to_target}


def _result_from(state: dict[str, Any]) -> TrainResult:
    return TrainResult([EpochStats(**e) for e in state.get("history", [])],
                       state.get("best_epoch", 0), state.get("val_acc", 0.0),
                       state.get("test_acc", 0.0), state.get("seconds", 0.0),
                       time_to_target=state.get("time_to_target"),
                       epochs_to_target=state.get("epochs_to_target"))


def train_step(model: nn.Module, data: Any, optimizer: torch.optim.Optimizer,
               sync: GradientSync | None = None, inputs: tuple[Any, ...] | None = None,
               loss_scale: float = 1.0) -> float:
    """One optimisation step on the global loss; returns the global loss.
    ``sync`` (default: a plain one) runs the model on ``inputs`` (default:
    ``data.x, data.edge_index``) and sums the gradients of this rank's share
    of the loss times ``loss_scale``."""
    return _step(model, data, optimizer, sync, inputs, loss_scale)[0]


def _step(model: nn.Module, data: Any, optimizer: torch.optim.Optimizer,
          sync: GradientSync | None = None, inputs: tuple[Any, ...] | None = None,
          loss_scale: float = 1.0,
          compare: bool = False) -> tuple[float, torch.Tensor, float]:
    """:func:`train_step`, also returning the training forward's logits and
    its seconds (to the global loss); ``compare`` first checks the logits
    equal the evaluation forward's (collective)."""
    sync = sync or GradientSync(model)
    inputs = inputs or _inputs(data)
    expected = None
    if compare:
        with torch.no_grad():
            model.eval()
            expected = _logits(data, model(*inputs))
    model.train()
    optimizer.zero_grad(set_to_none=True)
    start = _clock()
    out = _logits(data, sync(*inputs))
    if expected is not None:
        differs = not torch.allclose(out.detach(), expected, rtol=1e-4, atol=1e-5)
        if distributed.all_reduce_values([float(differs)], op="max")[0]:
            raise ValueError("Evaluation(from_training=True): the model's training forward "
                             "differs from its evaluation forward (dropout or batch statistics "
                             "in training); evaluate with a forward of its own "
                             "(from_training=False)")
    loss, value = global_loss(out, data.y, data.train_mask)
    forward = _clock() - start
    sync.backward(loss * loss_scale if loss_scale != 1.0 else loss)
    optimizer.step()
    return value, out, forward


def _reusable(evaluation: Evaluation, strategy: Any) -> bool:
    """Whether accuracies come from the training forward (checked further at
    the first step)."""
    if not evaluation.from_training:
        return False
    if not isinstance(strategy, GraphParallel) or strategy.phases:
        raise ValueError(f"Evaluation(from_training=True) reads the training forward of "
                         f"graph-parallel training under one exact policy (got {strategy}); "
                         f"evaluate with a forward of its own (from_training=False)")
    return True


def _check_exact_halos(data: Any) -> None:
    """Every layer trained under exact, uncompressed halos (the rows an
    evaluation would read), else an error naming the fix."""
    registry = registry_of(data)
    layers = registry.layers.items() if registry is not None else ()
    inexact = sorted(f"{name} ({state.policy.spec()})" for (name, mode), state in layers
                     if mode == "train" and (not isinstance(state.policy, Exact)
                                             or state.policy.codec is not None))
    if inexact:
        raise ValueError(f"Evaluation(from_training=True) needs exact, uncompressed halos in "
                         f"training; {', '.join(inexact)} differ; train with halo='exact' or "
                         f"evaluate with a forward of its own (from_training=False)")


def sync_parameters(model: nn.Module) -> None:
    """Copies rank 0's parameters and buffers to every rank.

    Args:
        model (torch.nn.Module): The model, built alike on every rank.
    """
    distributed.sync_tensors([*model.parameters(), *model.buffers()])


def all_reduce_gradients(model: nn.Module) -> None:
    """Sums every parameter's gradient over the ranks, in one flat buffer.

    Args:
        model (torch.nn.Module): The model, after backward.
    """
    distributed.all_reduce_gradients(model.parameters())


def _inputs(data: Any) -> tuple[Any, ...]:
    """The model's arguments: ``data.x, data.edge_index``, or what a
    heterogeneous model reads."""
    return data.inputs if isinstance(data, HeteroTask) else (data.x, data.edge_index)


def _logits(data: Any, out: Any) -> Any:
    """The logits the loss reads of the model's output ``out``: all of it,
    or a heterogeneous graph's labelled type."""
    return data.logits(out) if isinstance(data, HeteroTask) else out


def _check_data(data: Any) -> None:
    keys = data_keys(data)
    missing = [k for k in ("x", "y", "edge_index", "train_mask") if k not in keys]
    if missing:
        raise ValueError(
            f"'train' needs data.{', data.'.join(missing)}; partition a graph that has them "
            f"(node features 'x', labels 'y' and a boolean 'train_mask')"
        )


#: What an epoch's ledger books (its keys) into :class:`EpochStats` fields,
#: summed over ranks (bytes) or averaged (seconds).
_BOOKED = {"bytes_fwd": "halo_bytes_fwd", "bytes_bwd": "halo_bytes_bwd",
           "bytes_eval": "halo_bytes_eval", "seconds": "comm_seconds",
           "overlapped": "overlapped_seconds", "bytes_grad": "grad_bytes",
           "seconds_grad": "grad_seconds", "seconds_regroup": "regroup_seconds",
           "bytes_stage": "stage_bytes", "seconds_stage": "stage_seconds"}
_TIMED = ("train_seconds", "forward_seconds", "eval_seconds")


def _epoch_totals(ledger: Any, step: int, times: tuple[float, float, float]) -> dict[str, Any]:
    """The :class:`EpochStats` fields of ``step`` from the ledger and this
    rank's ``times`` (training step, its forward, evaluation), in one
    all-reduce: halo bytes sent forward, backward and in evaluation (all
    ranks); blocked and overlapped halo seconds (average rank); the gradient
    all-reduce's bytes (all ranks) and wait (average rank); regrouping seconds
    (average rank); stage-boundary bytes (all ranks) and wait (average rank)
    of a layer pipeline; and the average rank's times."""
    totals = ledger.totals(step) if ledger is not None else {}
    values = [float(totals.get(k, 0.0)) for k in _BOOKED] + list(times)
    stats = distributed.all_reduce_values(values) if ledger is not None else values
    ranks = distributed.world_size() if ledger is not None else 1
    out: dict[str, Any] = {}
    for name, value in zip([*_BOOKED.values(), *_TIMED], stats):
        out[name] = int(value) if "bytes" in name else value / ranks
    return out


def _progress(total: int, done: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, desc="train", unit="epoch", dynamic_ncols=True)
