"""``DistGCN2Conv``: PyG's ``GCN2Conv`` that also runs on a partitioned graph."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch_geometric.nn import GCN2Conv

from pyg_dist.data.dist_data import Adj, DistEdgeIndex
from pyg_dist.halo import HaloPolicy, LayerHalo
from pyg_dist.nn.checks import check_distributed
from pyg_dist.nn.gcn_conv import REDUCTIONS, GCNAggregation
from pyg_dist.nn.twin import DistLayer

__all__ = ["DistGCN2Conv", "initial_residual"]


class DistGCN2Conv(GCNAggregation, DistLayer, GCN2Conv):
    r"""The graph convolutional operator with initial residual connections and
    identity mapping (GCNII) from the `"Simple and Deep Graph Convolutional
    Networks" <https://arxiv.org/abs/2007.02133>`_ paper, distributed.

    .. math::
        \mathbf{X}^{\prime} = \left( (1 - \alpha) \mathbf{\hat{P}}\mathbf{X} +
        \alpha \mathbf{X^{(0)}}\right) \left( (1 - \beta) \mathbf{I} + \beta
        \mathbf{\Theta} \right)

    with :math:`\mathbf{\hat{P}} = \mathbf{\hat{D}}^{-1/2} \mathbf{\hat{A}}
    \mathbf{\hat{D}}^{-1/2}`.

    Takes exactly the arguments of :class:`torch_geometric.nn.GCN2Conv` and has
    the same parameters (``weight1``, and ``weight2`` unless ``shared_weights``),
    so state dicts move both ways. Given a plain ``edge_index`` it *is*
    ``GCN2Conv``. Given a :class:`~pyg_dist.DistEdgeIndex` it computes the rows
    of the nodes this rank owns, fetching the remote neighbours' rows of
    :math:`\mathbf{X}` through the halo policy; with the exact policy the rows
    gathered from all ranks equal ``GCN2Conv`` on the whole graph. Only
    :math:`\mathbf{X}` crosses the network (``channels`` wide): the initial
    residual :math:`\mathbf{X^{(0)}}` is read at the owned nodes alone.

    Args:
        channels (int): Size of each input and output sample.
        alpha (float): The strength of the initial residual connection
            :math:`\alpha`.
        theta (float, optional): The hyperparameter :math:`\theta` of the
            identity mapping :math:`\beta = \log(\theta / \ell + 1)`.
            (default: :obj:`None`)
        layer (int, optional): The layer :math:`\ell` this module runs at.
            (default: :obj:`None`)
        shared_weights (bool, optional): Use one weight matrix for the smoothed
            representation and the initial residual; :obj:`False` learns a second
            one ("GCNII*"). (default: :obj:`True`)
        cached (bool, optional): Cache the normalised adjacency after the first
            call (transductive learning only). (default: :obj:`False`)
        add_self_loops (bool, optional): Add self-loops (with ``normalize``
            only, as in ``GCN2Conv``). (default: :obj:`True`)
        normalize (bool, optional): Symmetric normalisation on the fly.
            (default: :obj:`True`)
        halo (optional): Halo policy of this layer; :obj:`None` uses the graph's
            default (exact unless set on :class:`~pyg_dist.DistData`).
            (default: :obj:`None`)
        pre_aggregate (bool, optional): Exchange partial sums on a minimum
            vertex cover instead of halo rows (exact, fewer rows; needs edge
            weights without grad); :obj:`None` uses the graph's default.
            (default: :obj:`None`)
        **kwargs (optional): Arguments of :class:`~torch_geometric.nn.conv.MessagePassing`,
            all of them on a plain ``edge_index``; on a
            :class:`~pyg_dist.DistEdgeIndex`, ``flow="source_to_target"``,
            ``aggr`` in add/sum/mean/max and ``node_dim`` :obj:`-2`/:obj:`0`.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}_{owned}|, F)`, initial
          node features :math:`(|\mathcal{V}_{owned}|, F)`, edge indices
          :class:`~pyg_dist.DistEdgeIndex` or :math:`(2, |\mathcal{E}|)`, edge
          weights :math:`(|\mathcal{E}_{local}|)` *(optional)*
        - **output:** node features :math:`(|\mathcal{V}_{owned}|, F)`
    """

    pyg_class = GCN2Conv

    def __init__(
        self,
        channels: int,
        alpha: float,
        theta: float | None = None,
        layer: int | None = None,
        shared_weights: bool = True,
        cached: bool = False,
        add_self_loops: bool = True,
        normalize: bool = True,
        halo: HaloPolicy | None = None,
        pre_aggregate: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(channels, alpha, theta=theta, layer=layer,
                         shared_weights=shared_weights, cached=cached,
                         add_self_loops=add_self_loops, normalize=normalize, **kwargs)
        self.halo = halo
        self.pre_aggregate = pre_aggregate

    def forward(  # type: ignore[override]
        self, x: Tensor, x_0: Tensor, edge_index: Adj, edge_weight: Tensor | None = None
    ) -> Tensor:
        if isinstance(edge_index, DistEdgeIndex):
            return self.dist_forward(x, x_0, edge_index, edge_weight)
        return super().forward(x, x_0, edge_index, edge_weight)

    def dist_forward(self, x: Tensor, x_0: Tensor, edge_index: DistEdgeIndex,
                     edge_weight: Tensor | None = None) -> Tensor:
        """The owned rows of the layer on a partitioned graph."""
        check_distributed(self, x, REDUCTIONS)
        self._check_initial(x_0, edge_index)
        edge_index = self._graph(edge_index, edge_weight, x)
        halo, static = LayerHalo.open(self, edge_index, x, self.channels)
        return initial_residual(self, self._aggregate(x, edge_index, edge_weight, halo, static),
                                x_0)

    def _check_initial(self, x_0: Any, edge_index: DistEdgeIndex) -> None:
        """``x_0`` must hold the owned rows: on a partitioned graph, whole-graph
        rows cannot be told apart from owned ones by position."""
        name = type(self).__name__
        if not isinstance(x_0, Tensor) or x_0.dim() != 2:
            got = tuple(x_0.shape) if isinstance(x_0, Tensor) else type(x_0).__name__
            raise ValueError(f"'{name}' takes x_0 as a [num_owned, channels] tensor on a "
                             f"DistEdgeIndex (got {got})")
        if x_0.size(0) != edge_index.num_owned:
            raise ValueError(
                f"'{name}' takes x_0 with one row per owned node on a DistEdgeIndex "
                f"({edge_index.num_owned} rows, got {x_0.size(0)}); pass this rank's rows of "
                f"the initial features (x_0[data.global_id] for whole-graph rows)"
            )


def initial_residual(conv: GCN2Conv, h: Tensor, x_0: Tensor) -> Tensor:
    r"""``conv``'s output from its aggregated input :math:`\mathbf{\hat{P}}\mathbf{X}`
    (``h``) and the initial rows ``x_0``, as :class:`~torch_geometric.nn.GCN2Conv`
    computes it."""
    h = h * (1 - conv.alpha)
    x_0 = conv.alpha * x_0
    beta = conv.beta
    if conv.weight2 is None:
        out = h + x_0
        return torch.addmm(out, out, conv.weight1, beta=1.0 - beta, alpha=beta)
    out = torch.addmm(h, h, conv.weight1, beta=1.0 - beta, alpha=beta)
    return out + torch.addmm(x_0, x_0, conv.weight2, beta=1.0 - beta, alpha=beta)
