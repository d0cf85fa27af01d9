"""pyg_dist: distributed full-graph GNN training for PyTorch Geometric."""
from pyg_dist.data.dist_data import DistData, DistEdgeIndex
from pyg_dist.data.hetero_data import DistHeteroData
from pyg_dist.partitioning import PartitionMeta, partition
from pyg_dist.runtime.distributed import init, shutdown
from pyg_dist.runtime.launch import RankFailed, launch
from pyg_dist.utils import moved
from pyg_dist.version import __version__

moved.install()

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
