r"""Normalisation layers whose statistics run over the nodes of every rank.

A norm between graph layers (``BatchNorm``, ``LayerNorm(mode="graph")``,
``GraphNorm``) takes statistics over all nodes of the graph; on a partitioned
graph each rank holds only its own. These subclasses reduce the sums behind
the statistics over all ranks (differentiably, so gradients see every rank's
nodes), which makes a distributed model with norms equal the single-process
one: outputs, gradients and running statistics. Without a process group of
more than one rank they are their parents. Every rank must call them, in
the same order. :func:`~pyg_dist.nn.to_distributed` converts a model's norms
in place (their parameters, buffers and state dicts stay as they are).
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.nn import GraphNorm, LayerNorm

from pyg_dist.runtime import distributed

__all__ = ["DistBatchNorm", "DistLayerNorm", "DistGraphNorm", "NORMS"]


def _global_mean(x: Tensor, num_nodes: float, dim: int | None = 0) -> Tensor:
    """Mean over the nodes of all ranks (``dim=0``: per feature; ``None``: of
    every entry), differentiable."""
    if dim is None:
        return distributed.all_reduce_with_grad(x.sum().view(1)) / (num_nodes * x.size(-1))
    return distributed.all_reduce_with_grad(x.sum(dim)) / num_nodes


def _num_nodes(x: Tensor) -> float:
    return distributed.all_reduce_values([x.size(0)])[0]


class DistBatchNorm(torch.nn.BatchNorm1d):
    r""":class:`torch.nn.BatchNorm1d` over the nodes of all ranks (node
    features ``[num_nodes, C]``): in training, the mean and biased variance
    of each feature over every rank's nodes normalise, and the running
    statistics are updated as :class:`~torch.nn.BatchNorm1d` would on the
    whole graph (unbiased variance, ``momentum``, or a cumulative average for
    ``momentum=None``). Evaluation with running statistics needs no
    communication. Takes the arguments of :class:`~torch.nn.BatchNorm1d`.

    Args:
        num_features (int): :math:`C`, the width of the node features.
        eps (float, optional): Added to the variance for numerical stability.
            (default: :obj:`1e-5`)
        momentum (float, optional): The running statistics' update factor;
            :obj:`None` for a cumulative average. (default: :obj:`0.1`)
        affine (bool, optional): Whether to learn a per-feature scale and
            shift. (default: :obj:`True`)
        track_running_stats (bool, optional): Whether to keep running
            statistics for evaluation; otherwise evaluation normalises with
            the statistics of all ranks' nodes as training does.
            (default: :obj:`True`)
        device (torch.device, optional): The parameters' device.
            (default: :obj:`None`)
        dtype (torch.dtype, optional): The parameters' dtype.
            (default: :obj:`None`)
        bias (bool, optional): Whether the affine transform learns a shift
            (keyword only). (default: :obj:`True`)

    Shapes:
        - **input:** node features :math:`(N, C)` (:math:`N` this rank's nodes)
        - **output:** :math:`(N, C)`
    """

    def forward(self, x: Tensor) -> Tensor:
        batch_stats = self.training or not self.track_running_stats
        if not batch_stats or not distributed.is_distributed():
            return super().forward(x)
        if x.dim() != 2:
            raise ValueError(f"'{type(self).__name__}' normalises node features of shape "
                             f"[num_nodes, C] across ranks (got {tuple(x.shape)})")
        num_nodes = _num_nodes(x)
        mean = _global_mean(x, num_nodes)
        var = _global_mean((x - mean) ** 2, num_nodes)
        if self.training and self.track_running_stats:
            self._update_running_stats(mean.detach(), var.detach(), num_nodes)
        out = (x - mean) * torch.rsqrt(var + self.eps)
        if self.affine:
            out = out * self.weight + self.bias
        return out

    @torch.no_grad()
    def _update_running_stats(self, mean: Tensor, var: Tensor, num_nodes: float) -> None:
        assert self.num_batches_tracked is not None, "tracking running statistics"
        self.num_batches_tracked.add_(1)
        if self.momentum is None:  # a cumulative moving average
            factor = 1.0 / float(self.num_batches_tracked)
        else:
            factor = self.momentum
        unbiased = var * num_nodes / max(num_nodes - 1, 1)
        self.running_mean.mul_(1 - factor).add_(mean, alpha=factor)  # type: ignore[union-attr]
        self.running_var.mul_(1 - factor).add_(unbiased, alpha=factor)  # type: ignore[union-attr]


class DistLayerNorm(LayerNorm):
    r""":class:`torch_geometric.nn.LayerNorm` whose ``mode="graph"``
    statistics (mean and standard deviation of every entry of the graph) run
    over the nodes of all ranks; ``mode="node"`` needs no communication.
    Takes the arguments of :class:`~torch_geometric.nn.LayerNorm`.

    Args:
        in_channels (int): Size of each input sample.
        eps (float, optional): Added to the standard deviation for numerical
            stability. (default: :obj:`1e-5`)
        affine (bool, optional): Whether to learn a per-feature scale and
            shift. (default: :obj:`True`)
        mode (str, optional): :obj:`"graph"` (statistics over every entry of
            the graph, all ranks' nodes) or :obj:`"node"` (per node).
            (default: :obj:`"graph"`)
        device (torch.device, optional): The parameters' device.
            (default: :obj:`None`)

    Shapes:
        - **input:** node features :math:`(N, F)`, batch vector :math:`(N)`
          (optional; one graph only)
        - **output:** :math:`(N, F)`
    """

    def forward(self, x: Tensor, batch: Tensor | None = None,  # type: ignore[override]
                batch_size: int | None = None) -> Tensor:
        if self.mode != "graph" or not distributed.is_distributed():
            return super().forward(x, batch, batch_size)
        _one_graph(self, batch)
        num_nodes = _num_nodes(x)
        x = x - _global_mean(x, num_nodes, dim=None)
        std = _global_mean(x * x, num_nodes, dim=None).sqrt()
        out = x / (std + self.eps)
        if self.weight is not None and self.bias is not None:
            out = out * self.weight + self.bias
        return out


class DistGraphNorm(GraphNorm):
    r""":class:`torch_geometric.nn.GraphNorm` whose per-feature mean and
    variance run over the nodes of all ranks. Takes the arguments of
    :class:`~torch_geometric.nn.GraphNorm`.

    Args:
        in_channels (int): Size of each input sample.
        eps (float, optional): Added to the variance for numerical stability.
            (default: :obj:`1e-5`)
        device (torch.device, optional): The parameters' device.
            (default: :obj:`None`)

    Shapes:
        - **input:** node features :math:`(N, F)`, batch vector :math:`(N)`
          (optional; one graph only)
        - **output:** :math:`(N, F)`
    """

    def forward(self, x: Tensor, batch: Tensor | None = None,  # type: ignore[override]
                batch_size: int | None = None) -> Tensor:
        if not distributed.is_distributed():
            return super().forward(x, batch, batch_size)
        _one_graph(self, batch)
        num_nodes = _num_nodes(x)
        out = x - _global_mean(x, num_nodes) * self.mean_scale
        std = (_global_mean(out * out, num_nodes) + self.eps).sqrt()
        return self.weight * out / std + self.bias


def _one_graph(norm: torch.nn.Module, batch: Tensor | None) -> None:
    if batch is not None:
        raise ValueError(f"'{type(norm).__name__}' normalises one graph partitioned over the "
                         f"ranks; a batch vector of several graphs is not distributed "
                         f"(pass batch=None)")


#: The norm classes :func:`~pyg_dist.nn.to_distributed` replaces, and their twins.
NORMS: dict[type, type] = {
    torch.nn.BatchNorm1d: DistBatchNorm,
    LayerNorm: DistLayerNorm,
    GraphNorm: DistGraphNorm,
}
