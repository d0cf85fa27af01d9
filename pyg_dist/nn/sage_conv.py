"""``DistSAGEConv``: PyG's ``SAGEConv`` that also runs on a partitioned graph."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.parameter import UninitializedParameter
from torch_geometric.nn import SAGEConv

from pyg_dist.data.dist_data import Adj, DistEdgeIndex
from pyg_dist.halo import HaloPolicy, HaloRows, LayerHalo
from pyg_dist.nn.checks import check_distributed
from pyg_dist.nn.generic import propagate_with_halo
from pyg_dist.nn.preaggregate import (
    owned_only,
    pre_aggregates,
    sum_pre_aggregated,
    weights_reason,
)
from pyg_dist.nn.twin import DistLayer
from pyg_dist.ops import spmm
from pyg_dist.ops.csr import csr_row

__all__ = ["DistSAGEConv"]

#: Aggregations of the fast path (one spmm); every other runs the generic path.
FAST_AGGRS = ("mean", "sum", "add", "max")


class DistSAGEConv(DistLayer, SAGEConv):
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
    :math:`\mathbf{W}_2 \mathbf{x}_j` crosses the network; mean, sum and max
    aggregate in one :func:`~pyg_dist.ops.spmm`, every other aggregation
    (``"lstm"``, ``"softmax"``, :class:`~torch_geometric.nn.aggr.MLPAggregation`,
    lists of several) runs through the generic path
    (:class:`~pyg_dist.nn.DistMessagePassing`).

    On a :class:`~pyg_dist.DistEdgeIndex` it also takes ``edge_weight``
    (which ``SAGEConv`` does not): ``"mean"`` becomes the weighted mean
    :math:`\sum_j w_{ji} \mathbf{x}_j / \sum_j w_{ji}` and ``"sum"`` the weighted
    sum (gradient-only training's node correction, see
    ``pyg_dist.strategies.gradient_only.correction``).

    Args:
        in_channels (int or tuple): Size of each input sample, or :obj:`-1`.
        out_channels (int): Size of each output sample.
        aggr (str or list or torch_geometric.nn.aggr.Aggregation, optional): Any aggregation of
            :class:`~torch_geometric.nn.SAGEConv`. (default: :obj:`"mean"`)
        normalize (bool, optional): :math:`\ell_2`-normalise the output.
            (default: :obj:`False`)
        root_weight (bool, optional): Add the transformed root node features.
            (default: :obj:`True`)
        project (bool, optional): Project neighbours through a linear layer with
            ReLU first. (default: :obj:`False`)
        bias (bool, optional): Learn an additive bias. (default: :obj:`True`)
        halo (optional): Halo policy of this layer; :obj:`None` uses the graph's
            default. (default: :obj:`None`)
        pre_aggregate (bool, optional): Exchange partial sums on a minimum
            vertex cover instead of halo rows (exact, fewer rows; needs
            ``aggr`` ``"mean"``, ``"sum"`` or ``"add"`` and edge weights
            without grad); :obj:`None` uses the graph's default.
            (default: :obj:`None`)
        **kwargs (optional): Arguments of :class:`~torch_geometric.nn.conv.MessagePassing`.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}_{owned}|, F_{in})`, edge
          indices :class:`~pyg_dist.DistEdgeIndex` or :math:`(2, |\mathcal{E}|)`,
          edge weights :math:`(|\mathcal{E}_{local}|)` *(optional, distributed only)*
        - **output:** node features :math:`(|\mathcal{V}_{owned}|, F_{out})`
    """

    pyg_class = SAGEConv

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        aggr: Any = "mean",
        normalize: bool = False,
        root_weight: bool = True,
        project: bool = False,
        bias: bool = True,
        halo: HaloPolicy | None = None,
        pre_aggregate: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(in_channels, out_channels, aggr=aggr, normalize=normalize,
                         root_weight=root_weight, project=project, bias=bias, **kwargs)
        self.halo = halo
        self.pre_aggregate = pre_aggregate

    def forward(self, x: Any, edge_index: Adj, size: Any = None,  # type: ignore[override]
                edge_weight: Tensor | None = None) -> Tensor:
        fast = isinstance(self.aggr, str) and self.aggr in FAST_AGGRS
        if edge_weight is not None and not (isinstance(edge_index, DistEdgeIndex) and fast
                                            and self.aggr != "max"):
            raise ValueError(
                f"'DistSAGEConv' takes edge weights only on a DistEdgeIndex with aggr 'mean' "
                f"or 'sum' (got aggr={self.aggr!r} on {type(edge_index).__name__}); PyG's "
                f"SAGEConv takes none: leave edge_weight out")
        if not isinstance(edge_index, DistEdgeIndex):
            return super().forward(x, edge_index, size)
        if fast:
            return self.dist_forward(x, edge_index, edge_weight)
        pre_aggregates(self, edge_index, f"aggr={self.aggr!r} is not a sum or a mean")
        return propagate_with_halo(self, super().forward, x, edge_index, size=size)

    def dist_forward(self, x: Any, edge_index: DistEdgeIndex,
                     edge_weight: Tensor | None = None) -> Tensor:
        """The owned rows of the layer on a partitioned graph, for the
        aggregations of one spmm (``FAST_AGGRS``); with ``edge_weight``
        the weighted mean or sum. ``x`` is a tensor or a bipartite pair
        ``(x_src, x_dst)`` (a relation of a heterogeneous graph)."""
        check_distributed(self, x, FAST_AGGRS)
        x_src, x_dst = (x, x) if isinstance(x, Tensor) else x  # bipartite: (x_src, x_dst)
        x_src = self.lin(x_src).relu() if self.project else x_src
        reduce = "sum" if self.aggr == "add" else str(self.aggr)
        reason = ("aggr='max' is not a sum or a mean" if reduce == "max"
                  else weights_reason(edge_weight))
        if pre_aggregates(self, edge_index, reason, x_src):
            edge_index = sum_pre_aggregated(edge_index, reduce, edge_weight)[0]
        halo, static = LayerHalo.open(self, edge_index, x_src, self.out_channels)
        # mean/sum commute with the transform: the narrower side travels, unless
        # the input is static (its halo is cached).
        weight = self.lin_l.weight
        shared = edge_index.channel.shared is not None  # relations share the raw rows
        if (reduce != "max" and not static and not shared
                and not isinstance(weight, UninitializedParameter)
                and x_src.size(-1) > self.out_channels):
            out = _aggregate(F.linear(x_src, weight), edge_index, halo, reduce, False,
                             edge_weight)
            if self.lin_l.bias is not None:
                out = out + self.lin_l.bias
        else:
            out = self.lin_l(_aggregate(x_src, edge_index, halo, reduce, static, edge_weight))
        if self.root_weight and x_dst is not None:
            out = out + self.lin_r(x_dst)
        if self.normalize:
            out = F.normalize(out, p=2.0, dim=-1)
        return out


