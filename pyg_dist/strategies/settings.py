"""What every strategy's run is told besides the strategy: how gradients are
summed (:class:`GradSync`), when to evaluate and stop (:class:`Evaluation`),
checkpoints (:class:`Checkpoint`), and all of them with the planned epochs and
the kind of graph as one :class:`Settings`."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from pyg_dist.grads.spec import GRAD_COMPRESS_CHOICES, parse_grad_compress
from pyg_dist.halo import HaloPolicy
from pyg_dist.strategies.options import (
    Options,
    check_int,
    check_policy,
    is_number,
    option,
)

__all__ = ["GradSync", "Evaluation", "Checkpoint", "STOPS", "Settings"]


@dataclass(frozen=True)
class GradSync(Options):
    """How the ranks sum parameter gradients.

    Args:
        compress (str, optional): :obj:`None` (one exact all-reduce after
            backward), ``"fp16"``, ``"powersgd:R"``, ``"covap:K"`` or
            ``"covap:auto"`` (DDP hooks overlapping with backward; see
            :mod:`pyg_dist.grads`). Booked as ``grad_bytes``. (default: :obj:`None`)
    """

    compress: str | None = option(None, "none|fp16|powersgd:R|covap:K|covap:auto",
                                  type=str, metavar="SPEC")

    def check(self) -> None:
        try:
            parse_grad_compress(self.compress)
        except (TypeError, ValueError) as exc:
            hint = "" if "; use " in str(exc) else f"; use {GRAD_COMPRESS_CHOICES}"
            raise ValueError(f"GradSync(compress={self.compress!r}): {exc}{hint}") from None

    @property
    def spec(self) -> str:
        """The compression's spelling (``"none"`` for an exact sum)."""
        parsed = parse_grad_compress(self.compress)
        return "none" if parsed is None else parsed.spec()



#: Why training stopped (``TrainResult.stopped``): the last epoch ran, the
#: target was reached, the patience or the time budget ran out.
STOPS = ("epochs", "target", "patience", "time_budget")


@dataclass(frozen=True)
class Evaluation(Options):
    """When and how the model is evaluated (global accuracies on the three
    masks), and the rules that stop training before its last epoch. Every rank
    takes the same decision: accuracies are global and the budget is checked
    on the slowest rank's clock.

    Args:
        every (int, optional): Evaluate every this many epochs (and after the
            last); epochs in between repeat the last accuracies and are not
            candidates for the best epoch. (default: :obj:`1`)
        halo (HaloPolicy or str, optional): Halo policy of evaluation (a
            policy or its spec); :obj:`None` is exact, whatever the training
            policy. Booked as ``halo_bytes_eval``. (default: :obj:`None`)
        target_acc (float, optional): Stop at the first evaluation whose
            validation accuracy reaches this, in (0, 1]. (default: :obj:`None`)
        patience (int, optional): Stop after this many evaluations in a row
            without a better validation accuracy. (default: :obj:`None`)
        time_budget (float, optional): Stop (after evaluating) at the end of
            the first epoch by which training has run this many seconds.
            (default: :obj:`None`)
        from_training (bool, optional): Take the accuracies from the training
            step's forward instead of a forward of their own: free, and
            honest only where the model computes the same in training as in
            evaluation (no dropout, no batch statistics) under exact halos,
            which :func:`~pyg_dist.train.train` checks at the first step. The
            accuracies of an epoch are then those of the weights it started
            from (one step behind). Graph-parallel training only.
            (default: :obj:`False`)
    """

    every: int = option(1, "evaluate every N epochs", metavar="N")
    halo: HaloPolicy | str | None = option(None, "policy of evaluation (default: exact)",
                                           type=str, metavar="POLICY")
    target_acc: float | None = option(None, "stop at this validation accuracy", type=float,
                                      metavar="A")
    patience: int | None = option(None, "stop after N evaluations without gain", type=int,
                                  metavar="N")
    time_budget: float | None = option(None, "stop after S seconds of training", type=float,
                                       metavar="S")
    from_training: bool = False

    def check(self) -> None:
        cls = type(self)
        check_int(cls, "every", self.every, 1, "1 evaluates after every epoch")
        check_policy(cls, "halo", self.halo)
        if self.target_acc is not None and (not is_number(self.target_acc)
                                            or not 0 < self.target_acc <= 1):
            raise ValueError(f"Evaluation(target_acc={self.target_acc!r}): an accuracy is a "
                             f"fraction in (0, 1], e.g. 0.72 for 72%")
        if self.patience is not None:
            check_int(cls, "patience", self.patience, 1, "or None to wait for the last epoch")
        if self.time_budget is not None and (not is_number(self.time_budget)
                                             or not self.time_budget > 0):
            raise ValueError(f"Evaluation(time_budget={self.time_budget!r}): give seconds > 0, "
                             f"or None for no budget")
        if not isinstance(self.from_training, bool):
            raise ValueError(f"Evaluation(from_training={self.from_training!r}): use True or "
                             f"False")
        if self.from_training and self.halo is not None:
            raise ValueError("Evaluation(from_training=True) takes the training step's "
                             "accuracies, under its exact halos; leave halo=None")

    @property
    def stops_early(self) -> bool:
        return (self.target_acc, self.patience, self.time_budget) != (None, None, None)


