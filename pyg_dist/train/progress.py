"""What a person reads while :func:`~pyg_dist.train.train` runs and after:
rank 0's progress bar, the lines written above it, and the run's summary.

The bar owns its line: :func:`write` prints a line above it (as tqdm's
``write`` does), so logs never land on the bar. Where the bar's stream is
no terminal (a file, a pipe, a notebook), no ``\r`` redraws go there: a
plain line of the same figures every tenth of the run, and at its end. Its estimate of the time
left counts the epochs after the first only: the first holds one-time costs
(the C++ kernels' compile on first use, caches filling), and a rate that
includes them predicts hours for a run of a minute. The kernels are loaded
before the bar is drawn, so their compile is announced on a line of its own.
"""
from __future__ import annotations

import io
import os
import stat
import sys
import threading
import time
from typing import Any

import torch
from tqdm.std import tqdm

from pyg_dist.ops.backends import resolve_name
from pyg_dist.runtime import distributed

__all__ = ["Progress", "load_kernels", "start_progress", "write", "summary_lines",
           "metric_name", "destination"]


class _Bar(tqdm):
    """A tqdm bar whose rate is :attr:`steady_rate`, not the average since the
    start (0 shows as ``?``: not known yet)."""

    steady_rate: float = 0.0

    @property
    def format_dict(self) -> dict[str, Any]:
        values = super().format_dict
        values["rate"] = self.steady_rate
        return values


# Ranks are processes of their own: the bar needs no lock between processes,
# and tqdm's default one is a semaphore that a rank stopped by its launcher
# leaves to the resource tracker ("leaked semaphore objects" at exit).
_Bar.set_lock(threading.RLock())


class _Discard(io.TextIOBase):
    """Where a plain progress's bar draws: nowhere."""

    def write(self, text: str) -> int:
        return len(text)


#: A plain progress line: the bar's figures without the bar.
PLAIN_FORMAT = "{desc}: {n_fmt}/{total_fmt} epochs [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
#: A plain progress prints a line each time the run passes another 1/PLAIN_STEPS of it.
PLAIN_STEPS = 10


class Progress:
    """Rank 0's bar over ``total`` epochs, ``done`` of which a resumed run has
    behind it; plain lines where ``file`` is no terminal.

    Args:
        total (int): The epochs of the run.
        done (int, optional): Epochs already trained. (default: :obj:`0`)
        file (file, optional): Where the bar goes. (default: :obj:`sys.stderr`)
        plain (bool, optional): Print a plain line every tenth of the run
            instead of redrawing a bar; :obj:`None` does where ``file`` is no
            terminal. (default: :obj:`None`)
    """

    def __init__(self, total: int, done: int = 0, file: Any = None,
                 plain: bool | None = None) -> None:
        self.file = file or sys.stderr
        self.plain = not _is_terminal(self.file) if plain is None else plain
        self.bar = _Bar(total=total, initial=done, desc="train", unit="epoch",
                        dynamic_ncols=True, smoothing=0,
                        file=_Discard() if self.plain else self.file,
                        bar_format=PLAIN_FORMAT if self.plain else None)
        self._after_first: tuple[int, float] | None = None
        self._said = done

    def update(self, stats: Any, halo_bytes: int) -> None:
        """Advances the bar by the epoch ``stats`` (an
        :class:`~pyg_dist.train.EpochStats`), with ``halo_bytes`` sent so far."""
        bar = self.bar
        now = time.perf_counter()
        if self._after_first is None:  # the first epoch: its end starts the clock
            self._after_first = (bar.n + 1, now)
        else:
            count, start = self._after_first
            bar.steady_rate = (bar.n + 1 - count) / max(now - start, 1e-9)
        bar.set_postfix_str(f"loss {stats.loss:.4f}  val {stats.val_acc:.3f}  "
                            f"test {stats.test_acc:.3f}  halo {halo_bytes / 1e6:.1f} MB",
                            refresh=False)
        bar.update(1)
        total = bar.total or 1
        if self.plain and bar.n * PLAIN_STEPS // total > self._said * PLAIN_STEPS // total:
            self._say()

    def close(self) -> None:
        if self.plain and self.bar.n != self._said:  # a run stopped early
            self._say()
        self.bar.close()

    def _say(self) -> None:
        print(str(self.bar), file=self.file, flush=True)
        self._said = self.bar.n


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed, or no stream at all
        return False


