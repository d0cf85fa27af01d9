r"""What :func:`pyg_dist.train.train` and ``pyg-dist train`` are told, as typed
option objects: one training strategy and the settings every strategy shares.

======================================  ==========================================
strategy                                what crosses the network each step
======================================  ==========================================
:class:`GraphParallel` (the default)    halo rows and their gradients, under a
                                        halo policy; the parameter gradients
:class:`GradientOnly`                   the parameter gradients alone: each rank
                                        trains on a group of clusters, regrouped
                                        every few epochs
:class:`LayerPipeline`                  activations between layer stages and
                                        halo rows within a stage (deep models)
:class:`Planned` (``"auto"``)           what the strategy it chooses sends: the
                                        fastest predicted at the accepted risk
:class:`FeatureParallel`                feature slices of halo rows among a
                                        slice's ranks; all-to-alls between column
                                        slices and row blocks among a part's ranks
:class:`Grid3D`                         partial sums of node-matrix blocks along
                                        one axis of an X x Y x Z grid per
                                        aggregation and per transform
======================================  ==========================================

Each strategy is one file of :mod:`pyg_dist.strategies`, re-exported here.
Beside the strategy: :class:`GradSync` (how gradients are summed),
:class:`Adam` (the default optimizer's settings and its :class:`LRSchedule`),
:class:`Evaluation` (when to evaluate, and when to stop) and
:class:`Checkpoint`. Each object checks its own fields when it is made, with
an error that names the fix, and reads and writes itself as a dictionary of
plain values (:meth:`Options.to_dict`, :meth:`Options.from_dict`), which is
also what ``pyg-dist train --config FILE`` reads. The command line is built
from the same fields: their ``help`` metadata is the one description of each
option.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from torch.optim import lr_scheduler

from pyg_dist.strategies import (
    RISKS,
    STRATEGIES,
    Checkpoint,
    Evaluation,
    FeatureParallel,
    GradientOnly,
    GradSync,
    GraphParallel,
    Grid3D,
    LayerPipeline,
    Planned,
    strategy_from_dict,
)
from pyg_dist.strategies.graph_parallel import parse_phases
from pyg_dist.strategies.options import (
    Options,
    as_policy,
    check_choice,
    check_int,
    is_number,
    option,
)
from pyg_dist.strategies.settings import STOPS

__all__ = ["Options", "GraphParallel", "GradientOnly", "LayerPipeline", "Planned",
           "FeatureParallel", "Grid3D", "RISKS",
           "GradSync",
           "Adam", "LRSchedule", "Evaluation", "Checkpoint", "STRATEGIES", "SCHEDULES", "STOPS",
           "option", "strategy_from_dict", "parse_phases", "as_policy"]


#: Learning-rate schedules of :class:`LRSchedule`.
SCHEDULES = ("constant", "cosine", "plateau")


@dataclass(frozen=True)
class LRSchedule(Options):
    """A learning-rate schedule, built on :mod:`torch.optim.lr_scheduler` for
    the optimizer :func:`~pyg_dist.train.train` makes; spelled
    ``KIND[,KEY=VALUE...]`` on the command line (``"cosine,warmup=10"``).

    Args:
        kind (str, optional): ``"constant"``, ``"cosine"`` (annealed to
            ``min_lr`` at the last epoch) or ``"plateau"`` (the rate times
            ``factor`` after ``patience`` evaluations without a better
            validation accuracy). (default: :obj:`"constant"`)
        warmup (int, optional): Epochs of linear warm-up from
            ``lr / (warmup + 1)`` (not with ``"plateau"``). (default: :obj:`0`)
        min_lr (float, optional): The lowest rate. (default: :obj:`0.0`)
        factor (float, optional): ``"plateau"``'s factor. (default: :obj:`0.5`)
        patience (int, optional): ``"plateau"``'s evaluations to wait.
            (default: :obj:`10`)
    """

    kind: str = "constant"
    warmup: int = 0
    min_lr: float = 0.0
    factor: float = 0.5
    patience: int = 10

    def check(self) -> None:
        cls = type(self)
        check_choice(cls, "kind", self.kind, SCHEDULES)
        check_int(cls, "warmup", self.warmup, 0, "it counts epochs")
        check_int(cls, "patience", self.patience, 0, "it counts evaluations")
        if self.kind == "plateau" and self.warmup:
            raise ValueError("LRSchedule('plateau', warmup=...): a plateau schedule takes no "
                             "warm-up; use 'cosine,warmup=N' or 'constant,warmup=N'")
        if not is_number(self.min_lr) or self.min_lr < 0:
            raise ValueError(f"LRSchedule(min_lr={self.min_lr!r}): use a rate >= 0")
        if not is_number(self.factor) or not 0 < self.factor < 1:
            raise ValueError(f"LRSchedule(factor={self.factor!r}): use a factor in (0, 1)")

    @classmethod
    def parse(cls, spec: str) -> LRSchedule:
        """The schedule ``"KIND[,KEY=VALUE...]"`` spells (:meth:`spec` reversed)."""
        kind, *pairs = [p.strip() for p in spec.split(",")]
        kinds = {f.name: f.type for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {"kind": kind}
        for pair in pairs:
            key, eq, text = pair.partition("=")
            if not eq or key not in kinds or key == "kind":
                raise ValueError(f"bad learning-rate schedule '{spec}': '{pair}' is not "
                                 f"KEY=VALUE with KEY one of warmup, min_lr, factor, patience")
            try:
                values[key] = int(text) if kinds[key] == "int" else float(text)
            except ValueError:
                raise ValueError(f"bad learning-rate schedule '{spec}': {key} takes a "
                                 f"number, got '{text}'") from None
        return cls(**values)

    def spec(self) -> str:
        """``"KIND[,KEY=VALUE...]"`` with the fields that differ from the defaults."""
        base = LRSchedule()
        return ",".join([self.kind, *(f"{f.name}={getattr(self, f.name)}"
                                      for f in dataclasses.fields(self)
                                      if f.name != "kind"
                                      and getattr(self, f.name) != getattr(base, f.name))])

    def build(self, optimizer: Any, epochs: int) -> Any:
        """The :mod:`torch.optim.lr_scheduler` object of this schedule for
        ``optimizer`` over ``epochs`` steps (:obj:`None` for a constant rate)."""
        if self.kind == "plateau":
            return lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=self.factor,
                                                  patience=self.patience, min_lr=self.min_lr)
        warm = (lr_scheduler.LinearLR(optimizer, start_factor=1.0 / (self.warmup + 1),
                                      total_iters=self.warmup) if self.warmup else None)
        if self.kind == "constant":
            return warm
        cosine = lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, epochs - self.warmup),
                                                eta_min=self.min_lr)
        if warm is None:
            return cosine
        return lr_scheduler.SequentialLR(optimizer, [warm, cosine], milestones=[self.warmup])


def _schedule(value: Any) -> Any:
    """A schedule from a schedule or its spelling; raises naming the fix."""
    if value is None or isinstance(value, LRSchedule):
        return value
    if isinstance(value, str):
        try:
            return LRSchedule.parse(value)
        except ValueError as exc:
            raise ValueError(f"Adam(schedule={value!r}): {exc}") from None
    if isinstance(value, dict):
        try:
            return LRSchedule.from_dict(value)
        except ValueError as exc:
            raise ValueError(f"Adam(schedule={value!r}): {exc}") from None
    raise ValueError(f"Adam(schedule={value!r}): give an LRSchedule or its spelling, e.g. "
                     f"'cosine,warmup=10' or 'plateau,factor=0.5'")


@dataclass(frozen=True)
class Adam(Options):
    """The default optimizer, :class:`torch.optim.Adam` with these settings
    (``train`` also takes any :class:`torch.optim.Optimizer` instead, alone or
    with its scheduler as a pair).

    Args:
        lr (float, optional): Learning rate. (default: :obj:`0.01`)
        weight_decay (float, optional): L2 weight decay. (default: :obj:`5e-4`)
        schedule (LRSchedule or str, optional): The learning rate over the
            epochs, or its spelling (``"cosine,warmup=10"``); :obj:`None` is
            constant. (default: :obj:`None`)
    """

    lr: float = option(0.01, "Adam's learning rate", metavar="LR")
    weight_decay: float = option(5e-4, "weight decay", metavar="WD")
    schedule: LRSchedule | str | None = option(
        None, f"{'|'.join(SCHEDULES)}[,warmup=N,...]", type=str, metavar="SPEC")

    def check(self) -> None:
        for name in ("lr", "weight_decay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"Adam({name}={value!r}): use a number >= 0")
        if self.lr == 0:
            raise ValueError("Adam(lr=0): a learning rate of 0 never changes the weights; use "
                             "a rate > 0 (--lr 0.01), or leave it out for the model's own")
        object.__setattr__(self, "schedule", _schedule(self.schedule))

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        schedule = self.schedule
        out["schedule"] = schedule.spec() if isinstance(schedule, LRSchedule) else schedule
        return out
