"""One run on the 3D grid on one rank."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pyg_dist.metrics import accuracies
from pyg_dist.strategies.base import Runner, Step, Strategy, grid_step
from pyg_dist.strategies.grid_3d.load import Grid3DData
from pyg_dist.strategies.grid_3d.model import Grid3DModel
from pyg_dist.strategies.settings import Settings
from pyg_dist.strategies.task import Task


class _Labels:
    """``y`` and the masks of one run of rows (what
    :func:`~pyg_dist.metrics.accuracies` reads)."""

    def __init__(self, values: dict[str, Any]) -> None:
        for key, value in values.items():
            setattr(self, key, value)


class Grid3DRun(Runner):
    """A run on the 3D grid: each step the model on the grid
    (:class:`~pyg_dist.strategies.grid_3d.Grid3DModel`), the loss where the
    logits end, the gradients summed over every rank; evaluation on the grid
    too. Its checkpoints keep the shared dropout state and the ledger.

    Args:
        strategy (Grid3D): The strategy.
        model (torch.nn.Module): The model.
        task (Task): The grid's share of the graph (a
            :class:`~pyg_dist.strategies.grid_3d.Grid3DData`).
        settings (Settings): The run's settings.
        edge_weight (bool, optional): Whether GCN layers read the graph's
            edge weights. (default: :obj:`False`)
        sums (str, optional): How each sum is kept (``"scatter"`` or
            ``"whole"``, :class:`~pyg_dist.strategies.grid_3d.Grid3DModel`).
            (default: :obj:`"scatter"`)
    """

    def __init__(self, strategy: Strategy, model: nn.Module, task: Task, settings: Settings,
                 edge_weight: bool = False, sums: str = "scatter") -> None:
        super().__init__(strategy, model, task, settings, sync=False)
        data = task.data
        assert isinstance(data, Grid3DData), "the strategy loads the grid's share"
        self.net = Grid3DModel(model, data, edge_weight, sums)

    def step(self, epoch: int, optimizer: torch.optim.Optimizer) -> Step:
        return grid_step(self.model, optimizer, lambda: self.net.loss(self.net.output()),
                         self.net.sum_gradients)

    def evaluate(self, step: Step) -> tuple[float, float, float]:
        with torch.no_grad():
            self.model.eval()
            pred, labels = self.net.predictions()
            return accuracies(pred, _Labels(labels))

    def describe(self) -> dict[str, Any]:
        place = self.net.place
        return {"halo": None, "input_cache": False, "grid": str(place), "sums": self.net.sums,
                "layouts": [str(layout) for layout in self.net.layouts]}

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        dropout = self.net.data.dropout
        state["dropout"] = {"seed": dropout.seed, "calls": dropout.calls}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        saved = state.get("dropout")
        if saved is not None:
            self.net.data.dropout.seed, self.net.data.dropout.calls = (saved["seed"],
                                                                       saved["calls"])
