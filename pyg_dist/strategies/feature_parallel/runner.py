"""One feature-parallel run on one rank."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pyg_dist.halo import HaloPolicy
from pyg_dist.metrics import accuracies
from pyg_dist.strategies.base import Runner, Step, Strategy, grid_step
from pyg_dist.strategies.feature_parallel.load import FeatureParallelData
from pyg_dist.strategies.feature_parallel.model import FeatureParallelModel
from pyg_dist.strategies.options import as_policy
from pyg_dist.strategies.settings import Settings
from pyg_dist.strategies.task import Task


class FeatureParallelRun(Runner):
    """A feature-parallel run: each step the model on the grid
    (:class:`FeatureParallelModel`), the loss where the logits are
    (:meth:`FeatureParallelModel.loss`), the gradients summed over every
    rank; evaluation on the grid too. Its graph (what checkpoints keep the
    halo, dropout and ledger state of) is the grid's share.

    Args:
        strategy (FeatureParallel): The strategy.
        model (torch.nn.Module): The model.
        task (Task): The grid's share of the graph
            (:class:`~pyg_dist.strategies.feature_parallel.FeatureParallelData`).
        settings (Settings): The run's settings.
        halo (HaloPolicy or str, optional): The policy of layers that set
            none, for the run; :obj:`None` keeps the grid's.
        pre_aggregate (bool, optional): Whether slices exchange partial sums;
            :obj:`None` keeps the grid's setting.
    """

    def __init__(self, strategy: Strategy, model: nn.Module, task: Task, settings: Settings,
                 halo: HaloPolicy | str | None = None,
                 pre_aggregate: bool | None = None) -> None:
        super().__init__(strategy, model, task, settings, sync=False)
        data = task.data
        assert isinstance(data, FeatureParallelData), "the strategy loads the grid's share"
        graph = data.edge_index
        if halo is not None:
            self.hold(graph.registry.using(default=as_policy(halo)))
        if pre_aggregate is not None:
            self.hold(graph.using(pre_aggregate))
        self.net = FeatureParallelModel(model, data)

    def step(self, epoch: int, optimizer: torch.optim.Optimizer) -> Step:
        return grid_step(self.model, optimizer,
                         lambda: self.net.loss(self.net.output(), self.task.y,
                                               self.task.train_mask),
                         self.net.sum_gradients)

    def evaluate(self, step: Step) -> tuple[float, float, float]:
        with torch.no_grad():
            self.model.eval()
            return accuracies(self.net().argmax(dim=-1), self.task)

    def describe(self) -> dict[str, Any]:
        grid = self.net.grid
        return {**super().describe(), "grid": f"{grid.parts}x{grid.slices}",
                "orders": list(self.net.orders)}
