"""The strategy the planner chooses (``strategy="auto"``): a short probe on
the ranks, every registered strategy's predictions, and the fastest at the
accepted accuracy risk trains (:mod:`pyg_dist.strategies.planner`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from torch import nn

from pyg_dist.strategies import planner
from pyg_dist.strategies.base import STRATEGIES, Runner, Strategy
from pyg_dist.strategies.cost import RISKS
from pyg_dist.strategies.gradient_only.strategy import DEFAULT_CLUSTERS
from pyg_dist.strategies.options import check_choice, check_int, option
from pyg_dist.strategies.settings import GradSync, Settings
from pyg_dist.strategies.task import Task

__all__ = ["Planned"]


@dataclass(frozen=True)
class Planned(Strategy):
    """The strategy chosen at the start of training (``strategy="auto"``):
    a short probe measures compute, the link and the traffic, every
    strategy's epoch time and bytes are predicted, and the fastest whose
    accuracy risk is ``accept`` or below trains (see
    :mod:`pyg_dist.strategies.planner`). For link prediction it ranks the
    strategies that train edges, with the gather's bytes of every planned
    epoch worked out exactly. The gradient sum given wins over the
    plan's unless it is the default. The run's result carries the prediction
    beside what was measured. In one process there is nothing to choose: it
    trains graph parallel.

    Args:
        accept (str, optional): The accuracy risk accepted: ``"exact"`` (the
            steps of single-process training), ``"compressed"`` (lossy
            compression of halo rows or gradients), ``"stale"`` (halo rows a
            few steps old) or ``"approximate"`` (edges dropped: sampling,
            isolation, gradient-only training on a folder with clusters).
            (default: :obj:`"exact"`)
        probe_steps (int, optional): Training steps the probe measures
            (the parameters are left as they were). (default: :obj:`3`)
    """

    name: ClassVar[str] = "auto"
    summary: ClassVar[str] = "chosen by a probe and predictions"
    labels_refusal: ClassVar[str] = "its probe runs the model on the graph's features alone"
    links_refusal: ClassVar[str] = ""
    accept: str = option("exact", "|".join(RISKS), choices=RISKS, metavar="RISK")
    probe_steps: int = option(3, "training steps the probe measures", metavar="N")

    def check(self) -> None:
        check_choice(type(self), "accept", self.accept, RISKS)
        check_int(type(self), "probe_steps", self.probe_steps, 1, "the probe measures steps")

    def clusters_per_part(self) -> int:
        # gradient-only training is a candidate when approximation is accepted
        return DEFAULT_CLUSTERS if self.accept == "approximate" else 1

    def continues(self, saved: Strategy) -> bool:
        return True  # a resumed run keeps the choice its checkpoint records

    def check_settings(self, settings: Settings) -> None:
        if settings.hetero:
            raise ValueError("'train' on a heterogeneous graph: strategy='auto' ranks "
                             "homogeneous strategies; let each layer choose its halo with "
                             "strategy=GraphParallel(halo='auto') (CLI: --halo auto)")
        super().check_settings(settings)

    def runner(self, model: nn.Module, task: Task, settings: Settings) -> Runner:
        if task.registry is None:  # one process: nothing to choose
            return STRATEGIES["graph-parallel"]().runner(model, task, settings)
        plan = planner.plan(model, task, settings.epochs, self.accept, self.probe_steps,
                            settings.evaluation.every)
        choice = plan.choice
        if settings.grad_sync == GradSync():
            settings = dataclasses.replace(settings, grad_sync=choice.grad_sync)
        choice.strategy.check_settings(settings)
        run = choice.strategy.runner(model, task, settings)
        run.plan = plan
        return run

