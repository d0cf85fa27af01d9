"""A short full-graph training loop whose steps equal single-process training:
the strategy's runner takes each step, the loop evaluates, books, checkpoints
and stops on rules every rank agrees on."""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.optim import lr_scheduler

from pyg_dist.config import Adam, Checkpoint, Evaluation, GradSync
from pyg_dist.metrics import accuracies, evaluate, global_loss
from pyg_dist.nn.drift import mark_summed
from pyg_dist.nn.owned import own_rows, owned_parameters
from pyg_dist.runtime import distributed
from pyg_dist.strategies import (
    Settings,
    Strategy,
    as_strategy,
    strategy_from_dict,
    train_step,
)
from pyg_dist.strategies.link_task import task_for
from pyg_dist.train.checkpoint import (
    find_checkpoint,
    load_checkpoint,
    restore_rng,
    save_checkpoint,
)
from pyg_dist.train.optim import make_optimizer
from pyg_dist.train.preemption import SIGNALS, Preempted, StopSignals, stop_message
from pyg_dist.train.progress import load_kernels, start_progress
from pyg_dist.train.result import EpochStats, TrainResult
from pyg_dist.train.stopping import StopRules
from pyg_dist.utils.memory import TRIM_EVERY, release_freed_memory

__all__ = ["train", "evaluate", "accuracies", "TrainResult", "EpochStats", "sync_parameters",
           "all_reduce_gradients", "global_loss", "halo_choices", "train_step"]

