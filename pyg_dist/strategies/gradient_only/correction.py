r"""Coverage corrections of gradient-only training.

A rank trains on the union of its clusters; an edge between two of its
clusters :math:`a \ne b` is there with probability :math:`\pi_{ab}` per
period (:func:`~pyg_dist.strategies.gradient_only.schedule.inclusion`), an edge inside a
cluster always.

* ``"node"`` (Horvitz–Thompson): each retained cross-cluster edge weighs
  :math:`1/\pi_{ab}`, an edge inside a cluster 1. For a linear aggregation
  :math:`\sum_{j \in N(i)} x_j` the weighted sum over the retained edges
  :math:`\sum_{j} \mathbb{1}[j \text{ retained}]\, x_j / \pi_{ij}` has
  expectation :math:`\sum_{j \in N(i)} \pi_{ij} x_j / \pi_{ij}`, the full
  neighbourhood's sum: unbiased. GCN normalises with the weighted degree,
  itself the unbiased estimate of the full degree, so each layer is a ratio
  of unbiased estimates: consistent as neighbourhoods grow (asymptotically
  unbiased), and so through the non-linear layers. Edges with
  :math:`\pi = 0` are never retained and cannot be corrected. For a mean
  aggregation (SAGE) the same weights make the weighted mean
  :math:`\sum_j w_{ij} x_j / \sum_j w_{ij}` over the retained neighbours
  (Hájek: a ratio of two unbiased estimates, of the neighbourhood's sum and
  of its size, so consistent). Needs layers that take edge weights
  (:class:`~pyg_dist.nn.DistGCNConv`, :class:`~pyg_dist.nn.DistSAGEConv`).
* ``"batch"``: one weight per rank. Node :math:`i`'s node-level weight is
  the factor by which the node-level correction scales its incoming weight,
  :math:`\omega_i = (1 + \sum_{j \text{ retained}} 1/\pi_{ij}) / (1 + |R_i|)`
  (the 1 is GCN's self-loop); the single :math:`w_r` closest to them in mean
  square over the rank's training nodes, :math:`\arg\min_w \sum_i (w -
  \omega_i)^2`, is their mean. Rank :math:`r`'s gradient counts
  :math:`w_r / \bar w` times (:math:`\bar w` the mean over ranks), i.e. the
  all-reduce sums :math:`\sum_r w_r g_r / \sum_r w_r` times :math:`P`; one
  extra scalar crosses the network.
* ``"none"``: every retained edge weighs 1, every rank counts once.

``shrinkage`` :math:`\lambda \in [0, 1]` pulls the weights toward their mean,
:math:`w \leftarrow (1 - \lambda) w + \lambda \bar w` (the edges' mean on the
rank for ``"node"``, the ranks' mean for ``"batch"``): :math:`\lambda = 0` is
the correction as above, :math:`\lambda = 1` gives every edge (every rank)
the same weight, which for ``"batch"`` is ``"none"``.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pyg_dist.strategies.gradient_only.group import ClusterGroup

__all__ = ["CORRECTIONS", "edge_weights", "node_weights", "batch_weight", "shrink"]

CORRECTIONS = ("node", "batch", "none")


def shrink(weights: Tensor, shrinkage: float) -> Tensor:
    """``weights`` pulled toward their mean by ``shrinkage``."""
    if shrinkage == 0.0 or weights.numel() == 0:
        return weights
    return (1.0 - shrinkage) * weights + shrinkage * weights.mean()


def edge_weights(group: ClusterGroup, pi: Tensor) -> Tensor:
    """``[E]`` float32: :math:`1/\\pi` of each retained edge's two clusters.

    Args:
        group (ClusterGroup): The clusters this rank holds.
        pi (torch.Tensor): ``[C, C]`` float64 probabilities :math:`\\pi_{ab}`
            that clusters share a rank, from :func:`inclusion`.
    """
    source, target = group.edge_cluster
    return (1.0 / pi[source, target]).float()


def node_weights(group: ClusterGroup, pi: Tensor) -> Tensor:
    """``[N]``: :math:`\\omega_i`, the node-level correction's factor on node
    :math:`i`'s incoming weight (self-loop included).

    Args:
        group (ClusterGroup): The clusters this rank holds.
        pi (torch.Tensor): ``[C, C]`` float64 probabilities :math:`\\pi_{ab}`
            that clusters share a rank, from :func:`inclusion`.
    """
    n = group.data.num_nodes
    target = group.data.edge_index[1]
    weighted = torch.zeros(n, dtype=torch.float64).index_add_(0, target,
                                                              edge_weights(group, pi).double())
    count = torch.bincount(target, minlength=n).double()
    return (1.0 + weighted) / (1.0 + count)


def batch_weight(group: ClusterGroup, pi: Tensor) -> float:
    """:math:`w_r`: the mean of :math:`\\omega_i` over the rank's training
    nodes (1 without any: the rank then has no gradient to weigh).

    Args:
        group (ClusterGroup): The clusters this rank holds.
        pi (torch.Tensor): ``[C, C]`` float64 probabilities :math:`\\pi_{ab}`
            that clusters share a rank, from :func:`inclusion`.
    """
    mask = getattr(group.data, "train_mask", None)
    omega = node_weights(group, pi)
    omega = omega[mask] if mask is not None else omega
    return float(omega.mean()) if omega.numel() else 1.0
