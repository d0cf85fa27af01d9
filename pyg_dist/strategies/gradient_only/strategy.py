r"""Gradient-only training (Grappa): no halo at all; each rank trains on a
group of clusters, regrouped every few epochs, and only gradients cross the
network. Predicted as the probed compute :math:`C` plus the gradients'
all-reduce :math:`G`, where the partition folder has clusters."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from pyg_dist.strategies.base import Runner, Step, Strategy, take_step
from pyg_dist.strategies.cost import GRAD_OPTIONS, Candidate, Probe, grad_seconds
from pyg_dist.strategies.gradient_only.correction import CORRECTIONS
from pyg_dist.strategies.gradient_only.schedule import SCHEMES
from pyg_dist.strategies.gradient_only.trainer import SOURCES, GroupRunner
from pyg_dist.strategies.options import check_choice, check_int, option
from pyg_dist.strategies.settings import GradSync, Settings
from pyg_dist.strategies.task import Task

__all__ = ["GradientOnly", "DEFAULT_CLUSTERS"]

#: Clusters per part cut for gradient-only training when the strategy does
#: not say.
DEFAULT_CLUSTERS = 4


@dataclass(frozen=True)
class GradientOnly(Strategy):
    r"""Gradient-only training: each rank trains on a group of clusters of
    the partition folder (cut with ``clusters_per_part`` :math:`m \ge 2`) with
    no halo exchange at all; the groups change every ``regroup_every`` epochs
    and a coverage correction weighs what each group misses (see
    :mod:`pyg_dist.strategies.gradient_only`). Only gradients cross the network. Under
    ``correction="node"`` the model is called with edge weights,
    ``model(x, edge_index, edge_weight)``. Evaluation runs on the whole part.

    Args:
        clusters_per_rank (int, optional): :math:`m`, checked against the
            folder's ``clusters_per_part``; :obj:`None` takes the folder's
            (``pyg-dist train`` partitions with 4). (default: :obj:`None`)
        regroup_every (int, optional): Epochs between regroupings. (default: :obj:`50`)
        regroup (str, optional): How clusters move between ranks: ``"sweep"``,
            ``"random"`` or ``"home"`` (never). (default: :obj:`"sweep"`)
        correction (str, optional): ``"node"``, ``"batch"`` or ``"none"``.
            (default: :obj:`"node"`)
        shrinkage (float, optional): Pulls the correction's weights toward
            their mean, in [0, 1]. (default: :obj:`0.0`)
        regroup_from (str, optional): Where a new group comes from:
            ``"folder"`` (read again) or ``"peers"`` (sent by the ranks that
            held its clusters). (default: :obj:`"folder"`)
    """

    name: ClassVar[str] = "gradient-only"
    hetero_refusal: ClassVar[str] = "gradient-only regrouping clusters a homogeneous graph"
    clusters_per_rank: int | None = option(None, "clusters per rank (cuts 4 if no folder)",
                                           type=int, metavar="M")
    regroup_every: int = option(50, "epochs between regroupings", metavar="N")
    regroup: str = option("sweep", "|".join(SCHEMES), choices=SCHEMES,
                          metavar="HOW")
    correction: str = option("node", f"correction: {'|'.join(CORRECTIONS)}",
                             choices=CORRECTIONS, metavar="KIND")
    shrinkage: float = option(0.0, "pull weights to their mean, 0..1", metavar="L")
    regroup_from: str = option("folder", f"groups come from: {'|'.join(SOURCES)}",
                               choices=SOURCES, metavar="SRC")

    def check(self) -> None:
        cls = type(self)
        if self.clusters_per_rank is not None:
            check_int(cls, "clusters_per_rank", self.clusters_per_rank, 1,
                 "or None to take the partition folder's")
        check_int(cls, "regroup_every", self.regroup_every, 1, "it counts epochs")
        check_choice(cls, "regroup", self.regroup, SCHEMES)
        check_choice(cls, "correction", self.correction, CORRECTIONS)
        check_choice(cls, "regroup_from", self.regroup_from, SOURCES)
        if isinstance(self.shrinkage, bool) or not isinstance(self.shrinkage, (int, float)) \
                or not 0.0 <= self.shrinkage <= 1.0:
            raise ValueError(f"GradientOnly(shrinkage={self.shrinkage!r}): use a value in "
                             f"[0, 1]: 0 keeps the correction, 1 gives every weight their mean")

    def clusters_per_part(self) -> int:
        return self.clusters_per_rank or DEFAULT_CLUSTERS

    def runner(self, model: nn.Module, task: Task, settings: Settings) -> Runner:
        return _GradientOnlyRun(self, model, task, settings)

    @classmethod
    def candidates(cls, probe: Probe, epochs: int) -> list[Candidate]:
        if not probe.clusters:
            return []
        out = []
        for grad, scale, _ in GRAD_OPTIONS:  # approximate whatever the gradients' compression
            grad_bytes = probe.grad_bytes * scale
            out.append(Candidate("gradient-only" + (f", grad {grad}" if grad else ""), cls(),
                                 GradSync(grad), "approximate",
                                 probe.compute + grad_seconds(probe, grad_bytes),
                                 int(epochs * probe.world_size * grad_bytes), epochs))
        return out


class _GradientOnlyRun(Runner):
    """A gradient-only run: each step on this rank's group of clusters
    (loaded when the groups change), evaluation on the whole part."""

    def __init__(self, strategy: GradientOnly, model: nn.Module, task: Task,
                 settings: Settings) -> None:
        super().__init__(strategy, model, task, settings)
        self.groups = GroupRunner(task.data, strategy.regroup_every, strategy.regroup,
                                  strategy.correction, strategy.shrinkage,
                                  regroup_from=strategy.regroup_from,
                                  clusters_per_rank=strategy.clusters_per_rank, model=model)
        self._saved_group: dict[str, Any] | None = None

    def step(self, epoch: int, optimizer: torch.optim.Optimizer) -> Step:
        self.groups.prepare(epoch)
        saved, self._saved_group = self._saved_group, None
        graph = self.groups.graph
        assert graph is not None, "prepare() made the group's graph"
        if saved is not None and saved["groups"] == self.groups.groups:
            # the group the checkpoint trained on goes on: its graph's dropout and halo state
            graph.registry.load_state_dict(saved["halo"])
        inputs = self.groups.inputs()
        return take_step(self.model, Task(self.groups.data, inputs), optimizer, self.sync,
                         inputs, self.groups.scale)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "clusters_per_rank": self.task.data.meta.clusters_per_part}

    def state_dict(self) -> dict[str, Any]:
        """The base's, and the state of the group's graph (its dropout draws
        go on while the groups stay the same)."""
        graph = self.groups.graph
        group = None if graph is None else {"groups": self.groups.groups,
                                            "halo": graph.registry.state_dict()}
        return {**super().state_dict(), "group": group}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._saved_group = state.get("group")