#: The clock of epoch times and the time budget (tests replace it).
_clock = time.perf_counter


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

    A graph that carries supervision edges (a partitioned link split; in one
    process ``RandomLinkSplit``'s three graphs), or ``data=LinkTask(...)``,
    trains link prediction (:class:`~pyg_dist.strategies.link_task.LinkTask`):
    the loss is the binary cross entropy of the edges and their negatives of
    all ranks, and the accuracies reported are ROC-AUCs.
    Rank 0 shows a progress bar (``pyg_dist.train.progress``; lines
    printed with ``pyg_dist.train.progress.write`` go above it), whose
    estimate of the time left leaves out the first epoch.

    On a heterogeneous graph, loss and accuracies are those of the one node
    type with labels ``y`` and a ``train_mask``; the model is called as
    ``model(data.x_dict, data.edge_index_dict)``, or, when its ``reads``
    attribute is :obj:`"homogeneous"` (:class:`~pyg_dist.models.hetero.RGCN`),
    on ``data.to_homogeneous()`` as ``model(x, edge_index, edge_type,
    node_type)``, and returns the labelled type's logits (or a dictionary
    holding them; see :class:`~pyg_dist.strategies.HeteroTask`). It trains
    graph parallel only, under any halo policy the model's layers take.

    Args:
        model (torch.nn.Module): Called as ``model(data.x, data.edge_index)``;
            returns class logits for the owned nodes.
        data: Needs ``x``, ``y``, ``edge_index`` and ``train_mask`` (``val_mask``
            and ``test_mask`` if present); a heterogeneous graph, ``x`` on
            every node type and ``y`` and ``train_mask`` on one.
        epochs (int, optional): Optimisation steps at most. (default: :obj:`200`)
        strategy (Strategy, optional): How the ranks share the work (one of
            :mod:`pyg_dist.strategies`, e.g. :class:`~pyg_dist.config.GraphParallel`);
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
            checkpoints, and whether to resume from the last. A checkpoint
            records the strategy, gradient sum and halo setup it trained
            with: a resume continues them (``"auto"`` continues its choice
            without probing again) and refuses others, naming both, unless
            ``Checkpoint(switch=True)``. (default: :obj:`None`)
        evaluation (Evaluation, optional): When and under which halo policy
            to evaluate, and when to stop early; :obj:`None` is every epoch,
            exactly, to the last epoch. (default: :obj:`None`)
        callback (Callable, optional): Called with every :class:`EpochStats`.
            (default: :obj:`None`)
        progress (bool, optional): Show progress on rank 0. (default: :obj:`True`)

    SIGTERM and SIGUSR1 (a preemption, SLURM's warning before the time
    limit) stop every rank after the same epoch, which the rank that got the
    signal finishes first, the last epoch included; each saves its
    checkpoint of that epoch when ``checkpoint`` is given, rank 0 prints how
    to resume, and every rank raises ``pyg_dist.train.preemption.Preempted``
    (exit status 75 when uncaught). Before the run's first epoch has ended
    (resuming, the planner's probe, the kernels' first build) there is
    nothing to save: a signal raises ``Preempted`` at once. An error one
    rank raises alone is left for the others, whose next collective then
    fails naming it (``pyg_dist.runtime.peers.PeerFailed``); what a run
    cleans up after an error is local, so no rank waits for the others.
    """
    task = task_for(data, model)
    graph: Any = getattr(task.data, "edge_index", None) if task.links else None
    if getattr(graph, "channel", None) is not None:  # each rank keeps its nodes' rows alone
        own_rows(model, graph.global_id)
    strategy = as_strategy(strategy)
    settings = Settings(epochs, grad_sync or GradSync(), evaluation or Evaluation(),
                        checkpoint, task.hetero, task.labels_as_input, task.links)
    strategy.check_settings(settings)
    optimizer, scheduler = make_optimizer(model, optimizer, epochs)
    run = _Run(model, optimizer, scheduler, settings)
    signals = StopSignals().install()
    distributed.forget_failure()
    try:
        sync_parameters(model)
        mark_summed(model)  # every strategy sums the gradients its layers need
        run.start(strategy, task)
        signals.epoch = run.result.epochs
        load_kernels(model)  # a compile on first use happens before the clock starts
        bar = start_progress(model, epochs, run.result.epochs) if progress else None
        run.start_clock()  # after any compile
        stopped, signalled, epoch, saved = None, [0.0] * len(SIGNALS), run.result.epochs, False
        for epoch in range(run.result.epochs + 1, epochs + 1):
            stats, signalled = run.epoch(epoch, signals.flags)
            signals.training()  # an epoch ended: a signal from now on stops after one
            stopped = run.rules.after(stats, run.result, run.elapsed) if stats.evaluated else None
            saved = run.save_if_due(epoch)
            if epoch % TRIM_EVERY == 0:  # resident memory stays what the run uses
                release_freed_memory()
            if bar is not None:
                bar.update(stats, run.result.halo_bytes)
            if callback is not None:
                run.doing = f"the callback after epoch {epoch}"
                callback(stats)
            if stopped is not None or any(signalled):
                break
        if bar is not None:
            bar.close()
        if not any(signalled):  # a signal in the epoch the run ended on stops it too
            signalled = run.signals_since(signals.flags())
        if any(signalled):  # the same epoch on every rank
            raise run.preempted(signalled, epoch, saved)
        run.result.stopped = stopped or run.result.stopped
        run.finish()
    except BaseException as exc:
        distributed.announce_failure(run.doing, exc)
        raise
    finally:
        signals.restore()
        run.close()
    return run.result


class _Run:
    """One call of :func:`train` on this rank: the runner, optimizer and
    schedule, the result so far, and each epoch's duties (the step,
    evaluation on the schedule, booking, the best epoch, checkpoints).
    ``doing`` names the duty under way, for the peers when it fails."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
                 settings: Settings) -> None:
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.settings, self.checkpoint = settings, settings.checkpoint
        self.plateau = isinstance(scheduler, lr_scheduler.ReduceLROnPlateau)
        self.runner: Any = None
        self.result = TrainResult()
        self.doing = "resuming"
        self.elapsed = self.started = 0.0

    def start(self, strategy: Strategy, task: Any) -> None:
        """Loads the checkpoint to resume from, if any; makes the runner of
        ``strategy`` (the checkpoint's, where the run continues one) and
        restores its state. Collective."""
        saved = _load(self.checkpoint, self.model, self.optimizer)
        if saved is not None:
            strategy, self.settings = _continued(strategy, self.settings, saved,
                                                 self.checkpoint)
        self.doing = "starting the run"
        self.runner = strategy.runner(self.model, task, self.settings)
        if saved is not None:
            _check_setup(self.runner, saved, self.checkpoint)
            self.runner.load_state_dict(saved["runner"])
            if self.scheduler is not None and saved.get("schedule") is not None:
                self.scheduler.load_state_dict(saved["schedule"])
            self.result = TrainResult.from_state(saved)
            restore_rng(saved["rng"])
        self.rules = StopRules(self.settings.evaluation, self.result)
        self.accs = self.result.last_accuracies

    def start_clock(self) -> None:
        """Starts the training clock (a resumed run's seconds already on it)."""
        self.started = _clock() - self.result.seconds

    def epoch(self, epoch: int, signals: Callable[[], list[float]]
              ) -> tuple[EpochStats, list[float]]:
        """Trains epoch ``epoch``, evaluates it when due, books it; returns
        its stats and every rank's count of each stop signal ``signals()``
        notes by the epoch's end. Collective."""
        runner, ledger, result = self.runner, self.runner.ledger, self.result
        epoch_start = _clock()
        booked = ledger.step if ledger is not None else 0
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.doing = f"the training step of epoch {epoch}"
        step = runner.step(epoch, self.optimizer)
        if self.scheduler is not None and not self.plateau:
            self.scheduler.step()
        trained = _clock()
        self.elapsed = self.rules.elapsed(trained - self.started)  # the same on every rank
        evaluated = (epoch % self.settings.evaluation.every == 0 or epoch == self.settings.epochs
                     or self.rules.over_budget(self.elapsed))
        if evaluated:
            self.doing = f"the evaluation after epoch {epoch}"
            self.accs = runner.evaluate(step)
            if self.plateau:
                self.scheduler.step(self.accs[1])
        times = (trained - epoch_start, step.forward_seconds, _clock() - trained)
        totals, signalled = _epoch_totals(ledger, booked, times, signals())
        if ledger is not None:
            ledger.next_step()
        stats = EpochStats(epoch, step.loss, *self.accs, seconds=_clock() - epoch_start,
                           evaluated=evaluated, lr=lr, **totals)
        result.history.append(stats)
        result.record_best(stats, self.model)
        result.seconds = _clock() - self.started
        return stats, signalled

    def save_if_due(self, epoch: int) -> bool:
        """Saves the checkpoint of ``epoch`` when one is due; returns whether
        it did. Collective."""
        due = self.checkpoint is not None and self.checkpoint.every > 0 \
            and epoch % self.checkpoint.every == 0
        if due:
            self.save(epoch)
        return due

    def save(self, epoch: int) -> None:
        """Saves the checkpoint of ``epoch``: the model, optimizer, schedule,
        result so far and what the runner gives to keep. Collective."""
        assert self.checkpoint is not None, "saved only when checkpoints are configured"
        self.doing = f"saving the checkpoint of epoch {epoch}"
        schedule = self.scheduler.state_dict() if self.scheduler is not None else None
        save_checkpoint(self.checkpoint.dir, epoch, self.model, self.optimizer,
                        extra={**self.result.state_dict(), "runner": self.runner.state_dict(),
                               "schedule": schedule})

    def signals_since(self, signals: list[float]) -> list[float]:
        """Every rank's count of each stop signal that came after the last
        epoch's all-reduce. Collective."""
        self.doing = "ending the run"
        return distributed.all_reduce_values(signals)

    def preempted(self, signalled: list[float], epoch: int, saved: bool) -> Preempted:
        """The stop every rank agreed on after ``epoch``, its checkpoint
        saved (when configured); rank 0 says what was saved and how to resume."""
        if self.checkpoint is not None and not saved:
            self.save(epoch)
        folder = os.fspath(self.checkpoint.dir) if self.checkpoint is not None else None
        message = stop_message(signalled, distributed.world_size(), epoch,
                               self.settings.epochs, folder)
        if distributed.rank() == 0:
            print(message, file=sys.stderr, flush=True)
        return Preempted(message, epoch, self.checkpoint is not None)

    def finish(self) -> None:
        """After the last epoch: the runner's end, how it trained, what
        self-choosing policies and the plan chose beside what was measured.
        Collective."""
        self.doing = "finishing the run"
        self.runner.finish()
        result, ledger = self.result, self.runner.ledger
        result.setup = self.runner.describe()
        if ledger is not None:
            result.halo_choices = halo_choices(ledger, result.history)
        plan = self.runner.plan_summary()
        if plan is not None:
            result.plan = {**plan, **_measured(result)}

    def close(self) -> None:
        """Gives the graph back its settings; local."""
        if self.runner is not None:
            self.runner.close()


