"""Gradient-only training: clusters regrouped over the ranks, coverage
corrections, no halo exchange."""
from pyg_dist.regroup.correction import CORRECTIONS, batch_weight, edge_weights, node_weights
from pyg_dist.regroup.group import ClusterGroup
from pyg_dist.regroup.schedule import SCHEMES, groups, inclusion
from pyg_dist.regroup.trainer import GroupRunner

__all__ = ["GroupRunner", "ClusterGroup", "groups", "inclusion", "edge_weights",
           "node_weights", "batch_weight", "SCHEMES", "CORRECTIONS"]
