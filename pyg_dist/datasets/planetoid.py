"""Planetoid citation graphs (Cora, CiteSeer, PubMed) through PyG's own loader."""
from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["planetoid", "PLANETOID", "raw_files", "missing_raw_files"]

PLANETOID = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
#: The suffixes of the raw files PyG's ``Planetoid`` reads: ``ind.cora.x``, ...
_RAW = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


def raw_files(name: str, root: str | os.PathLike) -> list[Path]:
    """The raw files of Planetoid dataset ``name`` under ``root``, as PyG's
    ``Planetoid`` reads them (``root/Cora/raw/ind.cora.x``, ...).

    Args:
        name (str): :obj:`"cora"`, :obj:`"citeseer"` or :obj:`"pubmed"`.
        root (str or os.PathLike): The folder holding ``<Name>/raw``.
    """
    raw = Path(root) / PLANETOID[name.lower()] / "raw"
    return [raw / f"ind.{name.lower()}.{suffix}" for suffix in _RAW]


def missing_raw_files(name: str, root: str | os.PathLike) -> list[Path]:
    """Those of ``raw_files`` that are not there.

    Args:
        name (str): :obj:`"cora"`, :obj:`"citeseer"` or :obj:`"pubmed"`.
        root (str or os.PathLike): The folder holding ``<Name>/raw``.
    """
    return [path for path in raw_files(name, root) if not path.is_file()]


def planetoid(name: str, root: str | os.PathLike, download: bool = False) -> Any:
    """Loads Cora, CiteSeer or PubMed with PyG's own loader, with
    row-normalised features and the public split.

    The raw files (``raw_files``: ``root/Cora/raw/ind.cora.x``, ...) are
    read where they are; when one is missing, a :class:`FileNotFoundError`
    names the folder and the files it needs, and nothing is downloaded
    unless ``download`` asks for it. A read-only ``root`` is copied to a
    temporary folder first (PyG writes its processed files beside the raw).

    Args:
        name (str): :obj:`"cora"`, :obj:`"citeseer"` or :obj:`"pubmed"`
            (any case).
        root (str or os.PathLike): The folder holding ``<Name>/raw``.
        download (bool, optional): Let PyG download missing raw files from
            the Planetoid repository on GitHub. (default: :obj:`False`)
    """
    import torch_geometric.transforms as T
    from torch_geometric.datasets import Planetoid

    folder = PLANETOID.get(name.lower())
    if folder is None:
        raise ValueError(f"unknown Planetoid dataset '{name}'; use one of {', '.join(PLANETOID)}")
    missing = missing_raw_files(name, root)
    if missing and not download:
        raise FileNotFoundError(
            f"dataset '{name.lower()}' is not under '{root}': {len(missing)} of its 8 raw files "
            f"are missing from '{missing[0].parent}' (PyG's Planetoid reads "
            f"ind.{name.lower()}.{{{','.join(_RAW)}}} there); copy them there, or pass "
            f"download=True to fetch them (a clone of pyg_dist holds Cora's in tests/data)")
    root = Path(root)
    raw = root / folder / "raw"
    if raw.is_dir() and not os.access(root / folder, os.W_OK):
        root = _writable_copy(raw, folder)
    try:
        with _without_processing_notes():
            return Planetoid(str(root), folder, transform=T.NormalizeFeatures())[0]
    except PermissionError:  # e.g. a read-only mount that os.access did not reveal
        with _without_processing_notes():
            return Planetoid(str(_writable_copy(raw, folder)), folder,
                             transform=T.NormalizeFeatures())[0]


@contextlib.contextmanager
def _without_processing_notes() -> Iterator[None]:
    """Drops the "Processing..." and "Done!" lines PyG prints on stderr the
    first time it processes the raw files (the loader offers no switch);
    anything else printed meanwhile is passed on."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            yield
    finally:
        kept = [line for line in captured.getvalue().splitlines(keepends=True)
                if line.strip() not in ("Processing...", "Done!")]
        sys.stderr.write("".join(kept))


def _writable_copy(raw: Path, folder: str) -> Path:
    """Copies ``raw`` to ``<tmp>/<folder>/raw`` and returns ``<tmp>``."""
    tmp = Path(tempfile.mkdtemp(prefix="pyg_dist-"))
    shutil.copytree(raw, tmp / folder / "raw")
    return tmp
