"""A layer pipeline (GNNPipe) for deep models: the ranks form a grid of
graph parts × layer stages; activations cross between stages, halo rows
within a stage. The planner does not rank it: ``pyg-dist layouts`` weighs its
grids (:mod:`pyg_dist.strategies.layer_pipeline.cost`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from pyg_dist.halo import HaloPolicy
from pyg_dist.models.gnn import DEEP_MODELS
from pyg_dist.strategies.base import Runner, Step, Strategy
from pyg_dist.strategies.layer_pipeline.pipeline import INITIAL_ROWS, Pipeline, load
from pyg_dist.strategies.options import (
    as_policy,
    check_choice,
    check_int,
    check_policy,
    option,
)
from pyg_dist.strategies.settings import Settings
from pyg_dist.strategies.task import Task

__all__ = ["LayerPipeline"]


@dataclass(frozen=True)
class LayerPipeline(Strategy):
    """A layer pipeline for deep models (:class:`~pyg_dist.models.DeepGNN`):
    the ranks form a grid of world size / ``stages`` graph parts × ``stages``
    layer stages; ``data`` must be loaded with :func:`pyg_dist.strategies.layer_pipeline.load`
    (what its ``load`` hook does). It takes no gradient compression. Each rank's
    checkpoint holds its stage's parameters and optimizer state, the layers of
    each stage and its history tables, so a resumed pipeline trains on as the
    uninterrupted one.

    Args:
        stages (int, optional): Layer stages. (default: :obj:`2`)
        chunks (int, optional): Chunks per graph part flowing through the
            pipeline; above 1, layers read other chunks' rows from history
            tables (at most one epoch old). (default: :obj:`1`)
        initial_rows (str, optional): How later stages get GCNII's initial
            rows: ``"send"`` or ``"recompute"`` (half the bytes).
            (default: :obj:`"send"`)
        halo (HaloPolicy or str, optional): The policy within a stage (its
            compression applies to the rows exchanged there), as
            :class:`~pyg_dist.config.GraphParallel`'s. (default: :obj:`None`)
    """

    name: ClassVar[str] = "layer-pipeline"
    summary: ClassVar[str] = "deep models"
    hetero_refusal: ClassVar[str] = ("a layer pipeline splits a deep homogeneous model into "
                                     "stages")
    halo: HaloPolicy | str | None = option(None, "", type=str, metavar="POLICY")
    stages: int = option(2, "layer stages (grid: parts/S x S)", metavar="S")
    chunks: int = option(1, "chunks per part (>1: history tables)", metavar="K")
    initial_rows: str = option("send", f"initial rows: {'|'.join(INITIAL_ROWS)}",
                               choices=INITIAL_ROWS, metavar="HOW")

    def check(self) -> None:
        check_policy(type(self), "halo", self.halo)
        for name in ("stages", "chunks"):
            check_int(type(self), name, getattr(self, name), 1, "a pipeline has at least one")
        check_choice(type(self), "initial_rows", self.initial_rows, INITIAL_ROWS)

    def ranks_per_part(self) -> int:
        return self.stages

    def graph_parts(self, world_size: int) -> int:
        if world_size % self.stages:
            raise ValueError(f"--stages {self.stages} does not divide --parts {world_size} "
                             f"(the ranks); the graph is cut into parts / stages parts, so "
                             f"give a number of stages that divides the ranks")
        return world_size // self.stages

    def load(self, folder: Any) -> Any:
        return load(folder, self.stages)

    def check_model(self, kind: str, layers: int | None = None,
                    options: dict[str, Any] | None = None) -> None:
        if kind not in DEEP_MODELS:
            raise ValueError(f"--strategy layer-pipeline splits a deep model into stages; use "
                             f"--model {' | '.join(DEEP_MODELS)} (got --model {kind})")
        if layers is not None and layers < self.stages:
            raise ValueError(f"--layers {layers} cannot fill --stages {self.stages}; use at "
                             f"least as many layers as stages")

    def check_settings(self, settings: Settings) -> None:
        super().check_settings(settings)
        if settings.grad_sync.compress not in (None, "none"):
            raise ValueError(f"'train' with strategy={self} (a layer pipeline) does not take "
                             f"grad_sync compression; leave it out or train GraphParallel()")

    def runner(self, model: nn.Module, task: Task, settings: Settings) -> Runner:
        return _PipelineRun(self, model, task, settings)


class _PipelineRun(Runner):
    """A layer-pipeline run: the pipeline's own step (its stages sum their
    gradients) and evaluation; at the end every rank gets every stage's
    parameters."""

    def __init__(self, strategy: LayerPipeline, model: nn.Module, task: Task,
                 settings: Settings) -> None:
        super().__init__(strategy, model, task, settings, sync=False)
        if strategy.halo is not None and task.registry is not None:
            self.hold(task.registry.using(default=as_policy(strategy.halo)))
        self.pipe = Pipeline(model, task.data, stages=strategy.stages, chunks=strategy.chunks,
                             initial_rows=strategy.initial_rows)

    def step(self, epoch: int, optimizer: torch.optim.Optimizer) -> Step:
        return Step(self.pipe.train_step(optimizer))

    def evaluate(self, step: Step) -> tuple[float, float, float]:
        return self.pipe.evaluate()

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "pipeline": self.pipe.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.pipe.load_state_dict(state["pipeline"])

    def finish(self) -> None:
        self.pipe.gather_parameters()  # every rank gets every stage's parameters
        super().finish()
