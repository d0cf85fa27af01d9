"""Graphs to train on: a seeded synthetic graph (the default) and Planetoid."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

__all__ = ["synthetic", "planetoid", "load_dataset", "DATASETS"]

PLANETOID = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
DATASETS = ("synthetic", *PLANETOID)


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


def planetoid(name: str, root: str | os.PathLike) -> Any:
    """Loads Cora, CiteSeer or PubMed with PyG's own loader from ``root``
    (``root/Cora/raw/ind.cora.*``, ...) with row-normalised features, the
    public split. If the raw files are present nothing is downloaded; a
    read-only ``root`` is copied to a temporary folder first."""
    import torch_geometric.transforms as T
    from torch_geometric.datasets import Planetoid

    folder = PLANETOID.get(name.lower())
    if folder is None:
        raise ValueError(f"unknown Planetoid dataset '{name}'; use one of {', '.join(PLANETOID)}")
    root = Path(root)
    raw = root / folder / "raw"
    if raw.is_dir() and not os.access(root / folder, os.W_OK):
        root = _writable_copy(raw, folder)
    try:
        return Planetoid(str(root), folder, transform=T.NormalizeFeatures())[0]
    except PermissionError:  # e.g. a read-only mount that os.access did not reveal
        return Planetoid(str(_writable_copy(raw, folder)), folder,
                         transform=T.NormalizeFeatures())[0]


def _writable_copy(raw: Path, folder: str) -> Path:
    """Copies ``raw`` to ``<tmp>/<folder>/raw`` and returns ``<tmp>``."""
    tmp = Path(tempfile.mkdtemp(prefix="pyg_dist-"))
    shutil.copytree(raw, tmp / folder / "raw")
    return tmp


def load_dataset(name: str, root: str | os.PathLike | None = None, seed: int = 0,
                 **kwargs: Any) -> Any:
    """``"synthetic"`` (seeded, embedded) or a Planetoid name loaded from ``root``."""
    if name == "synthetic":
        return synthetic(seed=seed, **kwargs)
    if name in PLANETOID:
        if root is None:
            raise ValueError(
                f"dataset '{name}' needs a root folder holding {PLANETOID[name]}/raw; pass --root"
            )
        return planetoid(name, root)
    raise ValueError(f"unknown dataset '{name}'; use one of {', '.join(DATASETS)}")
