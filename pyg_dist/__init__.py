"""pyg_dist: distributed full-graph GNN training for PyTorch Geometric."""
from pyg_dist.data import DistData, DistEdgeIndex
from pyg_dist.distributed import init, shutdown
from pyg_dist.launch import RankFailed, launch
from pyg_dist.partitioning import PartitionMeta, partition

__version__ = "0.1.0"

__all__ = [
    "partition",
    "PartitionMeta",
    "DistData",
    "DistEdgeIndex",
    "init",
    "shutdown",
    "launch",
    "RankFailed",
    "__version__",
]
