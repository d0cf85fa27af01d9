"""The small models the CLI and demos train: Kipf & Welling's GCN and GraphSAGE."""
from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from pyg_dist.halo import dropout
from pyg_dist.nn import DistGCNConv, DistSAGEConv

__all__ = ["GNN", "MODELS"]

MODELS = ("gcn", "sage")


class GNN(nn.Module):
    r"""``layers`` graph convolutions with ReLU in between and dropout before
    each (as in the GCN paper's recipe), e.g. for GCN with two layers:

    .. math::
        \mathbf{Z} = \hat{\mathbf{A}}\, \mathrm{drop}(\mathrm{ReLU}(\hat{\mathbf{A}}\,
        \mathrm{drop}(\mathbf{X}) \mathbf{W}_1)) \mathbf{W}_2

    Runs on a plain ``edge_index`` (single process) and on a
    :class:`~pyg_dist.DistEdgeIndex` (distributed). Distributed, dropout is
    :func:`pyg_dist.nn.dropout` (masks drawn alike on every rank), so the
    first layer's halo of the static features is fetched once. Layers are
    named ``convs.<k>`` in the halo ledger.

    Args:
        kind (str): :obj:`"gcn"` or :obj:`"sage"`.
        in_channels (int): Input features.
        hidden_channels (int): Hidden features.
        out_channels (int): Classes.
        layers (int, optional): Number of convolutions. (default: :obj:`2`)
        dropout (float, optional): Dropout probability. (default: :obj:`0.5`)
        halo (optional): Halo policy for every layer. (default: :obj:`None`)
        **kwargs (optional): Arguments of every convolution (e.g. ``aggr``).
    """

    def __init__(self, kind: str, in_channels: int, hidden_channels: int, out_channels: int,
                 layers: int = 2, dropout: float = 0.5, halo: Any = None, **kwargs: Any) -> None:
        super().__init__()
        if kind not in MODELS:
            raise ValueError(f"'GNN' got kind='{kind}'; use one of {', '.join(MODELS)}")
        if layers < 1:
            raise ValueError(f"'GNN' needs layers >= 1 (got {layers})")
        conv = DistGCNConv if kind == "gcn" else DistSAGEConv
        sizes = [in_channels] + [hidden_channels] * (layers - 1) + [out_channels]
        self.convs = nn.ModuleList(
            conv(i, o, halo=halo, **kwargs) for i, o in zip(sizes[:-1], sizes[1:])
        )
        for k, layer in enumerate(self.convs):
            layer.halo_name = f"convs.{k}"  # type: ignore[assignment]
        self.dropout = dropout

    def reset_parameters(self) -> None:
        for conv in self.convs:
            conv.reset_parameters()  # type: ignore[operator]

    def forward(self, x: Tensor, edge_index: Any) -> Tensor:
        conv: Any
        for k, conv in enumerate(self.convs):
            x = dropout(x, self.dropout, self.training, edge_index)
            x = conv(x, edge_index)
            if k < len(self.convs) - 1:
                x = x.relu()
        return x
