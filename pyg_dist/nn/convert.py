"""``to_distributed``: any PyG model, made distributed in place."""
from __future__ import annotations

from torch import nn
from torch_geometric.nn import (
    GATConv,
    GCN2Conv,
    GCNConv,
    HGTConv,
    LGConv,
    MessagePassing,
    SAGEConv,
)
from torch_geometric.nn.models import CorrectAndSmooth, LabelPropagation, LightGCN

from pyg_dist.halo import HaloPolicy
from pyg_dist.nn.gat_conv import DistGATConv
from pyg_dist.nn.gcn2_conv import DistGCN2Conv
from pyg_dist.nn.gcn_conv import DistGCNConv
from pyg_dist.nn.generic import DistMessagePassing, exactness
from pyg_dist.nn.hgt_conv import DistHGTConv
from pyg_dist.nn.label_prop import DistCorrectAndSmooth, DistLabelPropagation
from pyg_dist.nn.lightgcn import DistLGConv, DistLightGCN
from pyg_dist.nn.norm import NORMS
from pyg_dist.nn.sage_conv import DistSAGEConv
from pyg_dist.nn.twin import DistLayer

__all__ = ["to_distributed"]

#: PyG layers with a specialised Dist twin (a subclass with a faster exact path).
_TWINS: dict[type, type] = {GCNConv: DistGCNConv, SAGEConv: DistSAGEConv, GATConv: DistGATConv,
                            GCN2Conv: DistGCN2Conv, HGTConv: DistHGTConv,
                            LabelPropagation: DistLabelPropagation, LGConv: DistLGConv}
#: Other modules with a Dist twin (their statistics or sums span every rank).
_MODULES: dict[type, type] = {**NORMS, CorrectAndSmooth: DistCorrectAndSmooth,
                              LightGCN: DistLightGCN}


def to_distributed(model: nn.Module, halo: HaloPolicy | None = None) -> nn.Module:
    """Returns ``model`` with every layer made distributed, in place: each
    message-passing layer becomes its specialised twin (:class:`DistGCNConv`,
    :class:`DistSAGEConv`, :class:`DistGATConv`, :class:`DistGCN2Conv`,
    :class:`DistHGTConv`, :class:`DistLabelPropagation`, :class:`DistLGConv`) or runs
    through the generic path (:class:`DistMessagePassing`), each norm of
    ``pyg_dist.nn.norm.NORMS`` takes its statistics over all ranks, and
    :class:`~torch_geometric.nn.models.CorrectAndSmooth` becomes
    :class:`DistCorrectAndSmooth` and :class:`~torch_geometric.nn.models.LightGCN`
    :class:`DistLightGCN`.
    Layers keep their parameters, buffers, state-dict keys and training mode
    (their class becomes a subclass of their own); each message-passing layer
    is named by its module path in the ledger. A layer that cannot run
    distributed exactly raises, naming the alternatives, and leaves ``model``
    unchanged.

    Args:
        model (torch.nn.Module): A model, or a single layer.
        halo (optional): Halo policy for every converted layer; :obj:`None`
            keeps the graph's default. (default: :obj:`None`)
    """
    modules = list(model.named_modules())
    convs = [(name or "conv", m) for name, m in modules if isinstance(m, MessagePassing)]
    for _, conv in convs:  # check every layer before changing any
        if not isinstance(conv, DistLayer) and type(conv) not in _TWINS:
            exactness(type(conv))
    for path, conv in convs:
        if not isinstance(conv, DistLayer):
            if type(conv) in _TWINS:
                conv.__class__ = _TWINS[type(conv)]
            else:
                DistMessagePassing(conv)
        if halo is not None:
            conv.halo = halo
        conv.halo_name = conv.halo_name or path
    for _, module in modules:
        if type(module) in _MODULES:
            module.__class__ = _MODULES[type(module)]
    return model
