"""Gradient-only training (Grappa): no halo exchange; clusters regrouped over
the ranks every few epochs, coverage corrections. The strategy
(:class:`~pyg_dist.config.GradientOnly`, ``strategy.py``), its runner (:class:`GroupRunner`,
``trainer.py``), a rank's group of clusters (``group.py``) and how clusters
move between ranks (``move.py``), the schedule of groups (``schedule.py``) and
the corrections (``correction.py``)."""
from pyg_dist.strategies.gradient_only.correction import (
    CORRECTIONS,
    batch_weight,
    edge_weights,
    node_weights,
)
from pyg_dist.strategies.gradient_only.group import ClusterGroup
from pyg_dist.strategies.gradient_only.schedule import SCHEMES, groups, inclusion
from pyg_dist.strategies.gradient_only.strategy import DEFAULT_CLUSTERS, GradientOnly
from pyg_dist.strategies.gradient_only.trainer import GroupRunner

__all__ = ["GradientOnly", "DEFAULT_CLUSTERS", "GroupRunner", "ClusterGroup", "groups",
           "inclusion", "edge_weights", "node_weights", "batch_weight", "SCHEMES",
           "CORRECTIONS"]