def load_kernels(model: torch.nn.Module) -> None:
    """Loads the kernels the model's device runs: a first use may compile
    them (a minute, announced on a line of its own). Every rank calls it
    before the training clock starts, so no compile counts as training.

    Args:
        model (torch.nn.Module): The model, on its device.
    """
    parameter = next(iter(model.parameters()), None)
    resolve_name(None, parameter.device.type if parameter is not None else "cpu")


def start_progress(model: torch.nn.Module, total: int, done: int = 0) -> Progress | None:
    """Loads the kernels (:func:`load_kernels`), then, on rank 0, draws the bar.

    Args:
        model (torch.nn.Module): The model, on its device.
        total (int): The epochs of the run.
        done (int, optional): Epochs already trained. (default: :obj:`0`)
    """
    load_kernels(model)
    return Progress(total, done) if distributed.rank() == 0 else None


def write(message: str) -> None:
    """Prints a line on stderr above the bar, which is drawn again below it.

    Args:
        message (str): The line.
    """
    _Bar.write(message + "\n", file=sys.stderr, end="")  # the line and its end in one write


def destination(stream: Any = None) -> str:
    """Where ``stream`` goes, in words: a file's path, the terminal, a pipe.

    Args:
        stream (file, optional): The stream. (default: :obj:`sys.stdout`)
    """
    stream = stream or sys.stdout
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return "stdout"
    if os.isatty(fd):
        return "stdout (the line above)"
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
            if os.path.isabs(path):
                return _short(path)
        except OSError:
            pass
        return "stdout (a file)"
    if stat.S_ISFIFO(mode):
        return "stdout (a pipe)"
    return "stdout"


def _short(path: str) -> str:
    """``path`` relative to the working folder when it lies inside it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def summary_lines(line: dict[str, Any], json_to: str) -> list[str]:
    """A run's summary in words: the best validation accuracy and its epoch,
    the test accuracy at that epoch (the one reported, so that the test set
    picks nothing) and the last epoch's, the time, the bytes, and where the
    JSON line went.

    Args:
        line (dict): The run's JSON line: the keys of
            :meth:`~pyg_dist.train.TrainResult.summary` (``seconds``: the
            whole command's), ``parts``, and ``training_seconds`` and
            ``final_test_acc`` (the last epoch's) when known.
        json_to (str): Where the JSON line went (:func:`destination`).
    """
    best, epochs = line["best_epoch"], line["epochs"]
    metric = metric_name(line.get("metric", "auc" if "val_auc" in line else "accuracy"))
    training = line.get("training_seconds")
    took = _duration(line["seconds"]) + (
        f", training {_duration(training)}" if training is not None else "")
    lines = [f"done: {epochs} epochs on {line['parts']} ranks in {took} "
             f"({_STOPPED.get(line['stopped'], 'stopped: ' + str(line['stopped']))})",
             f"best validation {metric} {line['val_acc']:.4f} at epoch {best}"]
    final = line.get("final_test_acc")
    last = (f" (the last epoch, {epochs}, had {final:.4f})"
            if final is not None and best != epochs else "")
    lines.append(f"test {metric} at the best validation epoch ({best}): "
                 f"{line['test_acc']:.4f}{last}")
    lines.append(f"sent by all ranks: {_bytes(line['halo_bytes'])} of halo rows (training "
                 f"{_bytes(line['halo_bytes_fwd'] + line['halo_bytes_bwd'])}, evaluation "
                 f"{_bytes(line['halo_bytes_eval'])}) and {_bytes(line['grad_bytes'])} of "
                 f"gradients")
    lines.append(f"the JSON line went to {json_to}; 'pyg-dist train --config FILE' "
                 f"reruns the job it holds")
    return lines


def metric_name(metric: str) -> str:
    """A run's metric as a sentence names it: ``"AUC"``, ``"MRR"``,
    ``"Hits@50"``, ``"recall@20"``, ``"accuracy"``.

    Args:
        metric (str): The metric as the JSON line's ``metric`` spells it
            (:class:`~pyg_dist.strategies.link_task.LinkTask`'s).
    """
    if metric in ("auc", "mrr"):
        return metric.upper()
    return "Hits" + metric[4:] if metric.startswith("hits@") else metric


_STOPPED = {"epochs": "all epochs trained", "target": "target accuracy reached",
            "patience": "no better validation accuracy for --patience evaluations",
            "time_budget": "time budget spent"}


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def _bytes(count: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{int(count)} B"
