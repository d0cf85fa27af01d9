"""``DistGCNConv``: PyG's ``GCNConv`` that also runs on a partitioned graph."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch_geometric.nn import GCNConv

from pyg_dist.data.dist_data import Adj, DistEdgeIndex
from pyg_dist.halo import HaloPolicy, HaloRows, LayerHalo
from pyg_dist.nn.checks import check_distributed
from pyg_dist.nn.gcn_norm import gcn_adjacency
from pyg_dist.nn.preaggregate import owned_only, pre_aggregated, pre_aggregates, weights_reason
from pyg_dist.nn.twin import DistLayer
from pyg_dist.ops import spmm

__all__ = ["DistGCNConv", "GCNAggregation"]

#: Aggregations the distributed path runs (those of spmm over the normalised adjacency).
REDUCTIONS = ("add", "sum", "mean", "max")


class GCNAggregation:
    """The distributed aggregation of the GCN family over the (normalised)
    local adjacency, for layers with ``normalize``, ``add_self_loops``,
    ``cached``, ``aggr`` (and ``improved``, :obj:`False` if absent), and
    ``pre_aggregate``: with a sum aggregation and fixed edge weights, over a
    pre-aggregated halo (:meth:`~pyg_dist.DistEdgeIndex.pre_aggregated`)."""

    _dist_cache: tuple[Tensor, Tensor, Tensor | None] | None = None
    normalize: bool
    add_self_loops: bool | None
    cached: bool
    aggr: Any
    pre_aggregate: bool | None

    def _graph(self, edge_index: DistEdgeIndex, edge_weight: Tensor | None,
               x: Tensor) -> DistEdgeIndex:
        """The graph this call (input ``x``) runs on: ``edge_index``, or its
        pre-aggregated graph when the layer (or the graph's default) asks and
        it applies."""
        reason = weights_reason(edge_weight)
        if reason is None and self.aggr not in ("add", "sum"):
            reason = f"aggr={self.aggr!r} is not a sum"
        if not pre_aggregates(self, edge_index, reason, x):
            return edge_index
        return self._pre_aggregated(edge_index, edge_weight, x.dtype)[0]

    def _pre_aggregated(self, edge_index: DistEdgeIndex, edge_weight: Tensor | None,
                        dtype: torch.dtype) -> tuple[DistEdgeIndex, Tensor]:
        """The pre-aggregated graph of the (normalised) adjacency and its
        coefficients, cached per graph, options and weights."""
        normalize, improved = bool(self.normalize), bool(getattr(self, "improved", False))
        loops = bool(self.add_self_loops)

        def adjacency() -> tuple[Tensor, Tensor, Tensor]:
            every = HaloRows(torch.empty(0))
            rowptr, col, value = gcn_adjacency(edge_index, edge_weight, every, None, dtype,
                                               normalize, improved, loops)
            if value is None:
                value = torch.ones(col.numel(), dtype=dtype, device=col.device)
            return rowptr, col, value

        key = ("gcn", normalize, improved, loops, dtype, edge_weight is None)
        return pre_aggregated(edge_index, key, edge_weight, adjacency)

    def reset_parameters(self) -> None:
        super().reset_parameters()  # type: ignore[misc]
        self._dist_cache = None

    def _aggregate(self, h: Tensor, edge_index: DistEdgeIndex, edge_weight: Tensor | None,
                   halo: LayerHalo, static: bool) -> Tensor:
        rows, (rowptr, col, value) = self._gather(h, edge_index, edge_weight, halo, static)
        reduce = "sum" if self.aggr == "add" else str(self.aggr)
        return spmm(rowptr, col, h, value, reduce, x_halo=rows)

    @torch.compiler.disable
    def _gather(
        self, h: Tensor, edge_index: DistEdgeIndex, edge_weight: Tensor | None,
        halo: LayerHalo, static: bool,
    ) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor | None]]:
        """The halo rows of ``h`` and the adjacency over them: the exchange and
        the per-graph caches of the normalisation, one graph break under
        :func:`torch.compile`."""
        fetched = halo.fetch(h, static)
        if edge_index.base is not edge_index and fetched.mask is not None:
            # the policy isolated the layer: the plain graph's owned edges
            fetched, edge_index = owned_only(fetched, edge_index.base), edge_index.base
        return fetched.rows, self._adjacency(h.dtype, edge_index, edge_weight, fetched, halo)

    def _adjacency(
        self, dtype: torch.dtype, edge_index: DistEdgeIndex, edge_weight: Tensor | None,
        fetched: HaloRows, halo: LayerHalo,
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """The (normalised) local adjacency; over the present halo rows only when
        the policy left some out (cached per graph otherwise, and with ``cached``).
        Self-loops are added only while normalising, as PyG's layers do."""
        if edge_index.base is not edge_index:
            graph, value = self._pre_aggregated(edge_index.base, edge_weight, dtype)
            return graph.rowptr, graph.col, value
        if fetched.mask is None and self._dist_cache is not None:
            return self._dist_cache
        adjacency = gcn_adjacency(edge_index, edge_weight, fetched, halo, dtype,
                                  bool(self.normalize), bool(getattr(self, "improved", False)),
                                  bool(self.add_self_loops))
        if self.cached and fetched.mask is None:
            self._dist_cache = adjacency
        return adjacency


class DistGCNConv(GCNAggregation, DistLayer, GCNConv):
    r"""The graph convolutional operator from the `"Semi-supervised
    Classification with Graph Convolutional Networks"
    <https://arxiv.org/abs/1609.02907>`_ paper, distributed.

    .. math::
        \mathbf{X}^{\prime} = \mathbf{\hat{D}}^{-1/2} \mathbf{\hat{A}}
        \mathbf{\hat{D}}^{-1/2} \mathbf{X} \mathbf{\Theta}

    Takes exactly the arguments of :class:`torch_geometric.nn.GCNConv` and has
    the same parameters (``lin.weight``, ``bias``), so state dicts move both
    ways. Given a plain ``edge_index`` it *is* ``GCNConv``. Given a
    :class:`~pyg_dist.DistEdgeIndex` it computes the rows of the nodes this rank
    owns, fetching remote neighbours through the halo policy; with the exact
    policy the rows gathered from all ranks equal ``GCNConv`` on the whole graph.
    Of :math:`\mathbf{X}` and :math:`\mathbf{X}\mathbf{\Theta}`, the narrower one
    crosses the network (aggregation and transformation commute).

    Args:
        in_channels (int): Size of each input sample, or :obj:`-1` to derive it
            from the first input.
        out_channels (int): Size of each output sample.
        improved (bool, optional): :math:`\mathbf{\hat{A}} = \mathbf{A} + 2\mathbf{I}`.
            (default: :obj:`False`)
        cached (bool, optional): Cache the normalised adjacency after the first
            call (transductive learning only). (default: :obj:`False`)
        add_self_loops (bool, optional): Add self-loops; defaults to ``normalize``.
            (default: :obj:`None`)
        normalize (bool, optional): Symmetric normalisation on the fly.
            (default: :obj:`True`)
        bias (bool, optional): Learn an additive bias. (default: :obj:`True`)
        halo (optional): Halo policy of this layer; :obj:`None` uses the graph's
            default (exact unless set on :class:`~pyg_dist.DistData`).
            (default: :obj:`None`)
        pre_aggregate (bool, optional): Exchange partial sums on a minimum
            vertex cover instead of halo rows (exact, fewer rows; needs
            ``aggr="add"`` and edge weights without grad); :obj:`None` uses
            the graph's default (``DistData.load(..., pre_aggregate=...)``).
            (default: :obj:`None`)
        **kwargs (optional): Arguments of :class:`~torch_geometric.nn.conv.MessagePassing`,
            all of them on a plain ``edge_index``; on a
            :class:`~pyg_dist.DistEdgeIndex`, ``flow="source_to_target"``,
            ``aggr`` in add/sum/mean/max and ``node_dim`` :obj:`-2`/:obj:`0`.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}_{owned}|, F_{in})`, edge
          indices :class:`~pyg_dist.DistEdgeIndex` or :math:`(2, |\mathcal{E}|)`,
          edge weights :math:`(|\mathcal{E}_{local}|)` *(optional)*
        - **output:** node features :math:`(|\mathcal{V}_{owned}|, F_{out})`
    """

    pyg_class = GCNConv

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        improved: bool = False,
        cached: bool = False,
        add_self_loops: bool | None = None,
        normalize: bool = True,
        bias: bool = True,
        halo: HaloPolicy | None = None,
        pre_aggregate: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(in_channels, out_channels, improved=improved, cached=cached,
                         add_self_loops=add_self_loops, normalize=normalize, bias=bias, **kwargs)
        self.halo = halo
        self.pre_aggregate = pre_aggregate

    def forward(  # type: ignore[override]
        self, x: Tensor, edge_index: Adj, edge_weight: Tensor | None = None
    ) -> Tensor:
        if isinstance(edge_index, DistEdgeIndex):
            return self.dist_forward(x, edge_index, edge_weight)
        return super().forward(x, edge_index, edge_weight)

    def dist_forward(self, x: Tensor, edge_index: DistEdgeIndex,
                     edge_weight: Tensor | None = None) -> Tensor:
        """The owned rows of the layer on a partitioned graph."""
        check_distributed(self, x, REDUCTIONS)
        edge_index = self._graph(edge_index, edge_weight, x)
        halo, static = LayerHalo.open(self, edge_index, x, self.out_channels)
        # A static input's halo is cached: aggregate it before transforming.
        if not static and x.size(-1) > self.out_channels:
            out = self._aggregate(self.lin(x), edge_index, edge_weight, halo, False)
        else:
            out = self.lin(self._aggregate(x, edge_index, edge_weight, halo, static))
        if self.bias is not None:
            out = out + self.bias
        return out
