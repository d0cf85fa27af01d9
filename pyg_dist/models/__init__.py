"""The models the CLI, demos and benchmarks train: GCN, GraphSAGE, GAT and GIN
stacks and deep models (``pyg_dist.models.gnn``), and models of heterogeneous
graphs (``pyg_dist.models.hetero``)."""
from pyg_dist.models.gnn import DEEP_MODELS, GNN, MODELS, DeepGNN
from pyg_dist.models.hetero import HETERO_MODELS, HGT, READS, RGCN, HeteroSAGE, hetero_model

__all__ = ["GNN", "DeepGNN", "MODELS", "DEEP_MODELS", "HeteroSAGE", "HGT", "RGCN",
           "hetero_model", "HETERO_MODELS", "READS"]
