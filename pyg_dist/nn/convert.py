"""``to_distributed``: swap PyG's GCNConv/SAGEConv for their Dist twins."""
from __future__ import annotations

from typing import Any

from torch import nn
from torch_geometric.nn import GCNConv, SAGEConv

from pyg_dist.nn.gcn_conv import DistGCNConv
from pyg_dist.nn.sage_conv import DistSAGEConv

__all__ = ["to_distributed"]


def to_distributed(model: nn.Module, halo: Any = None) -> nn.Module:
    """Returns ``model`` with every :class:`~torch_geometric.nn.GCNConv` and
    :class:`~torch_geometric.nn.SAGEConv` replaced (in place) by
    :class:`DistGCNConv` / :class:`DistSAGEConv` with the same arguments and
    weights. Each Dist layer is named by its module path in the ledger.

    Args:
        model (torch.nn.Module): A model, or a single layer.
        halo (optional): Halo policy for every converted layer; :obj:`None`
            keeps the graph's default. (default: :obj:`None`)
    """
    if isinstance(model, (GCNConv, SAGEConv)):
        return _convert(model, halo, "conv")
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, (GCNConv, SAGEConv)):
                path = f"{name}.{child_name}" if name else child_name
                setattr(module, child_name, _convert(child, halo, path))
    return model


def _convert(conv: Any, halo: Any, path: str) -> nn.Module:
    if isinstance(conv, (DistGCNConv, DistSAGEConv)):
        if halo is not None:
            conv.halo = halo
        conv.halo_name = getattr(conv, "halo_name", None) or path
        return conv
    twin: nn.Module
    mp_kwargs = {"flow": conv.flow, "node_dim": conv.node_dim}
    if isinstance(conv, GCNConv):
        twin = DistGCNConv(
            conv.in_channels, conv.out_channels, improved=conv.improved, cached=conv.cached,
            add_self_loops=conv.add_self_loops, normalize=conv.normalize,
            bias=conv.bias is not None, halo=halo, **mp_kwargs,
        )
    else:
        twin = DistSAGEConv(
            conv.in_channels, conv.out_channels, aggr=conv.aggr, normalize=conv.normalize,
            root_weight=conv.root_weight, project=conv.project,
            bias=conv.lin_l.bias is not None, halo=halo, **mp_kwargs,
        )
    twin.load_state_dict(conv.state_dict())
    param = next(conv.parameters(), None)
    if param is not None and not isinstance(param, nn.parameter.UninitializedParameter):
        twin.to(param.device)
    twin.train(conv.training)
    twin.halo_name = path
    return twin
