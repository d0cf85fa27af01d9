"""The small embedded demo graph: a seeded stochastic block model."""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["synthetic"]


def synthetic(
    num_nodes: int = 10_000,
    num_classes: int = 8,
    num_features: int = 64,
    avg_degree: float = 16.0,
    homophily: float = 0.45,
    signal: float = 0.15,
    seed: int = 0,
) -> Any:
    r"""A stochastic block model with class-correlated features, seeded.

    Each node gets a class; each undirected edge joins two nodes of the same
    class with probability ``homophily`` and nodes of different classes
    otherwise. Features are the class's random centroid scaled by ``signal``
    plus unit Gaussian noise, so features alone classify poorly and
    aggregating neighbours helps. Splits: 10% train, 10% validation, 80% test.

    Args:
        num_nodes (int, optional): Number of nodes. (default: :obj:`10_000`)
        num_classes (int, optional): Number of classes (blocks). (default: :obj:`8`)
        num_features (int, optional): Width of ``x``. (default: :obj:`64`)
        avg_degree (float, optional): Edges drawn per node, counting each
            undirected edge in both directions, before self-loops and
            duplicates are dropped. (default: :obj:`16.0`)
        homophily (float, optional): Probability that an edge joins two nodes
            of the same class; otherwise its second end's class is drawn
            uniformly. (default: :obj:`0.45`)
        signal (float, optional): Scale of the class centroid in the
            features, against unit noise. (default: :obj:`0.15`)
        seed (int, optional): Seed of the generator; the same seed gives the
            same graph. (default: :obj:`0`)

    Returns:
        :class:`torch_geometric.data.Data` with ``x``, ``y``, ``edge_index``
        (both directions, no self-loops, no duplicates) and the three masks.
    """
    from torch_geometric.data import Data
    from torch_geometric.utils import coalesce

    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, num_classes, (num_nodes,), generator=g)
    by_class = torch.sort(y, stable=True).indices
    class_ptr = torch.zeros(num_classes + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(y, minlength=num_classes), 0, out=class_ptr[1:])

    num_edges = int(num_nodes * avg_degree / 2)
    src = torch.randint(0, num_nodes, (num_edges,), generator=g)
    same = torch.rand(num_edges, generator=g) < homophily
    cls = torch.where(same, y[src], torch.randint(0, num_classes, (num_edges,), generator=g))
    size = class_ptr[cls + 1] - class_ptr[cls]
    offset = (torch.rand(num_edges, generator=g) * size).long()
    dst = by_class[class_ptr[cls] + offset]
    keep = src != dst
    edge_index = torch.stack([torch.cat([src[keep], dst[keep]]), torch.cat([dst[keep], src[keep]])])
    edge_index = coalesce(edge_index, num_nodes=num_nodes)

    centroids = torch.randn(num_classes, num_features, generator=g)
    x = signal * centroids[y] + torch.randn(num_nodes, num_features, generator=g)
    order = torch.randperm(num_nodes, generator=g)
    masks = [torch.zeros(num_nodes, dtype=torch.bool) for _ in range(3)]
    n_train, n_val = num_nodes // 10, num_nodes // 10
    masks[0][order[:n_train]] = True
    masks[1][order[n_train : n_train + n_val]] = True
    masks[2][order[n_train + n_val :]] = True
    return Data(x=x, y=y, edge_index=edge_index, train_mask=masks[0], val_mask=masks[1],
                test_mask=masks[2])
