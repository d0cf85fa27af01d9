"""The models the CLI and demos train: GCN, GraphSAGE, GAT and GIN stacks, and
deep models (GCNII, residual GCN and GraphSAGE) for 8-64 layers."""
from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GINConv
from torch_geometric.nn.models import JumpingKnowledge

from pyg_dist.nn import (
    DistBatchNorm,
    DistGATConv,
    DistGCN2Conv,
    DistGCNConv,
    DistLayerNorm,
    DistMessagePassing,
    DistSAGEConv,
    dropout,
    dropout_edge,
)
from pyg_dist.utils.labels import LabelInput

__all__ = ["GNN", "DeepGNN", "MODELS", "DEEP_MODELS", "NORMS", "JK_MODES"]

MODELS = ("gcn", "sage", "gat", "gin")
#: The norms of :class:`GNN`'s hidden layers.
NORMS = ("batch", "layer")
#: The jumping-knowledge heads of :class:`GNN`.
JK_MODES = ("cat", "max")
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
    MLP each) through the generic distributed path. With ``edge_dropout``,
    each training forward first drops edges with
    :func:`pyg_dist.nn.dropout_edge` (DropEdge; one mask for every layer of
    the step, alike on every rank).

    The options of full-batch recipes (OGB's ogbn-arxiv baselines, DGL's
    ogbn-arxiv GCN), each exact across ranks. A hidden layer computes

    .. math::
        \mathbf{H}^{(l+1)} = [\mathbf{H}^{(l)} +]\, \sigma(\mathrm{norm}(
        \mathrm{conv}(\mathrm{drop}(\mathbf{H}^{(l)})) [+ \mathrm{drop}(\mathbf{H}^{(l)})
        \mathbf{W}^{(l)}_{skip}]))

    - ``norm``: :obj:`"batch"` (:class:`~pyg_dist.nn.DistBatchNorm`, statistics
      over every rank's nodes) or :obj:`"layer"` (per node, PyG's
      :class:`~torch_geometric.nn.norm.LayerNorm` with ``mode="node"``) after
      each hidden convolution, as ``norms.<k>``;
    - ``residual``: every layer whose output is as wide as its input adds its
      input (residual GCN / SAGE);
    - ``skip``: a linear skip, ``skips.<k>``: every layer adds a linear map of
      its (dropped-out) input to its convolution (DGL's ``use_linear``);
    - ``jk``: a jumping-knowledge head (:obj:`"cat"` or :obj:`"max"`,
      :class:`~torch_geometric.nn.models.JumpingKnowledge`): every layer is a
      hidden layer, their outputs are combined and a linear layer ``lin``
      maps them to classes, as PyG's
      :class:`~torch_geometric.nn.models.GraphSAGE` (``jk=...``) names them;
    - ``label_input``: labels as input (:class:`~pyg_dist.utils.labels.LabelInput`):
      the first layer reads ``out_channels`` one-hot label columns after the
      ``in_channels`` features; :func:`~pyg_dist.train.train` fills them (a
      random half of the training nodes each epoch, the loss on the others;
      every training node in evaluation).

    With ``norm`` and ``jk`` (no ``residual``, ``skip`` or dropout), the model
    computes what PyG's :class:`~torch_geometric.nn.models.GraphSAGE` /
    :class:`~torch_geometric.nn.models.GCN` with the same ``norm`` and ``jk``
    computes (PyG's batch norm keeps its parameters under ``norms.<k>.module``).

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
        norm (str, optional): :obj:`"batch"` or :obj:`"layer"` after each
            hidden convolution; :obj:`None` for none. (default: :obj:`None`)
        jk (str, optional): :obj:`"cat"` or :obj:`"max"`: a jumping-knowledge
            head; :obj:`None` for none. (default: :obj:`None`)
        skip (bool, optional): A linear skip around every convolution.
            (default: :obj:`False`)
        label_input (bool, optional): Read the one-hot labels of training
            nodes as input (the label trick). (default: :obj:`False`)
        input_dropout (float, optional): Dropout probability of the input
            features; :obj:`None` for ``dropout``. (default: :obj:`None`)
        **kwargs (optional): Arguments of every convolution (e.g. ``aggr``).

    Shapes:
        - **input:** node features :math:`(N, F_{in})` (:math:`(N, F_{in} + C)`
          with ``label_input``), edge indices :math:`(2, E)` or a
          :class:`~pyg_dist.DistEdgeIndex`
        - **output:** class logits :math:`(N, C)`
    """

    def __init__(self, kind: str, in_channels: int, hidden_channels: int, out_channels: int,
                 layers: int = 2, dropout: float = 0.5, halo: Any = None, heads: int = 8,
                 residual: bool = False, edge_dropout: float = 0.0, norm: str | None = None,
                 jk: str | None = None, skip: bool = False, label_input: bool = False,
                 input_dropout: float | None = None, **kwargs: Any) -> None:
        super().__init__()
        _check(kind, layers, edge_dropout, norm, jk)
        for name, p in (("dropout", dropout), ("input_dropout", input_dropout)):
            if p is not None and not 0.0 <= p < 1.0:
                raise ValueError(f"'GNN' needs 0 <= {name} < 1 (got {p})")
        self.kind = kind
        width = hidden_channels * heads if kind == "gat" else hidden_channels
        inputs = in_channels + (out_channels if label_input else 0)
        hidden = layers if jk else layers - 1
        sizes = [inputs] + [width] * hidden + ([] if jk else [out_channels])
        self.convs = nn.ModuleList(
            _conv(kind, i, o, hidden_channels, k == hidden, dropout, heads, halo, kwargs)
            for k, (i, o) in enumerate(zip(sizes[:-1], sizes[1:]))
        )
        for k, layer in enumerate(self.convs):
            layer.halo_name = f"convs.{k}"  # type: ignore[assignment]
        if norm is not None:
            self.norms = nn.ModuleList(_norm(norm, width) for _ in range(hidden))
        if skip:
            self.skips = nn.ModuleList(nn.Linear(i, o, bias=False)  # the layer's bias serves
                                       for i, o in zip(sizes[:-1], sizes[1:]))
        if jk is not None:
            self.jk = JumpingKnowledge(jk)
            self.lin = nn.Linear(width * layers if jk == "cat" else width, out_channels)
        self.dropout, self.residual, self.edge_dropout = dropout, residual, edge_dropout
        self.input_dropout = dropout if input_dropout is None else input_dropout
        self.num_hidden = hidden
        self.label_input = LabelInput(out_channels) if label_input else None

    def reset_parameters(self) -> None:
        extra = [self.lin] if hasattr(self, "lin") else []
        for module in (*self.convs, *getattr(self, "norms", ()), *getattr(self, "skips", ()),
                       *extra):
            module.reset_parameters()  # type: ignore[operator]

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
        outs = []
        for k, conv in enumerate(self.convs):
            h_in = dropout(x, self.input_dropout if k == 0 else self.dropout, self.training,
                           edge_index)
            h = (conv(h_in, graph) if edge_weight is None
                 else conv(h_in, graph, edge_weight=edge_weight))
            if hasattr(self, "skips"):
                h = h + self.skips[k](h_in)
            if k < self.num_hidden:
                h = self.norms[k](h) if hasattr(self, "norms") else h
                h = F.elu(h) if self.kind == "gat" else h.relu()
            x = x + h if self.residual and h.shape == x.shape else h
            outs.append(x)
        if not hasattr(self, "jk"):
            return x
        return self.lin(dropout(self.jk(outs), self.dropout, self.training, edge_index))


def _check(kind: str, layers: int, edge_dropout: float, norm: str | None,
           jk: str | None) -> None:
    """Raises on options :class:`GNN` does not have, naming the fix."""
    if not 0.0 <= edge_dropout < 1.0:
        raise ValueError(f"'GNN' needs 0 <= edge_dropout < 1 (got {edge_dropout}); it is "
                         f"the fraction of edges dropped each training step")
    if kind not in MODELS:
        raise ValueError(f"'GNN' got kind='{kind}'; use one of {', '.join(MODELS)}")
    if layers < 1:
        raise ValueError(f"'GNN' needs layers >= 1 (got {layers})")
    if norm not in (None, *NORMS):
        raise ValueError(f"'GNN' got norm={norm!r}; use one of {', '.join(NORMS)} or None")
    if jk not in (None, *JK_MODES):
        raise ValueError(f"'GNN' got jk={jk!r}; use one of {', '.join(JK_MODES)} or None")


def _norm(norm: str, width: int) -> nn.Module:
    """A norm of :class:`GNN`'s hidden layers."""
    if norm == "batch":
        return DistBatchNorm(width)
    return DistLayerNorm(width, mode="node")


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
    stages by :class:`pyg_dist.strategies.layer_pipeline.Pipeline`.

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
