r"""Training strategies: how the ranks share the work of
:func:`pyg_dist.train.train`. One strategy is one file, or one folder where it
needs machinery of its own (``gradient_only/``, ``layer_pipeline/``,
``feature_parallel/``, ``grid_3d/``): its option dataclass,
its checks, its runner and its predictions, registered by name
(:data:`STRATEGIES`) through the hooks of :class:`Strategy`
(``"auto"`` is :class:`~pyg_dist.config.Planned`).

==========================================  ==========================================
strategy                                    what crosses the network each step
==========================================  ==========================================
:class:`~pyg_dist.config.GraphParallel`     halo rows and their gradients, under a
                                            halo policy; the parameter gradients
:class:`~pyg_dist.config.GradientOnly`      the parameter gradients alone: each rank
                                            trains on a group of clusters, regrouped
                                            every few epochs
:class:`~pyg_dist.config.LayerPipeline`     activations between layer stages and
                                            halo rows within a stage (deep models)
:class:`~pyg_dist.config.Planned`           what the strategy it chooses sends: the
                                            fastest predicted at the accepted risk
:class:`~pyg_dist.config.FeatureParallel`   feature slices of halo rows among a
                                            slice's ranks; all-to-alls between column
                                            slices and row blocks among a part's ranks
:class:`~pyg_dist.config.Grid3D`            partial sums of node-matrix blocks along
                                            one axis of an X x Y x Z grid per
                                            aggregation and per transform
==========================================  ==========================================

A strategy of your own subclasses :class:`Strategy` with a ``name`` and a
:meth:`~Strategy.runner` (a :class:`Runner`); it then trains under
``train(..., strategy=...)``, reads back from configs by name, and is ranked
by the planner through its :meth:`~Strategy.candidates`.
"""
from pyg_dist.strategies.base import (
    STRATEGIES,
    Runner,
    Step,
    Strategy,
    as_strategy,
    strategy_from_dict,
    take_step,
    train_step,
)
from pyg_dist.strategies.cost import RISKS, Candidate, Probe, Traffic

# isort: off
# The strategies register in this order, the order help texts list them in.
from pyg_dist.strategies.graph_parallel import GraphParallel
from pyg_dist.strategies.gradient_only import GradientOnly
from pyg_dist.strategies.layer_pipeline import LayerPipeline
from pyg_dist.strategies.planned import Planned
from pyg_dist.strategies.feature_parallel import FeatureParallel
from pyg_dist.strategies.grid_3d import Grid3D
# isort: on
from pyg_dist.strategies.settings import Checkpoint, Evaluation, GradSync, Settings
from pyg_dist.strategies.task import HeteroTask, Task, task_of

__all__ = [
    # the strategies
    "GraphParallel",
    "GradientOnly",
    "LayerPipeline",
    "Planned",
    "FeatureParallel",
    "Grid3D",
    "STRATEGIES",
    "RISKS",
    "as_strategy",
    "strategy_from_dict",
    # writing a strategy
    "Strategy",
    "Runner",
    "Step",
    "Settings",
    "Task",
    "HeteroTask",
    "task_of",
    "take_step",
    "train_step",
    "Probe",
    "Traffic",
    "Candidate",
    # what every run shares
    "GradSync",
    "Evaluation",
    "Checkpoint",
]
