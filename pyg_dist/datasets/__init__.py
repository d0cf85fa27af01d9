"""Graphs to train on: the small embedded demo graph, large seeded graphs
shaped like real ones, Planetoid, and graph folders on disk."""
from pyg_dist.datasets.community import PRESETS, CommunityGraphConfig, community_graph, preset
from pyg_dist.datasets.hetero import synthetic_mag
from pyg_dist.datasets.load import DATASETS, load_dataset
from pyg_dist.datasets.ondisk import (
    GraphFolder,
    GraphFolderWriter,
    HeteroGraphFolder,
    open_graph_folder,
    write_graph_folder,
)
from pyg_dist.datasets.planetoid import PLANETOID, planetoid
from pyg_dist.datasets.recsys import synthetic_recommendation
from pyg_dist.datasets.sbm import synthetic

__all__ = ["synthetic", "community_graph", "CommunityGraphConfig", "PRESETS", "preset",
           "planetoid", "PLANETOID", "load_dataset", "DATASETS", "GraphFolder",
           "GraphFolderWriter", "HeteroGraphFolder", "open_graph_folder", "write_graph_folder",
           "synthetic_mag", "synthetic_recommendation"]
