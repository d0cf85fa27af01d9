"""The heterogeneous models the CLI and benchmarks train on a labelled node
type (ogbn-mag's papers): ``to_hetero`` GraphSAGE, HGT and R-GCN, built from a
graph's ``metadata()``."""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch_geometric.nn import HGTConv, RGCNConv, SAGEConv, to_hetero

__all__ = ["HeteroSAGE", "HGT", "RGCN", "hetero_model", "HETERO_MODELS", "READS"]

#: Kinds of :func:`hetero_model`.
HETERO_MODELS = ("hetero-sage", "hgt", "rgcn")
#: What a heterogeneous model reads (its ``reads`` attribute): the type
#: dictionaries ``(x_dict, edge_index_dict)``, or the homogeneous view's
#: ``(x, edge_index, edge_type, node_type)``.
READS = ("dicts", "homogeneous")

Metadata = tuple[list[str], list[tuple[str, str, str]]]


class _SAGE(nn.Module):
    """``layers`` GraphSAGE layers with ReLU in between: the template
    :class:`HeteroSAGE` gives :func:`~torch_geometric.nn.to_hetero`."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 layers: int) -> None:
        super().__init__()
        sizes = [in_channels] + [hidden_channels] * (layers - 1) + [out_channels]
        self.convs = nn.ModuleList(SAGEConv((i, i), o) for i, o in zip(sizes[:-1], sizes[1:]))

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for k, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if k < len(self.convs) - 1:
                x = x.relu()
        return x


def _check(cls: str, metadata: Metadata, node_type: str, layers: int) -> None:
    if node_type not in metadata[0]:
        raise ValueError(f"'{cls}' got node_type='{node_type}', which the metadata does not "
                         f"have; use one of {', '.join(metadata[0])}")
    if layers < 1:
        raise ValueError(f"'{cls}' needs layers >= 1 (got {layers})")


class HeteroSAGE(nn.Module):
    r"""GraphSAGE made heterogeneous by :func:`~torch_geometric.nn.to_hetero`
    with ``aggr="sum"`` (`"Modeling Relational Data with Graph Convolutional
    Networks" <https://arxiv.org/abs/1703.06103>`_'s recipe for GNNs on
    heterogeneous graphs): one :class:`~torch_geometric.nn.SAGEConv` per
    edge type and layer, summed over the edge types into a node type,

    .. math::
        \mathbf{x}^{(l+1)}_i = \sum_{r \in \mathcal{R}(i)} \left(\mathbf{W}_{1,r}
        \mathbf{x}^{(l)}_i + \mathbf{W}_{2,r} \cdot \mathrm{mean}_{j \in
        \mathcal{N}_r(i)} \mathbf{x}^{(l)}_j\right),

    with ReLU between layers. Returns the logits of ``node_type``. Its layers
    are named ``sage.convs.<k>`` (ledger: ``sage.convs.<k>[<source type>]``).

    Args:
        metadata (tuple[list[str], list[tuple[str, str, str]]]): The graph's
            ``metadata()``.
        in_channels (int): Input features of every node type.
        hidden_channels (int): Hidden features.
        out_channels (int): Classes.
        node_type (str): The labelled node type.
        layers (int, optional): Number of layers. (default: :obj:`2`)

    Shapes:
        - **input:** node features ``{type: (N_t, in_channels)}``, edge
          indices ``{edge type: (2, E_r)}``
        - **output:** logits :math:`(N_{node\_type}, \text{out\_channels})`
    """

    reads: ClassVar[str] = "dicts"

    def __init__(self, metadata: Metadata, in_channels: int, hidden_channels: int,
                 out_channels: int, node_type: str, layers: int = 2) -> None:
        super().__init__()
        _check("HeteroSAGE", metadata, node_type, layers)
        self.node_type = node_type
        self.sage = to_hetero(_SAGE(in_channels, hidden_channels, out_channels, layers),
                              metadata, aggr="sum")

    def forward(self, x_dict: dict[str, Tensor], edge_index_dict: dict[Any, Any]) -> Tensor:
        return self.sage(x_dict, edge_index_dict)[self.node_type]


class HGT(nn.Module):
    r"""The Heterogeneous Graph Transformer from the `"Heterogeneous Graph
    Transformer" <https://arxiv.org/abs/2003.01332>`_ paper: ``layers``
    :class:`~torch_geometric.nn.HGTConv` layers of ``heads`` heads with ReLU
    after each, then a linear head on ``node_type``,

    .. math::
        \mathbf{Z} = \mathbf{H}^{(L)}_{node\_type} \mathbf{W} + \mathbf{b}.

    Args:
        metadata (tuple[list[str], list[tuple[str, str, str]]]): The graph's
            ``metadata()``.
        in_channels (int): Input features of every node type.
        hidden_channels (int): Hidden features (divisible by ``heads``).
        out_channels (int): Classes.
        node_type (str): The labelled node type.
        layers (int, optional): Number of HGT layers. (default: :obj:`2`)
        heads (int, optional): Attention heads. (default: :obj:`2`)

    Shapes:
        - **input:** node features ``{type: (N_t, in_channels)}``, edge
          indices ``{edge type: (2, E_r)}``
        - **output:** logits :math:`(N_{node\_type}, \text{out\_channels})`
    """

    reads: ClassVar[str] = "dicts"

    def __init__(self, metadata: Metadata, in_channels: int, hidden_channels: int,
                 out_channels: int, node_type: str, layers: int = 2, heads: int = 2) -> None:
        super().__init__()
        _check("HGT", metadata, node_type, layers)
        if heads < 1 or hidden_channels % heads:
            raise ValueError(f"'HGT' needs hidden_channels ({hidden_channels}) divisible by "
                             f"heads ({heads}); change either")
        self.node_type = node_type
        sizes = [in_channels] + [hidden_channels] * layers
        self.convs = nn.ModuleList(HGTConv(i, o, metadata, heads=heads)
                                   for i, o in zip(sizes[:-1], sizes[1:]))
        self.head = nn.Linear(hidden_channels, out_channels)

    def forward(self, x_dict: dict[str, Tensor], edge_index_dict: dict[Any, Any]) -> Tensor:
        for conv in self.convs:
            x_dict = {t: v.relu() for t, v in conv(x_dict, edge_index_dict).items()}
        return self.head(x_dict[self.node_type])


class RGCN(nn.Module):
    r"""The relational GCN from the `"Modeling Relational Data with Graph
    Convolutional Networks" <https://arxiv.org/abs/1703.06103>`_ paper on the
    homogeneous view of the graph (``to_homogeneous()``): ``layers``
    :class:`~torch_geometric.nn.RGCNConv` layers with basis decomposition and
    ReLU in between,

    .. math::
        \mathbf{x}^{(l+1)}_i = \mathbf{\Theta}_{\textrm{root}} \mathbf{x}^{(l)}_i +
        \sum_{r \in \mathcal{R}} \sum_{j \in \mathcal{N}_r(i)} \frac{1}{|\mathcal{N}_r(i)|}
        \mathbf{\Theta}_r \mathbf{x}^{(l)}_j, \quad \mathbf{\Theta}_r = \sum_b a_{rb}
        \mathbf{V}_b.

    Returns the logits of the nodes of ``node_type``, in order.

    Args:
        metadata (tuple[list[str], list[tuple[str, str, str]]]): The graph's
            ``metadata()`` (edge type :math:`r` is ``edge_type == r``).
        in_channels (int): Input features of every node type.
        hidden_channels (int): Hidden features.
        out_channels (int): Classes.
        node_type (str): The labelled node type.
        layers (int, optional): Number of layers. (default: :obj:`2`)
        num_bases (int, optional): Bases of the decomposition. (default: :obj:`8`)

    Shapes:
        - **input:** node features :math:`(N, \text{in\_channels})`, edge
          indices :math:`(2, E)`, edge types :math:`(E)`, node types :math:`(N)`
        - **output:** logits :math:`(N_{node\_type}, \text{out\_channels})`
    """

    reads: ClassVar[str] = "homogeneous"

    def __init__(self, metadata: Metadata, in_channels: int, hidden_channels: int,
                 out_channels: int, node_type: str, layers: int = 2, num_bases: int = 8) -> None:
        super().__init__()
        _check("RGCN", metadata, node_type, layers)
        self.node_type = metadata[0].index(node_type)
        relations = len(metadata[1])
        sizes = [in_channels] + [hidden_channels] * (layers - 1) + [out_channels]
        self.convs = nn.ModuleList(RGCNConv(i, o, relations, num_bases=num_bases)
                                   for i, o in zip(sizes[:-1], sizes[1:]))

    def forward(self, x: Tensor, edge_index: Any, edge_type: Tensor,
                node_type: Tensor) -> Tensor:
        for k, conv in enumerate(self.convs):
            x = conv(x, edge_index, edge_type)
            if k < len(self.convs) - 1:
                x = x.relu()
        return x[node_type == self.node_type]


def hetero_model(kind: str, metadata: Metadata, in_channels: int, hidden_channels: int,
                 out_channels: int, node_type: str, layers: int = 2, heads: int = 2,
                 seed: int | None = None) -> nn.Module:
    """The heterogeneous model ``kind`` (PyG layers; make it distributed with
    :func:`pyg_dist.nn.to_distributed`).

    Args:
        kind (str): :obj:`"hetero-sage"` (:class:`HeteroSAGE`), :obj:`"hgt"`
            (:class:`HGT`) or :obj:`"rgcn"` (:class:`RGCN`).
        metadata (tuple[list[str], list[tuple[str, str, str]]]): The graph's
            ``metadata()``.
        in_channels (int): Input features of every node type.
        hidden_channels (int): Hidden features.
        out_channels (int): Classes.
        node_type (str): The labelled node type.
        layers (int, optional): Number of graph layers. (default: :obj:`2`)
        heads (int, optional): Attention heads of :obj:`"hgt"`. (default: :obj:`2`)
        seed (int, optional): Draws the parameters from this seed, leaving the
            global random state as it was; :obj:`None` draws them from the
            global state. (default: :obj:`None`)
    """
    if kind not in HETERO_MODELS:
        raise ValueError(f"'hetero_model' got kind='{kind}'; use one of "
                         f"{', '.join(HETERO_MODELS)}")
    def build() -> nn.Module:
        args = (metadata, in_channels, hidden_channels, out_channels, node_type)
        if kind == "hetero-sage":
            return HeteroSAGE(*args, layers=layers)
        if kind == "hgt":
            return HGT(*args, layers=layers, heads=heads)
        return RGCN(*args, layers=layers)

    if seed is None:
        return build()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()
