"""Stopping training on a scheduler's signal, with nothing lost.

SIGTERM (a preemption, ``scancel``, the end of a time limit, torchrun
shutting its workers down) and SIGUSR1 (what SLURM's ``--signal=USR1@T``
sends ``T`` seconds before the time limit) no longer end a rank at once
while :func:`~pyg_dist.train.train` runs: the rank notes the signal and
finishes the step it is in; the ranks agree on the stop through the
all-reduce every epoch already does, so all stop after the same epoch and
none waits for a timeout; each saves its checkpoint of that epoch (when
checkpoints are configured); rank 0 prints one line saying how to resume,
and every rank raises :class:`Preempted`, which ends the process with
status :data:`PREEMPTED` unless caught. A signal in the epoch the run ends
on anyway (its last, or the one a stop rule ends it after) stops it the
same way: saved, and :class:`Preempted` instead of a normal return (so
nothing that follows training, post-processing say, starts). Before the
first epoch of a run has ended (loading, the kernels' first build, the
planner's probe) there is nothing to save: a signal raises
:class:`Preempted` at once, within seconds. Ctrl-C (SIGINT) still stops at
once, with :class:`KeyboardInterrupt`.
"""
from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

__all__ = ["Preempted", "StopSignals", "PREEMPTED", "SIGNALS"]

#: The exit status of a run stopped by a signal after saving what it had:
#: ``EX_TEMPFAIL`` of ``sysexits.h``, "try again later".
PREEMPTED = 75
#: The signals that stop training after the current step.
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class Preempted(SystemExit):
    """Training stopped on a signal after ``epoch``, on every rank, having
    saved that epoch's checkpoint when ``saved``. A :class:`SystemExit`
    whose ``code`` is :data:`PREEMPTED`: uncaught, the process exits with
    that status (without a traceback; rank 0 has printed how to resume).

    Args:
        message (str): What happened and how to resume.
        epoch (int): The last epoch trained.
        saved (bool): Whether every rank saved its checkpoint of ``epoch``.
    """

    def __init__(self, message: str, epoch: int, saved: bool) -> None:
        super().__init__(PREEMPTED)
        self.message, self.epoch, self.saved = message, epoch, saved

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> Any:  # pickled with its fields (pyg_dist.launch sends it back)
        return type(self), (self.message, self.epoch, self.saved)


class StopSignals:
    """While entered, :data:`SIGNALS` stop the run (on the main thread only,
    where Python runs signal handlers; a signal that is ignored stays
    ignored); the previous handlers come back on exit. Until
    :meth:`training` a signal raises :class:`Preempted` at once (nothing
    to save yet); from then on it is noted, and :meth:`flags` gives, per
    signal, whether it arrived: the values the ranks sum in the epoch's
    all-reduce.

    Args:
        epoch (int, optional): The last epoch trained before this run (a
            resumed checkpoint's), named by a stop before training.
            (default: :obj:`0`)
    """

    def __init__(self, epoch: int = 0) -> None:
        self.received: set[int] = set()
        self.epoch = epoch
        self.at_once = True
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def install(self) -> StopSignals:
        """Notes :data:`SIGNALS` from now on (what entering does)."""
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self._previous[sig] = signal.signal(sig, self._note)
        return self

    def restore(self) -> None:
        """Puts the previous handlers back (what leaving does)."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def training(self) -> None:
        """From now on a signal is noted, to stop after the epoch it arrives in."""
        self.at_once = False

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.received.add(signum)
        if self.at_once:
            raise Preempted(early_message(signal.Signals(signum), self.epoch), self.epoch, False)

    def flags(self) -> list[float]:
        """1.0 for each of :data:`SIGNALS` this rank received, else 0.0."""
        return [float(sig in self.received) for sig in SIGNALS]


def early_message(sig: signal.Signals, epoch: int) -> str:
    """The line of a stop before a run's first epoch ended.

    Args:
        sig (signal.Signals): The signal.
        epoch (int): The last epoch trained before the run (0: none).
    """
    where = ("before any epoch was trained" if epoch == 0
             else f"before training on from the checkpoint of epoch {epoch}")
    return (f"pyg_dist: stopped by {sig.name} {where} (loading, the kernels' first build or "
            f"the planner's probe): nothing new to save; run the same command again to start "
            f"{'over' if epoch == 0 else 'from that checkpoint (with --resume)'}")


def stop_message(counts: list[float], world: int, epoch: int, epochs: int,
                 folder: str | None) -> str:
    """Rank 0's line: which signal reached how many ranks, the epoch every
    rank finished, and what was saved and how to resume.

    Args:
        counts (list[float]): Ranks that received each of :data:`SIGNALS`.
        world (int): Number of ranks.
        epoch (int): The last epoch trained.
        epochs (int): The epochs the run was to train.
        folder (str, optional): The checkpoint folder; :obj:`None` when
            checkpoints are not configured.
    """
    names = " and ".join(f"{sig.name} (to {int(n)} of {world} rank{'s' if world > 1 else ''})"
                         for sig, n in zip(SIGNALS, counts) if n)
    head = f"pyg_dist: stopped by {names} after epoch {epoch} of {epochs}"
    if folder is None:
        return (f"{head}; no checkpoint is configured, so nothing was saved and a rerun starts "
                f"at epoch 1: give the run a checkpoint folder (pyg-dist train --checkpoint DIR; "
                f"Python: checkpoint=Checkpoint(DIR)) to resume after a stop")
    return (f"{head}; every rank saved its checkpoint of epoch {epoch} in '{folder}': to "
            f"resume, run the same command with --resume (Python: Checkpoint('{folder}', "
            f"resume=True))")
