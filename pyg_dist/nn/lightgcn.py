r"""LightGCN on a partitioned graph: :class:`DistLGConv` (PyG's ``LGConv``)
and :class:`DistLightGCN` (PyG's ``LightGCN``), which
:func:`~pyg_dist.nn.to_distributed` puts in their place."""
from __future__ import annotations

from typing import Any

from torch import Tensor
from torch_geometric.nn import LGConv
from torch_geometric.nn.models import LightGCN

from pyg_dist.data.dist_data import Adj, DistEdgeIndex
from pyg_dist.halo import HaloPolicy, LayerHalo
from pyg_dist.nn.checks import check_distributed
from pyg_dist.nn.gcn_conv import REDUCTIONS, GCNAggregation
from pyg_dist.nn.twin import DistLayer

__all__ = ["DistLGConv", "DistLightGCN"]


class DistLGConv(GCNAggregation, DistLayer, LGConv):
    r"""The light graph convolution of `"LightGCN: Simplifying and Powering
    Graph Convolution Network for Recommendation"
    <https://arxiv.org/abs/2002.02126>`_, distributed:

    .. math::
        \mathbf{x}^{\prime}_i = \sum_{j \in \mathcal{N}(i)}
        \frac{e_{j,i}}{\sqrt{\deg(i)\deg(j)}} \mathbf{x}_j

    Takes the arguments of :class:`torch_geometric.nn.LGConv` (it has no
    parameters). Given a plain ``edge_index`` it *is* ``LGConv``; given a
    :class:`~pyg_dist.DistEdgeIndex` it aggregates the owned rows, the
    halo's degrees those of the whole graph.

    Args:
        normalize (bool, optional): Symmetric normalisation (without
            self-loops). (default: :obj:`True`)
        halo (optional): Halo policy of this layer. (default: :obj:`None`)
        **kwargs (optional): Arguments of
            :class:`~torch_geometric.nn.conv.MessagePassing`.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}_{owned}|, F)`, edge
          indices :class:`~pyg_dist.DistEdgeIndex` or :math:`(2, |\mathcal{E}|)`
        - **output:** node features :math:`(|\mathcal{V}_{owned}|, F)`
    """

    pyg_class = LGConv
    add_self_loops = False
    cached = False
    pre_aggregate: bool | None = None

    def __init__(self, normalize: bool = True, halo: HaloPolicy | None = None,
                 **kwargs: Any) -> None:
        super().__init__(normalize=normalize, **kwargs)
        self.halo = halo

    def forward(self, x: Tensor, edge_index: Adj,  # type: ignore[override]
                edge_weight: Tensor | None = None) -> Tensor:
        if not isinstance(edge_index, DistEdgeIndex):
            return super().forward(x, edge_index, edge_weight)
        check_distributed(self, x, REDUCTIONS)
        edge_index = self._graph(edge_index, edge_weight, x)
        halo, static = LayerHalo.open(self, edge_index, x, x.size(-1))
        return self._aggregate(x, edge_index, edge_weight, halo, static)


class DistLightGCN(LightGCN):
    r"""PyG's :class:`~torch_geometric.nn.models.LightGCN` on a partitioned
    graph: the same constructor, parameters and state dict. On a
    :class:`~pyg_dist.DistEdgeIndex` a rank's layer-0 embeddings are the
    rows of the nodes it owns (``embedding.weight[global_id]``: every rank
    keeps the whole table, and only its own rows get a gradient, so the
    gradients summed over the ranks are the whole graph's).
    ``model(edge_index)`` without ``edge_label_index`` returns the final
    embeddings (of this rank's nodes), which the training task scores
    (PyG's scores every edge of ``edge_index``; pass it as
    ``edge_label_index`` for that).

    Args:
        num_nodes (int): The number of nodes in the whole graph.
        embedding_dim (int): The dimensionality of node embeddings.
        num_layers (int): The number of :class:`DistLGConv` layers.
        alpha (float or torch.Tensor, optional): The scalar or vector of
            layer weights; :obj:`None` for :math:`1 / (L + 1)` each.
            (default: :obj:`None`)
        **kwargs (optional): Arguments of the layers.
    """

    def __init__(self, num_nodes: int, embedding_dim: int, num_layers: int,
                 alpha: float | Tensor | None = None, **kwargs: Any) -> None:
        super().__init__(num_nodes, embedding_dim, num_layers, alpha, **kwargs)
        for conv in self.convs:
            conv.__class__ = DistLGConv

    def get_embedding(self, edge_index: Adj, edge_weight: Tensor | None = None) -> Tensor:
        if not isinstance(edge_index, DistEdgeIndex):
            return super().get_embedding(edge_index, edge_weight)
        x = self.embedding.weight[edge_index.global_id]
        out = x * self.alpha[0]
        for i in range(self.num_layers):
            x = self.convs[i](x, edge_index, edge_weight)
            out = out + x * self.alpha[i + 1]
        return out

    def forward(self, edge_index: Adj,  # type: ignore[override]
                edge_label_index: Tensor | None = None,
                edge_weight: Tensor | None = None) -> Tensor:
        if edge_label_index is None:
            return self.get_embedding(edge_index, edge_weight)
        return super().forward(edge_index, edge_label_index, edge_weight)
