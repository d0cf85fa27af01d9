"""pyg_dist: distributed full-graph GNN training for PyTorch Geometric."""
import importlib as _importlib
import warnings as _warnings

from tqdm.std import TqdmWarning as _TqdmWarning

# torch_geometric imports tqdm.auto, which in a Jupyter kernel without ipywidgets warns
# "IProgress not found" and falls back to the text bar, the one pyg_dist draws anyway:
# that one warning is left out while tqdm.auto is first imported; every other is shown.
with _warnings.catch_warnings():
    _warnings.filterwarnings("ignore", "IProgress not found", _TqdmWarning)
    _importlib.import_module("tqdm.autonotebook")

from pyg_dist.data.dist_data import DistData, DistEdgeIndex
from pyg_dist.data.hetero_data import DistHeteroData
from pyg_dist.halo.gather import gather
from pyg_dist.loop import (
    DistributedModel,
    accuracy,
    cross_entropy,
    global_mean,
    read_embeddings,
    save_embeddings,
    save_model,
    save_predictions,
)
from pyg_dist.partitioning import PartitionMeta, partition
from pyg_dist.runtime.distributed import init, shutdown
from pyg_dist.runtime.launch import RankFailed, launch
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
    "DistributedModel",
    "cross_entropy",
    "global_mean",
    "accuracy",
    "save_predictions",
    "save_model",
    "save_embeddings",
    "read_embeddings",
    "gather",
    "__version__",
]
