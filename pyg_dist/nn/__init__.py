"""Drop-in distributed layers."""
from pyg_dist.halo.dropout import dropout
from pyg_dist.nn.convert import to_distributed
from pyg_dist.nn.gcn_conv import DistGCNConv
from pyg_dist.nn.sage_conv import DistSAGEConv

__all__ = ["DistGCNConv", "DistSAGEConv", "to_distributed", "dropout"]