def _load(checkpoint: Checkpoint | None, model: nn.Module,
          optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
    """The checkpoint's saved run (the model and optimizer restored from it)
    when the checkpoint resumes and one is there; else :obj:`None`.
    Collective."""
    if checkpoint is None or not checkpoint.resume:
        return None
    epoch = find_checkpoint(checkpoint.dir)
    if distributed.rank() == 0:
        print(f"no checkpoint in '{os.fspath(checkpoint.dir)}' yet: starting at epoch 1"
              if epoch is None else f"resuming from the checkpoint of epoch {epoch} in "
              f"'{os.fspath(checkpoint.dir)}'", file=sys.stderr, flush=True)
    if epoch is None:
        return None
    return load_checkpoint(checkpoint.dir, model, optimizer)[1]


def _continued(strategy: Strategy, settings: Settings, saved: dict[str, Any],
               checkpoint: Any) -> tuple[Strategy, Settings]:
    """The strategy and settings a resumed run trains with: the
    checkpoint's, where ``strategy`` continues them (the same, or the
    planner, which keeps its choice); with ``Checkpoint(switch=True)`` the
    ones given; else an error naming both."""
    recorded = saved.get("runner", {})
    if "strategy" not in recorded:
        raise ValueError(f"the checkpoint in '{os.fspath(checkpoint.dir)}' records no "
                         f"strategy (train() did not write it); start without resume, or "
                         f"from another folder")
    was = strategy_from_dict(recorded["strategy"])
    grads = GradSync.from_dict(recorded["grad_sync"])
    if strategy.continues(was) and (settings.grad_sync in (GradSync(), grads)):
        return was, dataclasses.replace(settings, grad_sync=grads)
    if checkpoint.switch:
        return strategy, settings
    raise ValueError(f"the checkpoint in '{os.fspath(checkpoint.dir)}' was trained with "
                     f"strategy={was}, grad_sync={grads}; this run asks for "
                     f"strategy={strategy}, grad_sync={settings.grad_sync}; resume with the "
                     f"checkpoint's, or switch on purpose with Checkpoint(..., switch=True) "
                     f"(CLI: --switch-strategy)")


def _check_setup(runner: Any, saved: dict[str, Any], checkpoint: Any) -> None:
    """Refuses, naming both, a resumed run whose graph sets another halo
    policy for its layers than the checkpoint's graph did (the saved halo
    state is of the policies then), unless ``Checkpoint(switch=True)``."""
    was, now = saved["runner"].get("graph_halo"), runner.graph_halo
    if was != now and not checkpoint.switch:
        raise ValueError(f"the checkpoint in '{os.fspath(checkpoint.dir)}' was trained on a "
                         f"graph whose layers default to halo '{was}'; this run's graph "
                         f"defaults to '{now}'; load the graph as then (DistData.load(..., "
                         f"halo='{was}')), or switch on purpose with Checkpoint(..., "
                         f"switch=True) (CLI: --switch-strategy)")


def _measured(result: TrainResult) -> dict[str, Any]:
    """What a run measured, to set beside a plan's predictions: the median
    training step and the mean epoch after the first, and training bytes per
    epoch (all ranks)."""
    epochs = result.history[1:] or result.history
    steps = sorted(e.train_seconds for e in epochs)
    trained = sum(e.halo_bytes_fwd + e.halo_bytes_bwd + e.grad_bytes + e.all_to_all_bytes
                  + e.gather_bytes for e in result.history)
    return {"measured_step_s": round(steps[len(steps) // 2], 6) if steps else 0.0,
            "measured_epoch_s": round(sum(e.seconds for e in epochs) / max(len(epochs), 1), 6),
            "measured_bytes_per_epoch": int(trained / max(len(result.history), 1))}


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


def sync_parameters(model: nn.Module) -> None:
    """Copies rank 0's parameters and buffers to every rank, but for the
    rows each rank holds of its own nodes (:mod:`pyg_dist.nn.owned`).

    Args:
        model (torch.nn.Module): The model, built alike on every rank.
    """
    owned = owned_parameters(model)
    distributed.sync_tensors([*(p for p in model.parameters() if id(p) not in owned),
                              *model.buffers()])


def all_reduce_gradients(model: nn.Module) -> None:
    """Sums every parameter's gradient over the ranks, in one flat buffer.

    Args:
        model (torch.nn.Module): The model, after backward.
    """
    distributed.all_reduce_gradients(model.parameters())


_BOOKED = {"bytes_fwd": "halo_bytes_fwd", "bytes_bwd": "halo_bytes_bwd",
           "bytes_eval": "halo_bytes_eval", "seconds": "comm_seconds",
           "overlapped": "overlapped_seconds", "bytes_grad": "grad_bytes",
           "seconds_grad": "grad_seconds", "seconds_regroup": "regroup_seconds",
           "bytes_stage": "stage_bytes", "seconds_stage": "stage_seconds",
           "bytes_all_to_all": "all_to_all_bytes", "seconds_all_to_all": "all_to_all_seconds",
           "bytes_gather": "gather_bytes", "seconds_gather": "gather_seconds"}
_TIMED = ("train_seconds", "forward_seconds", "eval_seconds")


def _epoch_totals(ledger: Any, step: int, times: tuple[float, float, float],
                  signals: list[float]) -> tuple[dict[str, Any], list[float]]:
    """The :class:`EpochStats` fields of ``step`` from the ledger and this
    rank's ``times`` (training step, its forward, evaluation), in one
    all-reduce: halo bytes sent forward, backward and in evaluation (all
    ranks); blocked and overlapped halo seconds (average rank); the gradient
    all-reduce's bytes (all ranks) and wait (average rank); regrouping seconds
    (average rank); stage-boundary bytes (all ranks) and wait (average rank)
    of a layer pipeline; feature-parallel all-to-alls' bytes (all ranks) and
    wait (average rank); rows gathered by global id (a link task's pairs:
    bytes of all ranks, seconds of the average rank); and the average rank's
    times. The same all-reduce sums the stop ``signals`` (:meth:`StopSignals.flags`), so every rank
    learns of a signal any rank got after the same epoch; returned second."""
    totals = ledger.totals(step) if ledger is not None else {}
    values = [float(totals.get(k, 0.0)) for k in _BOOKED] + list(times) + list(signals)
    stats = distributed.all_reduce_values(values) if ledger is not None else values
    ranks = distributed.world_size() if ledger is not None else 1
    out: dict[str, Any] = {}
    for name, value in zip([*_BOOKED.values(), *_TIMED], stats):
        out[name] = int(value) if "bytes" in name else value / ranks
    return out, stats[len(stats) - len(signals):]
