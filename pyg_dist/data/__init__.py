"""A rank's part of a partitioned graph: :class:`~pyg_dist.DistData` with its
:class:`~pyg_dist.DistEdgeIndex` (homogeneous), :class:`~pyg_dist.DistHeteroData`
(one node set per type, one :class:`DistRelationIndex` per relation) and its
homogeneous view."""
from pyg_dist.data.dist_data import Adj, DistData, DistEdgeIndex
from pyg_dist.data.hetero_data import (
    DistHeteroData,
    DistRelationIndex,
    EdgePart,
    NodePart,
    TypeDict,
)
from pyg_dist.data.hetero_view import homogeneous_view

__all__ = ["DistData", "DistEdgeIndex", "Adj", "DistHeteroData", "DistRelationIndex",
           "NodePart", "EdgePart", "TypeDict", "homogeneous_view"]