def _aggregate(h: Tensor, edge_index: DistEdgeIndex, halo: LayerHalo, reduce: str,
               static: bool, edge_weight: Tensor | None = None) -> Tensor:
    if edge_index.base is not edge_index:
        fetched = halo.fetch(h, static)
        if fetched.mask is None:
            coefficients = sum_pre_aggregated(edge_index.base, reduce, edge_weight)[1]
            return spmm(edge_index.rowptr, edge_index.col, h, coefficients.to(h.dtype), "sum",
                        x_halo=fetched.rows)
        # the policy isolated the layer: the plain graph's owned edges
        edge_index = edge_index.base
        rows, rowptr, col, value = _local(owned_only(fetched, edge_index), edge_index,
                                          edge_weight)
    else:
        rows, rowptr, col, value = _gather(h, edge_index, halo, static, edge_weight)
    if value is None:
        return spmm(rowptr, col, h, None, reduce, x_halo=rows)
    if reduce == "mean":  # the weighted mean: each row's weights sum to 1
        row = csr_row(rowptr, col)
        total = value.new_zeros(rowptr.numel() - 1).index_add_(0, row, value)
        value = value / total.clamp(min=torch.finfo(value.dtype).tiny)[row]
    return spmm(rowptr, col, h, value.to(h.dtype), "sum", x_halo=rows)


@torch.compiler.disable
def _gather(h: Tensor, edge_index: DistEdgeIndex, halo: LayerHalo, static: bool,
            edge_weight: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """The halo rows of ``h``, the local CSR over the rows present and the
    weights of its edges: one graph break under :func:`torch.compile`."""
    return _local(halo.fetch(h, static), edge_index, edge_weight)


def _local(fetched: HaloRows, edge_index: DistEdgeIndex, edge_weight: Tensor | None
           ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """The halo rows fetched, the local CSR over the rows present and the
    weights of its edges."""
    if fetched.mask is None:
        return fetched.rows, edge_index.rowptr, edge_index.col, edge_weight
    graph, keep = edge_index.restrict(fetched.mask)
    return (fetched.rows, graph.rowptr, graph.col,
            None if edge_weight is None else edge_weight[keep])
