"""The models the CLI and demos train: GCN, GraphSAGE, GAT and GIN stacks, and
deep models (GCNII, residual GCN and GraphSAGE) for 8-64 layers."""
from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GINConv

from pyg_dist.nn import (
    DistGATConv,
    DistGCN2Conv,
    DistGCNConv,
    DistMessagePassing,
    DistSAGEConv,
    dropout,
    dropout_edge,
)

__all__ = ["GNN", "DeepGNN", "MODELS", "DEEP_MODELS"]

MODELS = ("gcn", "sage", "gat", "gin")
#: Kinds of :class:`DeepGNN`.
DEEP_MODELS = ("gcn2", "resgcn", "ressage")


class GNN(nn.Module):
    r"""``layers`` graph convolutions with ReLU in between and dropout before
    each (as in the GCN paper's recipe), e.g. for GCN with two layers:

    .. math::
        \mathbf{Z} = \hat{\mathbf{A}}\, \mathrm{drop}(\mathrm{ReLU}(\hat{\mathbf{A}}\,
        \mathrm{drop}(\mathbf{X}) \mathbf{W}_1)) \mathbf{W}_2

    ``"gat"`` is the GAT paper's model: hidden layers of ``heads`` attention
    heads of ``hidden_channels`` each (concatenated), an output layer of one
    head, ELU in between, and ``dropout`` on the attention coefficients too.
    ``"gin"`` runs :class:`~torch_geometric.nn.GINConv` layers (a two-layer
    MLP each) through the generic distributed path. With ``residual``, every
    layer whose output is as wide as its input adds its input,
    :math:`\mathbf{H}^{(l+1)} = \mathbf{H}^{(l)} + \sigma(\mathrm{conv}(\mathbf{H}^{(l)}))`
    (residual GCN / SAGE for deep models). With ``edge_dropout``, each
    training forward first drops edges with :func:`pyg_dist.nn.dropout_edge`
    (DropEdge; one mask for every layer of the step, alike on every rank).

    Runs on a plain ``edge_index`` (single process) and on a
    :class:`~pyg_dist.DistEdgeIndex` (distributed). Distributed, dropout is
    :func:`pyg_dist.nn.dropout` (masks drawn alike on every rank), so the
    first layer's halo of the static features is fetched once. Layers are
    named ``convs.<k>`` in the halo ledger.

    Args:
        kind (str): :obj:`"gcn"`, :obj:`"sage"`, :obj:`"gat"` or :obj:`"gin"`.
        in_channels (int): Input features.
        hidden_channels (int): Hidden features.
        out_channels (int): Classes.
        layers (int, optional): Number of convolutions. (default: :obj:`2`)
        dropout (float, optional): Dropout probability. (default: :obj:`0.5`)
        halo (optional): Halo policy for every layer. (default: :obj:`None`)
        heads (int, optional): Attention heads of the hidden GAT layers.
            (default: :obj:`8`)
        residual (bool, optional): Residual connections around the layers
            of equal input and output width. (default: :obj:`False`)
        edge_dropout (float, optional): Probability of dropping an edge in
            training. (default: :obj:`0.0`)
        **kwargs (optional): Arguments of every convolution (e.g. ``aggr``).
    """

    def __init__(self, kind: str, in_channels: int, hidden_channels: int, out_channels: int,
                 layers: int = 2, dropout: float = 0.5, halo: Any = None, heads: int = 8,
                 residual: bool = False, edge_dropout: float = 0.0, **kwargs: Any) -> None:
        super().__init__()
        if not 0.0 <= edge_dropout < 1.0:
            raise ValueError(f"'GNN' needs 0 <= edge_dropout < 1 (got {edge_dropout}); it is "
                             f"the fraction of edges dropped each training step")
        if kind not in MODELS:
            raise ValueError(f"'GNN' got kind='{kind}'; use one of {', '.join(MODELS)}")
        if layers < 1:
            raise ValueError(f"'GNN' needs layers >= 1 (got {layers})")
        self.kind = kind
        width = hidden_channels * heads if kind == "gat" else hidden_channels
        sizes = [in_channels] + [width] * (layers - 1) + [out_channels]
        self.convs = nn.ModuleList(
            _conv(kind, i, o, hidden_channels, k == layers - 1, dropout, heads, halo, kwargs)
            for k, (i, o) in enumerate(zip(sizes[:-1], sizes[1:]))
        )
        for k, layer in enumerate(self.convs):
            layer.halo_name = f"convs.{k}"  # type: ignore[assignment]
        self.dropout, self.residual, self.edge_dropout = dropout, residual, edge_dropout

    def reset_parameters(self) -> None:
        for conv in self.convs:
            conv.reset_parameters()  # type: ignore[operator]

    def forward(self, x: Tensor, edge_index: Any, edge_weight: Tensor | None = None) -> Tensor:
        if edge_weight is not None and self.kind not in ("gcn", "sage"):
            raise ValueError(
                f"'GNN' got edge weights, which only its gcn and sage layers take (this one "
                f"is {self.kind}); with gradient-only training use correction='batch' or "
                f"'none'")
        graph = edge_index
        if self.training and self.edge_dropout > 0:
            if edge_weight is not None:
                raise ValueError("'GNN' cannot drop edges of a weighted graph (its edge "
                                 "weights would no longer line up); set edge_dropout=0")
            graph = dropout_edge(edge_index, self.edge_dropout, self.training)
        conv: Any
        for k, conv in enumerate(self.convs):
            h = dropout(x, self.dropout, self.training, edge_index)
            h = (conv(h, graph) if edge_weight is None
                 else conv(h, graph, edge_weight=edge_weight))
            if k < len(self.convs) - 1:
                h = F.elu(h) if self.kind == "gat" else h.relu()
            x = x + h if self.residual and h.shape == x.shape else h
        return x


