"""pyg_dist: distributed full-graph GNN training for PyTorch Geometric."""
__version__ = "0.1.0"
