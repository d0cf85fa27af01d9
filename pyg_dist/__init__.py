"""pyg_dist: distributed full-graph GNN training for PyTorch Geometric."""
from pyg_dist.data import DistData, DistEdgeIndex
from pyg_dist.distributed import init, shutdown
from pyg_dist.hetero_data import DistHeteroData
from pyg_dist.launch import RankFailed, launch
from pyg_dist.partitioning import PartitionMeta, partition
from pyg_dist.version import __version__

__all__ = [
    "partition",
    "PartitionMeta",
    "DistData",
    "DistEdgeIndex",
    "DistHeteroData",
    "init",
    "shutdown",
    "launch",
    "RankFailed",
    "__version__",
]
