r"""The gzipped CSV files of OGB's downloaded folders, read as streams: a
chunk of text at a time, parsed into numpy arrays, with the checks that name
what to do when a file is missing or damaged. Shared by the homogeneous
datasets (:mod:`pyg_dist.datasets.ogb`) and ogbn-mag
(:mod:`pyg_dist.datasets.ogb_mag`).
"""
from __future__ import annotations

import gzip
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["TEXT_CHUNK", "csv_chunks", "csv_ids", "csv_total", "fill_rows", "labels",
           "check_ids", "check_finite", "check_count", "not_downloaded"]

#: Bytes of decompressed text parsed at a time.
TEXT_CHUNK = 1 << 24


def csv_chunks(path: Path, dtype: Any, columns: int | None = None) -> Iterator[np.ndarray]:
    """The rows of the gzipped CSV ``path`` (no header) as ``[rows, columns]``
    arrays, about :data:`TEXT_CHUNK` bytes of text at a time."""
    tail = b""
    with gzip.open(path, "rb") as f:
        while True:
            text = f.read(TEXT_CHUNK)
            if not text:
                break
            text = tail + text
            cut = text.rfind(b"\n") + 1
            if cut == 0:
                tail = text
                continue
            text, tail = text[:cut], text[cut:]
            yield _parse(text, dtype, columns, path)
    if tail.strip():
        yield _parse(tail, dtype, columns, path)


def _parse(text: bytes, dtype: Any, columns: int | None, path: Path) -> np.ndarray:
    try:
        block = np.loadtxt(io.BytesIO(text), delimiter=",", dtype=dtype, ndmin=2)
    except ValueError as exc:
        raise ValueError(f"'{path}' is not a CSV of numbers ({exc}); download it again") \
            from exc
    if columns is not None and block.shape[1] != columns:
        raise ValueError(f"'{path}' has {block.shape[1]} columns, expected {columns}; "
                         f"download it again")
    return block


def csv_ids(path: Path, num_nodes: int) -> np.ndarray:
    """The node ids of the CSV ``path`` (one per line, a split's file), checked
    to lie in ``[0, num_nodes)``."""
    ids = np.concatenate([c.reshape(-1) for c in csv_chunks(path, np.int64)] or
                         [np.empty(0, np.int64)])
    check_ids(ids, num_nodes, path)
    return ids


def csv_total(path: Path) -> int:
    """The sum of the numbers in ``path`` (``num-node-list``, ``num-edge-list``)."""
    if not path.is_file():
        raise FileNotFoundError(f"'{path}' is missing; copy OGB's 'raw' folder again")
    return int(sum(int(c.sum()) for c in csv_chunks(path, np.int64)))


def fill_rows(path: Path, num_nodes: int, dtype: Any,
              allocate: Callable[[tuple[int, ...]], np.ndarray], label: bool = False) -> None:
    """Streams the CSV ``path`` of one row per node into the array that
    ``allocate(shape)`` returns once the width is known (``[N, F]``, or
    ``[N]`` for a ``label``: one column, NaN as ``-1``)."""
    if not path.is_file():
        raise FileNotFoundError(f"'{path}' is missing; copy OGB's 'raw' folder again")
    target, filled = None, 0
    for block in csv_chunks(path, np.float64 if label else dtype):
        if target is None:
            target = allocate((num_nodes,) if label else (num_nodes, block.shape[1]))
        end = filled + block.shape[0]
        if end > num_nodes:
            check_count(end, num_nodes, path, "rows", None, more=True)
        if label:
            target[filled:end] = labels(block[:, 0])
        else:
            check_finite(block, path, filled)
            target[filled:end] = block
        filled = end
    check_count(filled, num_nodes, path, "rows", None)


def labels(values: np.ndarray) -> np.ndarray:
    """Class ids as int64, ``-1`` where the label is NaN (no label)."""
    values = np.asarray(values)
    if np.issubdtype(values.dtype, np.floating):
        return np.where(np.isnan(values), -1, values).astype(np.int64)
    return values.astype(np.int64)


def check_ids(ids: np.ndarray, num_nodes: int, path: Path, what: str = "nodes") -> None:
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise ValueError(f"'{path}' names {what} outside [0, {num_nodes}); the dataset is "
                         f"damaged: download it again")


def check_finite(block: np.ndarray, path: Path, first_row: int) -> None:
    if not np.isfinite(block).all():
        rows = np.flatnonzero(~np.isfinite(block.reshape(block.shape[0], -1)).all(axis=1))
        raise ValueError(f"'{path}' has NaN or infinite features in rows "
                         f"{(rows[:5] + first_row).tolist()}; clean them (numpy.nan_to_num) "
                         f"or download the dataset again")


def check_count(count: int, expected: int, path: Path, what: str, source: Path | None,
                more: bool = False) -> None:
    if more or count != expected:
        says = f"{source.name} says" if source is not None else "the dataset has"
        raise ValueError(f"'{path}' holds {'more than ' if more else ''}{count} {what}, "
                         f"{says} {expected}; the files are from different downloads: "
                         f"download the dataset again")


def not_downloaded(name: str, root: Path, folder: str, first: str) -> FileNotFoundError:
    """The error of a dataset whose folder is not under ``root`` (``first``:
    the file that was looked for), with the command that downloads it."""
    return FileNotFoundError(
        f"dataset '{name}' is not in '{root}' (no {folder}/raw/{first}); pyg_dist "
        f"does not download: on a machine with internet run `pip install ogb && python -c "
        f"\"from ogb.nodeproppred import NodePropPredDataset; "
        f"NodePropPredDataset('{name}', root='{root}')\"` and copy '{root / folder}' here"
    )