def _conv(kind: str, in_channels: int, out_channels: int, hidden_channels: int, last: bool,
          dropout: float, heads: int, halo: Any, kwargs: dict[str, Any]) -> nn.Module:
    """One layer of :class:`GNN`."""
    if kind == "gcn":
        return DistGCNConv(in_channels, out_channels, halo=halo, **kwargs)
    if kind == "sage":
        return DistSAGEConv(in_channels, out_channels, halo=halo, **kwargs)
    if kind == "gat":
        if last:
            return DistGATConv(in_channels, out_channels, heads=1, concat=False,
                               dropout=dropout, halo=halo, **kwargs)
        return DistGATConv(in_channels, hidden_channels, heads=heads, dropout=dropout,
                           halo=halo, **kwargs)
    mlp = nn.Sequential(nn.Linear(in_channels, hidden_channels), nn.ReLU(),
                        nn.Linear(hidden_channels, out_channels))
    return DistMessagePassing(GINConv(mlp, **kwargs), halo=halo)


class DeepGNN(nn.Module):
    r"""A deep model of ``layers`` graph convolutions between an input and an
    output projection: GCNII (``"gcn2"``, `"Simple and Deep Graph
    Convolutional Networks" <https://arxiv.org/abs/2007.02133>`_) or a
    residual GCN / GraphSAGE (``"resgcn"``, ``"ressage"``):

    .. math::
        \mathbf{H}^{(0)} &= \mathrm{ReLU}(\mathrm{drop}(\mathbf{X}) \mathbf{W}_{in}) \\
        \mathbf{H}^{(l+1)} &= \mathrm{ReLU}(\mathrm{GCN2Conv}(\mathrm{drop}(\mathbf{H}^{(l)}),
            \mathbf{H}^{(0)})) \quad \text{or} \quad \mathbf{H}^{(l)} +
            \mathrm{ReLU}(\mathrm{conv}(\mathrm{drop}(\mathbf{H}^{(l)}))) \\
        \mathbf{Z} &= \mathrm{drop}(\mathbf{H}^{(L)}) \mathbf{W}_{out}

    The parameters are named as in PyG's GCNII example (``lins.0``,
    ``convs.<k>``, ``lins.1``). Runs on a plain ``edge_index`` (single process),
    on a :class:`~pyg_dist.DistEdgeIndex` (graph parallel) and split into layer
    stages by :class:`pyg_dist.pipeline.Pipeline`.

    Args:
        kind (str): :obj:`"gcn2"`, :obj:`"resgcn"` or :obj:`"ressage"`.
        in_channels (int): Input features.
        hidden_channels (int): Width of every convolution.
        out_channels (int): Classes.
        layers (int, optional): Number of convolutions. (default: :obj:`16`)
        dropout (float, optional): Dropout probability. (default: :obj:`0.5`)
        alpha (float, optional): GCNII's initial-residual weight.
            (default: :obj:`0.1`)
        theta (float, optional): GCNII's identity-mapping strength.
            (default: :obj:`0.5`)
        halo (optional): Halo policy of every convolution. (default: :obj:`None`)
    """

    def __init__(self, kind: str, in_channels: int, hidden_channels: int, out_channels: int,
                 layers: int = 16, dropout: float = 0.5, alpha: float = 0.1, theta: float = 0.5,
                 halo: Any = None) -> None:
        super().__init__()
        if kind not in DEEP_MODELS:
            raise ValueError(f"'DeepGNN' got kind='{kind}'; use one of {', '.join(DEEP_MODELS)}")
        if layers < 1:
            raise ValueError(f"'DeepGNN' needs layers >= 1 (got {layers})")
        self.kind, self.dropout = kind, dropout
        self.lins = nn.ModuleList([nn.Linear(in_channels, hidden_channels),
                                   nn.Linear(hidden_channels, out_channels)])
        self.convs = nn.ModuleList(_deep_conv(kind, hidden_channels, k, alpha, theta, halo)
                                   for k in range(layers))
        for k, layer in enumerate(self.convs):
            layer.halo_name = f"convs.{k}"  # type: ignore[assignment]

    def reset_parameters(self) -> None:
        for module in (*self.lins, *self.convs):
            module.reset_parameters()  # type: ignore[operator]

    def forward(self, x: Tensor, edge_index: Any) -> Tensor:
        x = self.inputs(dropout(x, self.dropout, self.training, edge_index))
        x0 = x
        for conv in self.convs:
            x = self.block(conv, x, x0, edge_index)
        return self.outputs(dropout(x, self.dropout, self.training, edge_index))

    def inputs(self, x: Tensor) -> Tensor:
        r""":math:`\mathbf{H}^{(0)}` of (dropped-out) input features."""
        return self.lins[0](x).relu()

    def outputs(self, h: Tensor) -> Tensor:
        """Class logits of (dropped-out) last hidden rows."""
        return self.lins[1](h)

    def block(self, conv: nn.Module, h: Tensor, x0: Tensor, edge_index: Any) -> Tensor:
        r"""One layer: :math:`\mathbf{H}^{(l)} \to \mathbf{H}^{(l+1)}`."""
        h_in = dropout(h, self.dropout, self.training, edge_index)
        return self.combine(h, self.convolve(conv, h_in, x0, edge_index))

    def convolve(self, conv: nn.Module, h_in: Tensor, x0: Tensor, edge_index: Any) -> Tensor:
        """Convolution ``conv`` of (dropped-out) rows ``h_in``."""
        return conv(h_in, x0, edge_index) if self.kind == "gcn2" else conv(h_in, edge_index)

    def combine(self, h: Tensor, out: Tensor) -> Tensor:
        """A layer's output from its input ``h`` and its convolution's ``out``."""
        return out.relu() if self.kind == "gcn2" else h + out.relu()


def _deep_conv(kind: str, channels: int, k: int, alpha: float, theta: float,
               halo: Any) -> nn.Module:
    """Layer ``k`` (from 0) of :class:`DeepGNN`."""
    if kind == "gcn2":
        return DistGCN2Conv(channels, alpha, theta, layer=k + 1, halo=halo)
    if kind == "resgcn":
        return DistGCNConv(channels, channels, halo=halo)
    return DistSAGEConv(channels, channels, halo=halo)
