"""``DistGATConv``: PyG's ``GATConv`` that also runs on a partitioned graph,
through one fused attention op."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch_geometric.nn import GATConv
from torch_geometric.utils import scatter

from pyg_dist.data.dist_data import Adj, DistEdgeIndex
from pyg_dist.halo import HaloPolicy, LayerHalo
from pyg_dist.nn.checks import check_distributed
from pyg_dist.nn.generic import propagate_with_halo
from pyg_dist.nn.preaggregate import pre_aggregates
from pyg_dist.nn.twin import DistLayer
from pyg_dist.ops import gat, gat_attention
from pyg_dist.ops.csr import csr_row, ptr_from_sorted
from pyg_dist.utils.dropout import shared_scale

__all__ = ["DistGATConv"]

REDUCTIONS = ("add", "sum")


class DistGATConv(DistLayer, GATConv):
    r"""The graph attentional operator from the `"Graph Attention Networks"
    <https://arxiv.org/abs/1710.10903>`_ paper, distributed.

    .. math::
        \mathbf{x}^{\prime}_i = \alpha_{i,i}\mathbf{\Theta}_{t}\mathbf{x}_{i} +
        \sum_{j \in \mathcal{N}(i)} \alpha_{i,j}\mathbf{\Theta}_{s}\mathbf{x}_{j}

    Takes exactly the arguments of :class:`torch_geometric.nn.GATConv` and has
    the same parameters (``lin`` or ``lin_src``/``lin_dst``, ``att_src``,
    ``att_dst``, ``lin_edge``, ``att_edge``, ``res``, ``bias``), so state dicts
    move both ways. Given a plain ``edge_index`` it *is* ``GATConv``. Given a
    :class:`~pyg_dist.DistEdgeIndex` it computes the rows of the nodes this
    rank owns with one fused op (:func:`pyg_dist.ops.gat`: edge scores,
    softmax over each node's in-edges and the weighted sum, never holding a
    message per edge), fetching remote neighbours through the halo policy;
    with the exact policy the rows gathered from all ranks equal ``GATConv``
    on the whole graph.

    What crosses the network is the narrower of the input rows and their
    transforms :math:`\mathbf{\Theta}_{s}\mathbf{x}_{j}` (``heads *
    out_channels`` wide); the source attention term
    :math:`\mathbf{a}_s^\top \mathbf{\Theta}_{s}\mathbf{x}_{j}` is recomputed
    from them on the receiving rank, which is exact and narrower than sending
    it. Self-loops are removed and added per node as ``GATConv`` does (every
    in-edge lives on its target's owner, so ``fill_value`` reductions over
    in-edges are local). Attention dropout draws its masks from the graph's
    shared seed, keyed by edge (``2 * e`` for edge ``e`` of the partitioned
    graph's ``edge_index``, ``2 * v + 1`` for the self-loop added at node
    :math:`v`), so masks do not depend on the partitioning.

    Args:
        in_channels (int or tuple): Size of each input sample, or :obj:`-1`.
        out_channels (int): Size of each output sample per head.
        heads (int, optional): Number of attention heads. (default: :obj:`1`)
        concat (bool, optional): Concatenate the heads (else average them).
            (default: :obj:`True`)
        negative_slope (float, optional): LeakyReLU angle. (default: :obj:`0.2`)
        dropout (float, optional): Dropout probability of the normalised
            attention coefficients. (default: :obj:`0`)
        add_self_loops (bool, optional): Add self-loops. (default: :obj:`True`)
        edge_dim (int, optional): Edge feature dimensionality. (default: :obj:`None`)
        fill_value (float or torch.Tensor or str, optional): Edge features of
            added self-loops (a reduction such as :obj:`"mean"` over the node's
            in-edges). (default: :obj:`"mean"`)
        bias (bool, optional): Learn an additive bias. (default: :obj:`True`)
        residual (bool, optional): Add a transformed residual of the input.
            (default: :obj:`False`)
        halo (optional): Halo policy of this layer; :obj:`None` uses the graph's
            default. (default: :obj:`None`)
        **kwargs (optional): Arguments of :class:`~torch_geometric.nn.conv.MessagePassing`.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}_{owned}|, F_{in})`, edge
          indices :class:`~pyg_dist.DistEdgeIndex` or :math:`(2, |\mathcal{E}|)`,
          edge features :math:`(|\mathcal{E}_{local}|, D)` *(optional)*
        - **output:** node features :math:`(|\mathcal{V}_{owned}|, H * F_{out})`
          or :math:`(|\mathcal{V}_{owned}|, F_{out})` without ``concat``; with
          ``return_attention_weights``, also ``(edge_index, alpha)``: the
          global ids :math:`(2, |\mathcal{E}_{local}'|)` (source, target) of
          the rank's in-edges after self-loop handling and their attention
          :math:`(|\mathcal{E}_{local}'|, H)`.
    """

    pyg_class = GATConv

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        edge_dim: int | None = None,
        fill_value: Any = "mean",
        bias: bool = True,
        residual: bool = False,
        halo: HaloPolicy | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(in_channels, out_channels, heads=heads, concat=concat,
                         negative_slope=negative_slope, dropout=dropout,
                         add_self_loops=add_self_loops, edge_dim=edge_dim,
                         fill_value=fill_value, bias=bias, residual=residual, **kwargs)
        self.halo = halo

    def forward(  # type: ignore[override]
        self, x: Any, edge_index: Adj, edge_attr: Tensor | None = None, size: Any = None,
        return_attention_weights: bool | None = None,
    ) -> Any:
        if not isinstance(edge_index, DistEdgeIndex):
            return super().forward(x, edge_index, edge_attr, size, return_attention_weights)
        if size is not None:
            raise ValueError("'DistGATConv' takes its size from the DistEdgeIndex; leave "
                             "size=None")
        if isinstance(x, tuple):  # bipartite (x_src, x_dst): the generic path
            return propagate_with_halo(self, super().forward, x, edge_index, edge_attr,
                                       return_attention_weights=return_attention_weights)
        return self.dist_forward(x, edge_index, edge_attr, return_attention_weights)

    def dist_forward(self, x: Tensor, edge_index: DistEdgeIndex, edge_attr: Tensor | None = None,
                     return_attention_weights: bool | None = None) -> Any:
        """The owned rows of the layer on a partitioned graph."""
        check_distributed(self, x, REDUCTIONS)
        pre_aggregates(self, edge_index, "its attention coefficients depend on the inputs")
        heads, channels = self.heads, self.out_channels
        lin_src = self.lin if self.lin is not None else self.lin_src
        lin_dst = self.lin if self.lin is not None else self.lin_dst
        assert lin_src is not None and lin_dst is not None, "GATConv has its linear layers"
        x_src = lin_src(x)
        x_dst = x_src if lin_dst is lin_src else lin_dst(x)

        halo, static = LayerHalo.open(self, edge_index, x, heads * channels)
        raw = static or x.size(-1) <= heads * channels  # the raw rows travel
        rows, local, edge_attr, edges = _gather(x if raw else x_src, edge_index, edge_attr, halo,
                                                static, self.add_self_loops, self.fill_value,
                                                bool(return_attention_weights))
        rowptr, col, key = local
        src_halo = lin_src(rows) if raw else rows
        x_src = x_src.view(-1, heads, channels)
        src_halo = src_halo.view(-1, heads, channels)
        alpha_src = (x_src * self.att_src).sum(dim=-1)
        alpha_src_halo = (src_halo * self.att_src).sum(dim=-1)
        alpha_dst = (x_dst.view(-1, heads, channels) * self.att_dst).sum(dim=-1)
        alpha_edge = None
        if edge_attr is not None and self.lin_edge is not None:
            edge = self.lin_edge(edge_attr).view(-1, heads, channels)
            alpha_edge = (edge * self.att_edge).sum(dim=-1)
        scale = None
        if self.training and self.dropout > 0:
            scale = shared_scale(key, heads, self.dropout, edge_index, alpha_src.dtype)

        out = gat(rowptr, col, x_src, alpha_src, alpha_dst, x_halo=src_halo,
                  alpha_src_halo=alpha_src_halo, alpha_edge=alpha_edge, edge_scale=scale,
                  negative_slope=self.negative_slope)
        out = out.reshape(-1, heads * channels) if self.concat else out.mean(dim=1)
        if self.res is not None:
            out = out + self.res(x)
        if self.bias is not None:
            out = out + self.bias
        if not return_attention_weights:
            return out
        alpha = gat_attention(rowptr, col, alpha_src, alpha_dst, alpha_src_halo=alpha_src_halo,
                              alpha_edge=alpha_edge, negative_slope=self.negative_slope)
        if scale is not None:
            alpha = alpha * scale
        return out, (edges, alpha)


@torch.compiler.disable
def _gather(h: Tensor, edge_index: DistEdgeIndex, edge_attr: Tensor | None, halo: LayerHalo,
            static: bool, add_self_loops: bool, fill_value: Any, with_edges: bool,
            ) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor], Tensor | None, Tensor | None]:
    """The halo rows of ``h``, the local graph the attention runs on
    (``rowptr``, ``col``, each entry's dropout key), its edge features with
    self-loops filled, and with ``with_edges`` the global (source, target) ids
    of its entries: the exchange and the per-graph caches, one graph break
    under :func:`torch.compile`."""
    fetched = halo.fetch(h, static)
    graph = edge_index
    if fetched.mask is not None:
        graph, keep = edge_index.restrict(fetched.mask)
        edge_attr = None if edge_attr is None else edge_attr[keep]
    local = _attention_graph(graph, add_self_loops)
    if edge_attr is not None:
        if edge_attr.dim() == 1:
            edge_attr = edge_attr.view(-1, 1)
        if local.loops is not None:
            kept = edge_attr[local.loops.kept]
            fill = _loop_attr(kept, local.loops.kept_row, graph.num_owned, fill_value)
            edge_attr = torch.cat([kept, fill])[local.loops.order]
    edges = _global_edges(graph, local) if with_edges else None
    return fetched.rows, (local.rowptr, local.col, local.key), edge_attr, edges


@dataclass(frozen=True)
class _Loops:
    """How the local graph with self-loops was made from the graph's edges:
    ``kept`` the edges that are not self-loops (their rows ``kept_row``),
    ``order`` the CSR order of ``[kept edges ; one loop per node]``."""

    kept: Tensor
    kept_row: Tensor
    order: Tensor


@dataclass(frozen=True)
class _LocalGraph:
    """The local CSR the attention runs on, each entry's dropout key, and how
    it was made (``loops``: :obj:`None` when it is the graph's own CSR)."""

    rowptr: Tensor
    col: Tensor
    key: Tensor
    loops: _Loops | None


def _attention_graph(graph: DistEdgeIndex, add_self_loops: bool) -> _LocalGraph:
    """The graph's in-edges with self-loops removed and one added per owned
    node (at the end of its row), built once per graph."""
    return graph.cached(("gat_graph", add_self_loops),
                        lambda: _build_attention_graph(graph, add_self_loops))


def _build_attention_graph(graph: DistEdgeIndex, add_self_loops: bool) -> _LocalGraph:
    key = 2 * graph.edge_id.to(torch.int64)
    if not add_self_loops:
        return _LocalGraph(graph.rowptr, graph.col, key, None)
    row, col = graph.row(), graph.col
    kept = torch.nonzero(col != row).view(-1)
    nodes = torch.arange(graph.num_owned, device=col.device, dtype=col.dtype)
    rows = torch.cat([row[kept], nodes])
    order = torch.sort(rows, stable=True).indices
    rowptr = ptr_from_sorted(rows[order], graph.num_owned).to(graph.rowptr.dtype)
    loop_key = 2 * graph.global_id.to(torch.int64) + 1
    return _LocalGraph(rowptr, torch.cat([col[kept], nodes])[order],
                       torch.cat([key[kept], loop_key])[order],
                       _Loops(kept, row[kept], order))


def _loop_attr(kept: Tensor, kept_row: Tensor, num_rows: int, fill_value: Any) -> Tensor:
    """Edge features of the added self-loops, as ``add_self_loops`` makes them."""
    if isinstance(fill_value, str):
        return scatter(kept, kept_row.long(), 0, num_rows, reduce=fill_value)
    if isinstance(fill_value, Tensor):
        return fill_value.to(kept).expand(num_rows, *kept.shape[1:])
    return kept.new_full((num_rows, *kept.shape[1:]), float(fill_value))


def _global_edges(graph: DistEdgeIndex, local: _LocalGraph) -> Tensor:
    """``[2, nnz]`` global (source, target) ids of the local entries."""
    ids = torch.cat([graph.global_id, graph.plan.halo_global_id.to(graph.device)])
    row = csr_row(local.rowptr, local.col).long()
    return torch.stack([ids[local.col.long()], graph.global_id[row]])