@dataclass(frozen=True)
class Checkpoint(Options):
    """Checkpoints of every rank's model, optimizer, halo and policy state,
    RNG state, ledger and history (see :mod:`pyg_dist.train.checkpoint`).

    Args:
        dir (str): The folder (each machine of a multi-host job writes its
            own ranks' files into its own).
        every (int, optional): Write one every this many epochs (0: never).
            (default: :obj:`0`)
        resume (bool, optional): Continue from the last checkpoint in ``dir``
            when there is one, else start at epoch 1 (so the first start and
            every restart share one command); deterministic policies then end
            with the weights of an uninterrupted run. (default: :obj:`False`)
        switch (bool, optional): Resume with the strategy, gradient sum and
            halo setup given even where they differ from the checkpoint's
            (which a resume otherwise refuses, naming both; the planner's
            ``"auto"`` continues the checkpoint's choice). (default: :obj:`False`)
    """

    dir: str | os.PathLike = option(None, "folder for checkpoints", type=str, metavar="DIR")
    every: int = option(0, "write one every N epochs (0: never)", metavar="N")
    resume: bool = option(False, "continue from the last one, if any")
    switch: bool = option(False, "resume with another strategy than the checkpoint's")

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values; ``switch`` only where set (a job that
        resumes as recorded is written as before it existed)."""
        out = super().to_dict()
        if not out["switch"]:
            del out["switch"]
        return out

    def check(self) -> None:
        if not isinstance(self.dir, (str, os.PathLike)) or not os.fspath(self.dir):
            raise ValueError(f"Checkpoint(dir={self.dir!r}): name the folder for checkpoints")
        check_int(type(self), "every", self.every, 0, "0 writes none")
        for name in ("resume", "switch"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Checkpoint({name}={getattr(self, name)!r}): use True or False")


@dataclass(frozen=True)
class Settings:
    """What a strategy's run shares with every other strategy's: the planned
    epochs, the gradient sum, evaluation, checkpoints, and whether the graph
    is heterogeneous and whether its model reads labels as input.
    :func:`~pyg_dist.train.train` makes one from its
    arguments and checks their types here, before any rank works.

    Args:
        epochs (int): Optimisation steps at most.
        grad_sync (GradSync, optional): How gradients are summed.
            (default: :obj:`GradSync()`)
        evaluation (Evaluation, optional): When and how to evaluate and stop.
            (default: :obj:`Evaluation()`)
        checkpoint (Checkpoint, optional): Where and how often to write
            checkpoints. (default: :obj:`None`)
        hetero (bool, optional): Whether the graph is heterogeneous.
            (default: :obj:`False`)
        labels_as_input (bool, optional): Whether the model reads labels as
            input (:class:`~pyg_dist.strategies.task.LabelTask`).
            (default: :obj:`False`)
        links (bool, optional): Whether the task is link prediction
            (:class:`~pyg_dist.strategies.link_task.LinkTask`). (default: :obj:`False`)
    """

    epochs: int
    grad_sync: GradSync = GradSync()
    evaluation: Evaluation = Evaluation()
    checkpoint: Checkpoint | None = None
    hetero: bool = False
    labels_as_input: bool = False
    links: bool = False

    def __post_init__(self) -> None:
        check_int(type(self), "epochs", self.epochs, 0, "it counts optimisation steps")
        expected = (("grad_sync", (GradSync,), "GradSync(compress=...)"),
                    ("evaluation", (Evaluation,), "Evaluation(every=..., halo=...)"),
                    ("checkpoint", (Checkpoint, type(None)),
                     "Checkpoint(dir, every=..., resume=...)"))
        for name, types, fix in expected:
            value = getattr(self, name)
            if not isinstance(value, types):
                raise TypeError(f"'train' got {name}={value!r}; pass {fix} from "
                                f"pyg_dist.config")
        if self.hetero and self.grad_sync.compress not in (None, "none"):
            raise ValueError(f"'train' on a heterogeneous graph sums plain gradients (got "
                             f"grad_sync={self.grad_sync}); leave grad_sync out (CLI: drop "
                             f"--grad-compress)")
