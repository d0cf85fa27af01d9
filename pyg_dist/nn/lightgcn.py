r"""LightGCN on a partitioned graph: :class:`DistLGConv` (PyG's ``LGConv``)
and :class:`DistLightGCN` (PyG's ``LightGCN``), which
:func:`~pyg_dist.nn.to_distributed` puts in their place."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.nn import LGConv
from torch_geometric.nn.models import LightGCN

from pyg_dist.data.dist_data import Adj, DistEdgeIndex
from pyg_dist.halo import HaloPolicy, LayerHalo
from pyg_dist.nn.checks import check_distributed
from pyg_dist.nn.gcn_conv import REDUCTIONS, GCNAggregation
from pyg_dist.nn.owned import OwnsRows
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


class DistLightGCN(OwnsRows, LightGCN):
    r"""PyG's :class:`~torch_geometric.nn.models.LightGCN` on a partitioned
    graph: the same constructor, parameters and state dict. On a
    :class:`~pyg_dist.DistEdgeIndex` a rank's layer-0 embeddings are the
    rows of the nodes it owns. :func:`~pyg_dist.train.train` cuts the
    embedding table to them first (:meth:`own`): each rank then holds and
    updates only its own rows (their gradients, summed back from wherever
    they were read, are whole on their owner), and its state dict and
    checkpoints hold those rows. A model not cut reads
    ``embedding.weight[global_id]`` of the whole table.
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

    Attributes:
        owned (torch.Tensor, optional): The global ids of the rows the table
            holds once cut (:obj:`None`: every node's).
    """

    owned: Tensor | None = None  # a class default: to_distributed converts in place

    def __init__(self, num_nodes: int, embedding_dim: int, num_layers: int,
                 alpha: float | Tensor | None = None, **kwargs: Any) -> None:
        super().__init__(num_nodes, embedding_dim, num_layers, alpha, **kwargs)
        for conv in self.convs:
            conv.__class__ = DistLGConv

    def own(self, global_id: Tensor) -> None:
        """Keeps only the embedding rows of the nodes ``global_id`` (this
        rank's), in place: the parameter stays the same object (an optimizer
        made before keeps it), its data becomes ``weight[global_id]``.

        Args:
            global_id (torch.Tensor): ``[num_owned]`` the global ids of this rank's nodes.
        """
        if self.owned is not None:
            if torch.equal(self.owned, global_id.cpu()):
                return
            raise ValueError("'DistLightGCN.own' was called for other nodes than the rows it "
                             "holds; build the model again for another part")
        weight = self.embedding.weight
        weight.data = weight.data[global_id.to(weight.device)].clone()
        self.embedding.num_embeddings = global_id.numel()
        self.owned = global_id.detach().cpu().clone()

    def owned_parameters(self) -> list[nn.Parameter]:
        return [] if self.owned is None else [self.embedding.weight]

    def _load_from_state_dict(self, state_dict: Any, prefix: str,  # type: ignore[override]
                              *args: Any, **kwargs: Any) -> None:
        # the whole table (PyG's state dict) loads into a cut one: its own rows
        key = prefix + "embedding.weight"
        weight = state_dict.get(key)
        if (self.owned is not None and weight is not None
                and weight.size(0) == self.num_nodes != self.owned.numel()):
            state_dict[key] = weight[self.owned.to(weight.device)]
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def get_embedding(self, edge_index: Adj, edge_weight: Tensor | None = None) -> Tensor:
        if not isinstance(edge_index, DistEdgeIndex):
            return super().get_embedding(edge_index, edge_weight)
        if self.owned is None:
            x = self.embedding.weight[edge_index.global_id]
        elif self.owned.numel() != edge_index.num_owned:
            raise ValueError(f"'DistLightGCN' holds the rows of {self.owned.numel()} nodes, "
                             f"this rank owns {edge_index.num_owned}; run it on the part it "
                             f"was cut for (DistLightGCN.own)")
        else:
            x = self.embedding.weight
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
