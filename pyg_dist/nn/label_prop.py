r"""Label propagation and Correct & Smooth on a partitioned graph:
``DistLabelPropagation`` and ``DistCorrectAndSmooth``, PyG's
:class:`~torch_geometric.nn.models.LabelPropagation` and
:class:`~torch_geometric.nn.models.CorrectAndSmooth` that also run on a
:class:`~pyg_dist.DistEdgeIndex`.

Each propagation step aggregates the halo rows of the previous step's
labels over the symmetrically normalised adjacency
:math:`\mathbf{D}^{-1/2}\mathbf{A}\mathbf{D}^{-1/2}` (no self-loops,
:math:`\mathbf{D}` the whole graph's in-degrees, halo sources' included: they
come from the partition) in one exact halo exchange, booked in the ledger
under the layer's name in direction ``"eval"``. Correct & Smooth's
autoscale takes the mean error of every rank's training nodes (one
all-reduce). So the owned rows equal PyG's on the whole graph.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch_geometric.nn.models import CorrectAndSmooth, LabelPropagation
from torch_geometric.utils import one_hot

from pyg_dist.data.dist_data import Adj, DistEdgeIndex
from pyg_dist.halo import Exact
from pyg_dist.halo.exchange import exchange_halo
from pyg_dist.nn.gcn_norm import dist_gcn_norm, halo_degree
from pyg_dist.nn.twin import DistLayer
from pyg_dist.ops import spmm
from pyg_dist.runtime import distributed

__all__ = ["DistLabelPropagation", "DistCorrectAndSmooth"]


class DistLabelPropagation(DistLayer, LabelPropagation):
    r""":class:`~torch_geometric.nn.models.LabelPropagation` that also runs
    on a :class:`~pyg_dist.DistEdgeIndex`:

    .. math::
        \mathbf{Y}^{\prime} = \alpha \cdot \mathbf{D}^{-1/2} \mathbf{A}
        \mathbf{D}^{-1/2} \mathbf{Y} + (1 - \alpha) \mathbf{Y}

    ``num_layers`` times, each step one exact halo exchange of the rows being
    propagated (whatever the graph's halo policy: propagation is not
    training). Without ``edge_weight`` the adjacency is normalised by the
    whole graph's in-degrees; given weights are used as they are, as PyG
    does. Integer labels become one-hot rows of the whole graph's classes.
    Takes the arguments of :class:`~torch_geometric.nn.models.LabelPropagation`.

    Args:
        num_layers (int): The number of propagations.
        alpha (float): The :math:`\alpha` coefficient.
        halo (HaloPolicy, optional): :obj:`None` or an uncompressed
            :class:`~pyg_dist.halo.Exact` (propagation exchanges exactly).
            (default: :obj:`None`)

    Shapes:
        - **input:** labels :math:`(N)` (int64) or :math:`(N, C)`, mask
          :math:`(N)` (bool) or :math:`(M)` (indices), edge weights
          :math:`(E)` (:math:`N` this rank's nodes, :math:`E` their in-edges)
        - **output:** :math:`(N, C)`
    """

    pyg_class = LabelPropagation

    def __init__(self, num_layers: int, alpha: float, halo: Any = None) -> None:
        super().__init__(num_layers, alpha)
        self.halo = halo

    @torch.no_grad()
    def forward(self, y: Tensor, edge_index: Adj, mask: Tensor | None = None,  # type: ignore[override]
                edge_weight: Tensor | None = None,
                post_step: Callable[[Tensor], Tensor] | None = None) -> Tensor:
        if not isinstance(edge_index, DistEdgeIndex):
            return super().forward(y, edge_index, mask, edge_weight, post_step)
        self._check_halo()
        if y.dtype == torch.long and y.size(0) == y.numel():
            classes = distributed.all_reduce_values([int(y.max()) if y.numel() else -1],
                                                    op="max", group=edge_index.channel.group)
            y = one_hot(y.view(-1), num_classes=int(classes[0]) + 1)
        out = y
        if mask is not None:
            out = torch.zeros_like(y)
            out[mask] = y[mask]
        rowptr, col, value = self._adjacency(edge_index, edge_weight, out.dtype)
        name = edge_index.registry.name(self)
        res = (1 - self.alpha) * out
        for _ in range(self.num_layers):
            halo = exchange_halo(out, edge_index.channel, name, direction="eval")
            out = spmm(rowptr, col, out, value, "sum", x_halo=halo)
            out.mul_(self.alpha).add_(res)
            out = post_step(out) if post_step is not None else out.clamp_(0.0, 1.0)
        return out

    def _adjacency(self, edge_index: DistEdgeIndex, edge_weight: Tensor | None,
                   dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        """``(rowptr, col, value)`` of the local adjacency: normalised by the
        whole graph's in-degrees (``gcn_norm`` without self-loops), or the
        given weights."""
        if edge_weight is not None:
            return edge_index.rowptr, edge_index.col, edge_weight.to(dtype)
        deg_halo = halo_degree(edge_index, None, False, False, dtype, None)
        return dist_gcn_norm(edge_index, None, False, False, dtype, deg_halo)

    def _check_halo(self) -> None:
        if self.halo is not None and not (isinstance(self.halo, Exact)
                                          and self.halo.codec is None):
            raise ValueError(f"'{type(self).__name__}' exchanges exactly (got halo="
                             f"{self.halo!r}); leave halo=None")


class DistCorrectAndSmooth(CorrectAndSmooth):
    r""":class:`~torch_geometric.nn.models.CorrectAndSmooth` that also runs
    on a :class:`~pyg_dist.DistEdgeIndex`: its propagations are
    :class:`DistLabelPropagation` (``prop1``, ``prop2``, their names in the
    ledger), and the autoscale's :math:`\sigma`, the mean absolute error of
    the training nodes, is taken over every rank's. Takes the arguments of
    :class:`~torch_geometric.nn.models.CorrectAndSmooth`.

    Args:
        num_correction_layers (int): The number of propagations :math:`L_1`.
        correction_alpha (float): The :math:`\alpha_1` coefficient.
        num_smoothing_layers (int): The number of propagations :math:`L_2`.
        smoothing_alpha (float): The :math:`\alpha_2` coefficient.
        autoscale (bool, optional): Whether to determine the scaling factor
            :math:`\gamma` from the training error. (default: :obj:`True`)
        scale (float, optional): The scaling factor :math:`\gamma` without
            autoscale. (default: :obj:`1.0`)

    Shapes:
        - **input:** soft predictions :math:`(N, C)`, the training nodes'
          labels :math:`(M)` or :math:`(M, C)`, their mask :math:`(N)` (bool)
          or :math:`(M)` (indices) (:math:`N` this rank's nodes)
        - **output:** :math:`(N, C)`
    """

    def __init__(self, num_correction_layers: int, correction_alpha: float,
                 num_smoothing_layers: int, smoothing_alpha: float, autoscale: bool = True,
                 scale: float = 1.0) -> None:
        super().__init__(num_correction_layers, correction_alpha, num_smoothing_layers,
                         smoothing_alpha, autoscale, scale)
        for name in ("prop1", "prop2"):
            prop = getattr(self, name)
            prop.__class__ = DistLabelPropagation
            prop.halo, prop.halo_name = None, name

    def correct(self, y_soft: Tensor, y_true: Tensor, mask: Tensor, edge_index: Adj,
                edge_weight: Tensor | None = None) -> Tensor:
        if not isinstance(edge_index, DistEdgeIndex) or not self.autoscale:
            return super().correct(y_soft, y_true, mask, edge_index, edge_weight)
        numel = int(mask.sum()) if mask.dtype == torch.bool else mask.size(0)
        assert y_true.size(0) == numel, "one label per training node of this rank"
        if y_true.dtype == torch.long and y_true.size(0) == y_true.numel():
            y_true = one_hot(y_true.view(-1), num_classes=y_soft.size(-1), dtype=y_soft.dtype)
        error = torch.zeros_like(y_soft)
        error[mask] = y_true - y_soft[mask]
        smoothed_error = self.prop1(error, edge_index, edge_weight=edge_weight,
                                    post_step=lambda x: x.clamp_(-1.0, 1.0))
        total, count = distributed.all_reduce_values(
            [float(error[mask].abs().sum()), float(numel)], group=edge_index.channel.group)
        sigma = torch.tensor(total / max(count, 1.0), dtype=y_soft.dtype, device=y_soft.device)
        scale = sigma / smoothed_error.abs().sum(dim=1, keepdim=True)
        scale[scale.isinf() | (scale > 1000)] = 1.0
        return y_soft + scale * smoothed_error
