"""``DistSAGEConv``: PyG's ``SAGEConv`` that also runs on a partitioned graph."""
from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor
from torch.nn.parameter import UninitializedParameter
from torch_geometric.nn import SAGEConv

from pyg_dist.data import DistEdgeIndex
from pyg_dist.halo import LayerHalo
from pyg_dist.nn.checks import check_message_passing_kwargs, halo_repr
from pyg_dist.ops import spmm

__all__ = ["DistSAGEConv"]

AGGRS = ("mean", "sum", "add", "max")


class DistSAGEConv(SAGEConv):
    r"""The GraphSAGE operator from the `"Inductive Representation Learning on
    Large Graphs" <https://arxiv.org/abs/1706.02216>`_ paper, distributed.

    .. math::
        \mathbf{x}^{\prime}_i = \mathbf{W}_1 \mathbf{x}_i + \mathbf{W}_2 \cdot
        \mathrm{aggr}_{j \in \mathcal{N}(i)} \mathbf{x}_j

    Takes exactly the arguments of :class:`torch_geometric.nn.SAGEConv` and has
    the same parameters (``lin_l``, ``lin_r``, ``lin`` when ``project``), so state
    dicts move both ways. Given a plain ``edge_index`` it *is* ``SAGEConv``. Given
    a :class:`~pyg_dist.DistEdgeIndex` it computes the rows of the nodes this
    rank owns, fetching remote neighbours through the halo policy; with the exact
    policy the rows gathered from all ranks equal ``SAGEConv`` on the whole graph.
    For ``"mean"``/``"sum"`` the narrower of :math:`\mathbf{x}_j` and
    :math:`\mathbf{W}_2 \mathbf{x}_j` crosses the network.

    Args:
        in_channels (int or tuple): Size of each input sample, or :obj:`-1`.
        out_channels (int): Size of each output sample.
        aggr (str, optional): :obj:`"mean"`, :obj:`"sum"` or :obj:`"max"`.
            (default: :obj:`"mean"`)
        normalize (bool, optional): :math:`\ell_2`-normalise the output.
            (default: :obj:`False`)
        root_weight (bool, optional): Add the transformed root node features.
            (default: :obj:`True`)
        project (bool, optional): Project neighbours through a linear layer with
            ReLU first. (default: :obj:`False`)
        bias (bool, optional): Learn an additive bias. (default: :obj:`True`)
        halo (optional): Halo policy of this layer; :obj:`None` uses the graph's
            default. (default: :obj:`None`)
        **kwargs (optional): Arguments of :class:`~torch_geometric.nn.conv.MessagePassing`.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}_{owned}|, F_{in})`, edge
          indices :class:`~pyg_dist.DistEdgeIndex` or :math:`(2, |\mathcal{E}|)`
        - **output:** node features :math:`(|\mathcal{V}_{owned}|, F_{out})`
    """

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        aggr: str = "mean",
        normalize: bool = False,
        root_weight: bool = True,
        project: bool = False,
        bias: bool = True,
        halo: Any = None,
        **kwargs: Any,
    ) -> None:
        check_message_passing_kwargs(type(self).__name__, {**kwargs, "aggr": aggr}, AGGRS)
        super().__init__(in_channels, out_channels, aggr=aggr, normalize=normalize,
                         root_weight=root_weight, project=project, bias=bias, **kwargs)
        self.halo = halo

    def forward(self, x: Any, edge_index: Any, size: Any = None) -> Tensor:  # type: ignore[override]
        if not isinstance(edge_index, DistEdgeIndex):
            return super().forward(x, edge_index, size)
        if not isinstance(x, Tensor):
            raise ValueError(
                f"'{type(self).__name__}' takes one feature tensor on a DistEdgeIndex (got "
                f"{type(x).__name__}); bipartite message passing is not distributed"
            )
        x_src = self.lin(x).relu() if self.project else x
        reduce = "sum" if self.aggr == "add" else str(self.aggr)
        halo = LayerHalo(edge_index, edge_index.registry.name(self), self.halo, self.training)
        static = halo.is_static(x_src, self.out_channels)

        def aggregate(h: Tensor, static: bool) -> Tensor:
            fetched = halo.fetch(h, static)
            graph = edge_index if fetched.mask is None else edge_index.restrict(fetched.mask)[0]
            return spmm(graph.rowptr, graph.col, h, None, reduce, x_halo=fetched.rows)

        # mean/sum commute with the transform: the narrower side travels, unless
        # the input is static (its halo is cached).
        weight = self.lin_l.weight
        if (reduce != "max" and not static and not isinstance(weight, UninitializedParameter)
                and x_src.size(-1) > self.out_channels):
            out = aggregate(F.linear(x_src, weight), False)
            if self.lin_l.bias is not None:
                out = out + self.lin_l.bias
        else:
            out = self.lin_l(aggregate(x_src, static))
        if self.root_weight:
            out = out + self.lin_r(x)
        if self.normalize:
            out = F.normalize(out, p=2.0, dim=-1)
        return out

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + halo_repr(self.halo) + ")"
