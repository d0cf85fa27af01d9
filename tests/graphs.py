"""Test graphs: random directed graphs with every awkward feature, and Cora."""
import shutil
from pathlib import Path

import torch
from torch_geometric.data import Data

#: Planetoid's Cora raw files, shipped with the tests (see data/README.md).
CORA_ROOT = Path(__file__).resolve().parent / "data"
CORA_RAW = CORA_ROOT / "Cora" / "raw"


def awkward_graph(num_nodes=150, num_edges=700, num_isolated=10, seed=0, num_features=None):
    """Directed, with self-loops, duplicate edges, isolated nodes and edge weights."""
    g = torch.Generator().manual_seed(seed)
    active = num_nodes - num_isolated
    src = torch.randint(0, active, (num_edges,), generator=g)
    dst = torch.randint(0, active, (num_edges,), generator=g)
    loops = torch.randint(0, active, (12,), generator=g)
    src = torch.cat([src, loops, src[:15]])
    dst = torch.cat([dst, loops, dst[:15]])  # 15 duplicates and 12 self-loops
    perm = torch.randperm(num_nodes, generator=g)  # isolated nodes anywhere in the id range
    edge_index = torch.stack([perm[src], perm[dst]])
    data = Data(edge_index=edge_index, num_nodes=num_nodes,
                edge_weight=torch.rand(edge_index.size(1), generator=g) + 0.1)
    if num_features:
        data.x = torch.randn(num_nodes, num_features, generator=g)
    data.y = torch.randint(0, 3, (num_nodes,), generator=g)
    data.train_mask = torch.rand(num_nodes, generator=g) < 0.5
    data.val_mask = ~data.train_mask
    data.test_mask = ~data.train_mask
    return data


def tiny_graph():
    """Five nodes, one edge and one self-loop: most parts have no halo at all."""
    edge_index = torch.tensor([[0, 2], [1, 2]])
    return Data(edge_index=edge_index, num_nodes=5, x=torch.randn(5, 3),
                y=torch.tensor([0, 1, 0, 1, 0]),
                train_mask=torch.tensor([True, True, False, True, True]))


def cora(tmp_root):
    """The Planetoid Cora graph from the shipped raw files (copied, so that
    PyG's processed files never land in the repository)."""
    from pyg_dist.datasets import planetoid

    target = Path(tmp_root) / "Cora" / "raw"
    if not target.exists():
        shutil.copytree(CORA_RAW, target)
    return planetoid("cora", tmp_root)
