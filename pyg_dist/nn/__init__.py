"""Drop-in distributed layers: PyG's layers that also run on a
:class:`~pyg_dist.DistEdgeIndex`, the norms whose statistics span every rank,
the generic path for any one-hop layer, label propagation and Correct &
Smooth across ranks, :func:`to_distributed` for a whole model, and
:func:`dropout` and :func:`dropout_edge` drawn alike on every rank."""
from pyg_dist.nn.convert import to_distributed
from pyg_dist.nn.dropout_edge import dropout_edge
from pyg_dist.nn.gat_conv import DistGATConv
from pyg_dist.nn.gcn2_conv import DistGCN2Conv
from pyg_dist.nn.gcn_conv import DistGCNConv
from pyg_dist.nn.generic import DistMessagePassing, register_exact
from pyg_dist.nn.hgt_conv import DistHGTConv
from pyg_dist.nn.label_prop import DistCorrectAndSmooth, DistLabelPropagation
from pyg_dist.nn.lightgcn import DistLGConv, DistLightGCN
from pyg_dist.nn.norm import DistBatchNorm, DistGraphNorm, DistLayerNorm
from pyg_dist.nn.sage_conv import DistSAGEConv
from pyg_dist.nn.twin import DistLayer
from pyg_dist.utils.dropout import dropout

__all__ = [
    "DistGCNConv",
    "DistSAGEConv",
    "DistGATConv",
    "DistGCN2Conv",
    "DistHGTConv",
    "DistMessagePassing",
    "DistLayer",
    "DistBatchNorm",
    "DistLayerNorm",
    "DistGraphNorm",
    "DistLabelPropagation",
    "DistCorrectAndSmooth",
    "DistLGConv",
    "DistLightGCN",
    "to_distributed",
    "register_exact",
    "dropout",
    "dropout_edge",
]
