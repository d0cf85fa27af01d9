"""Planetoid citation graphs (Cora, CiteSeer, PubMed) through PyG's own loader."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["planetoid", "PLANETOID"]

PLANETOID = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}


def planetoid(name: str, root: str | os.PathLike) -> Any:
    """Loads Cora, CiteSeer or PubMed with PyG's own loader, with
    row-normalised features and the public split.

    If the raw files are present (``root/Cora/raw/ind.cora.x``, ...) nothing
    is downloaded; a read-only ``root`` is copied to a temporary folder first.

    Args:
        name (str): :obj:`"cora"`, :obj:`"citeseer"` or :obj:`"pubmed"`
            (any case).
        root (str or os.PathLike): The folder holding (or to download into)
            ``<Name>/raw``.
    """
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
