r"""OGB's node-property datasets (ogbn-arxiv, ogbn-products, ogbn-papers100M)
read from the folders OGB downloads, in chunks, with OGB's official split.

Nothing is downloaded here: the folder ``root/ogbn_arxiv/`` (as OGB's own
loaders leave it) must be there. Its files are read as streams, a chunk of
rows at a time, into numpy arrays (:func:`ogbn`) or straight into a graph
folder on disk (:func:`convert_ogbn`), so converting needs memory for one
chunk, not for the graph:

::

    root/ogbn_arxiv/
      raw/edge.csv.gz            "src,dst" per line (ogbn-products: one direction
                                 per pair; OGB adds the reverse of every edge
                                 right after it, and so do we)
      raw/num-node-list.csv.gz   N
      raw/num-edge-list.csv.gz   E (as stored)
      raw/node-feat.csv.gz       N lines of F floats
      raw/node-label.csv.gz      N lines of one class
      raw/node_year.csv.gz       (arxiv) N lines of one year
      split/time/train.csv.gz    node ids, one per line (also valid, test)
    root/ogbn_papers100M/
      raw/data.npz               edge_index [2, E], node_feat [N, 128],
                                 num_nodes_list, num_edges_list, node_year
      raw/node-label.npz         node_label [N, 1] float, NaN where unlabelled
      split/time/...             as above

Labels come out as ``y`` of shape ``[N]`` (int64; ``-1`` where OGB has none),
where PyG's ``PygNodePropPredDataset`` keeps ``[N, 1]``: the masks of the
official split pick the labelled nodes. :class:`Evaluator` computes OGB's
reported metric (accuracy for these three), and equals the accuracies
:func:`pyg_dist.train` reports on the test mask.
"""
from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pyg_dist.datasets.ogb_csv import (
    check_count,
    check_finite,
    check_ids,
    csv_chunks,
    csv_ids,
    csv_total,
    fill_rows,
    labels,
    not_downloaded,
)
from pyg_dist.datasets.ogb_mag import MAG_NAME
from pyg_dist.datasets.ondisk import GraphFolder, GraphFolderWriter

__all__ = ["OGB", "OgbSpec", "ogbn", "convert_ogbn", "Evaluator", "EVALUATED"]

#: Rows of a binary array copied at a time.
ROW_CHUNK = 1 << 20


@dataclass(frozen=True)
class OgbSpec:
    """What OGB's ``master.csv`` says of a node-property dataset.

    Attributes:
        folder: The dataset's folder under ``root`` (its name, ``-`` as ``_``).
        split: The official split's folder under ``split/``.
        num_classes: Classes of the label.
        add_inverse_edge: Whether the reverse of every stored edge is added.
        binary: Whether ``raw/`` holds ``data.npz`` instead of CSV files.
        extra: Additional node files (``raw/<name>.csv.gz`` or ``data.npz`` keys).
    """

    folder: str
    split: str
    num_classes: int
    add_inverse_edge: bool
    binary: bool
    extra: tuple[str, ...] = ()


OGB = {
    "ogbn-arxiv": OgbSpec("ogbn_arxiv", "time", 40, False, False, ("node_year",)),
    "ogbn-products": OgbSpec("ogbn_products", "sales_ranking", 47, True, False),
    "ogbn-papers100M": OgbSpec("ogbn_papers100M", "time", 172, False, True, ("node_year",)),
}
_SPLITS = {"train": "train_mask", "valid": "val_mask", "test": "test_mask"}
#: The datasets :class:`Evaluator` knows: accuracy is OGB's metric for each.
EVALUATED = (*OGB, MAG_NAME)


def ogbn(name: str, root: str | os.PathLike) -> Any:
    """The OGB dataset ``name`` from ``root``, as a :class:`torch_geometric.data.Data`
    with ``x``, ``y`` (``[N]``), ``node_year`` where OGB has it, and the
    official split as ``train_mask``, ``val_mask``, ``test_mask``.

    Args:
        name (str): :obj:`"ogbn-arxiv"`, :obj:`"ogbn-products"` or
            :obj:`"ogbn-papers100M"`.
        root (str or os.PathLike): The folder OGB downloaded into (holding
            ``ogbn_arxiv/raw``, ...).
    """
    import torch
    from torch_geometric.data import Data

    sink = _Arrays()
    num_nodes, num_edges = _read(name, Path(root), sink)
    data = Data(edge_index=torch.from_numpy(sink.arrays.pop("edges")), num_nodes=num_nodes)
    for key, value in sink.arrays.items():
        data[key] = torch.from_numpy(value)
    for key, ids in sink.splits.items():
        mask = torch.zeros(num_nodes, dtype=torch.bool)
        mask[torch.from_numpy(ids)] = True
        data[key] = mask
    return data


def convert_ogbn(name: str, root: str | os.PathLike, out_dir: str | os.PathLike,
                 overwrite: bool = False) -> GraphFolder:
    """Streams the OGB dataset ``name`` from ``root`` into the graph folder
    ``out_dir`` (:class:`~pyg_dist.datasets.GraphFolder`), a chunk at a time; the
    folder appears only once complete.

    Args:
        name (str): An OGB node-property dataset (:data:`OGB`).
        root (str or os.PathLike): The folder OGB downloaded into.
        out_dir (str or os.PathLike): The graph folder to write.
        overwrite (bool, optional): Replace an existing ``out_dir``.
            (default: :obj:`False`)
    """
    _spec(name, Path(root))  # a missing dataset fails before a folder is made
    with GraphFolderWriter(out_dir, overwrite) as writer:
        num_nodes, num_edges = _read(name, Path(root), writer)
        return writer.commit(num_nodes, num_edges, name, OGB[name].num_classes)


class Evaluator:
    """OGB's evaluator of a node-property dataset: the same input and output
    as ``ogb.nodeproppred.Evaluator`` (whose metric for these datasets is
    accuracy), without the ``ogb`` package. For ogbn-mag, as in OGB, it takes
    the papers' rows only.

    Args:
        name (str): An OGB node-property dataset (:data:`EVALUATED`).

    Example::

        evaluator = Evaluator("ogbn-arxiv")
        evaluator.eval({"y_true": y[test_idx], "y_pred": pred[test_idx]})  # {"acc": ...}
        paper = mag["paper"]
        Evaluator("ogbn-mag").eval({"y_true": paper.y[paper.test_mask],
                                    "y_pred": pred[paper.test_mask]})
    """

    eval_metric = "acc"

    def __init__(self, name: str) -> None:
        if name not in EVALUATED:
            raise ValueError(f"no OGB evaluator for '{name}'; use one of "
                             f"{', '.join(EVALUATED)}")
        self.name = name

    def eval(self, input_dict: dict[str, Any]) -> dict[str, float]:
        """``{"acc": ...}`` of ``input_dict["y_pred"]`` against ``input_dict["y_true"]``
        (arrays or tensors of class ids, shape ``[n]`` or ``[n, 1]``)."""
        for key in ("y_true", "y_pred"):
            if isinstance(input_dict[key], dict):
                raise ValueError(f"'Evaluator' got {key} as a dict of node types; pass the "
                                 f"labelled type's rows, e.g. {key}['paper']")
        y_true, y_pred = (np.asarray(_numpy(input_dict[k])).reshape(-1)
                          for k in ("y_true", "y_pred"))
        if y_true.shape != y_pred.shape:
            raise ValueError(f"y_true has {y_true.size} entries and y_pred {y_pred.size}; "
                             f"pass one prediction per labelled node")
        return {"acc": float((y_true == y_pred).mean()) if y_true.size else 0.0}


def _numpy(value: Any) -> Any:
    return value.detach().cpu().numpy() if hasattr(value, "detach") else value


class _Arrays:
    """A sink like :class:`GraphFolderWriter` that keeps arrays in memory."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.splits: dict[str, np.ndarray] = {}

    def edges(self, num_edges: int, dtype: Any = np.int64) -> np.ndarray:
        self.arrays["edges"] = np.empty((2, num_edges), dtype=np.int64)  # PyG's dtype
        return self.arrays["edges"]

    def node_array(self, name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        self.arrays[name] = np.empty(shape, dtype=dtype)
        return self.arrays[name]

    def split(self, mask_name: str, ids: np.ndarray) -> None:
        self.splits[mask_name] = np.asarray(ids, dtype=np.int64)


def _spec(name: str, root: Path) -> OgbSpec:
    if name not in OGB:
        raise ValueError(f"unknown OGB dataset '{name}'; use one of {', '.join(OGB)}")
    spec = OGB[name]
    first = "data.npz" if spec.binary else "edge.csv.gz"
    if not (root / spec.folder / "raw" / first).is_file():
        raise not_downloaded(name, root, spec.folder, first)
    return spec


def _read(name: str, root: Path, sink: Any) -> tuple[int, int]:
    """Streams dataset ``name`` into ``sink``; returns (nodes, edges as stored by us)."""
    spec = _spec(name, root)
    folder = root / spec.folder
    raw = folder / "raw"
    if spec.binary:
        num_nodes, num_edges = _read_binary(raw, spec, sink)
    else:
        num_nodes, num_edges = _read_csv(raw, spec, sink)
    for file, mask in _SPLITS.items():
        path = folder / "split" / spec.split / f"{file}.csv.gz"
        if not path.is_file():
            raise FileNotFoundError(f"'{path}' is missing: the official split of '{name}' is "
                                    f"incomplete; copy OGB's 'split' folder again")
        sink.split(mask, csv_ids(path, num_nodes))
    return num_nodes, num_edges


def _read_csv(raw: Path, spec: OgbSpec, sink: Any) -> tuple[int, int]:
    num_nodes = csv_total(raw / "num-node-list.csv.gz")
    stored = csv_total(raw / "num-edge-list.csv.gz")
    factor = 2 if spec.add_inverse_edge else 1
    edges = sink.edges(factor * stored, _id_dtype(num_nodes))
    path, filled = raw / "edge.csv.gz", 0
    for block in csv_chunks(path, np.int64, columns=2):
        check_ids(block, num_nodes, path)
        end = filled + block.shape[0]
        if end > stored:
            check_count(end, stored, path, "edges", raw / "num-edge-list.csv.gz", more=True)
        if factor == 1:
            edges[:, filled:end] = block.T
        else:  # OGB's order: each edge, then its reverse
            edges[:, 2 * filled : 2 * end : 2] = block.T
            edges[:, 2 * filled + 1 : 2 * end : 2] = block.T[::-1]
        filled = end
    check_count(filled, stored, path, "edges", raw / "num-edge-list.csv.gz")
    feat = raw / "node-feat.csv.gz"
    if feat.is_file():
        _fill_rows(sink, "x", feat, num_nodes, np.float32)
    _fill_rows(sink, "y", raw / "node-label.csv.gz", num_nodes, np.int64, label=True)
    for extra in spec.extra:
        _fill_rows(sink, extra, raw / f"{extra}.csv.gz", num_nodes, np.int64, label=True)
    return num_nodes, factor * stored


def _fill_rows(sink: Any, name: str, path: Path, num_nodes: int, dtype: Any,
               label: bool = False) -> None:
    """Node attribute ``name`` from the CSV ``path`` of one row per node;
    ``label``: one column, kept as ``[N]``."""
    fill_rows(path, num_nodes, dtype, lambda shape: sink.node_array(name, shape, dtype), label)


def _read_binary(raw: Path, spec: OgbSpec, sink: Any) -> tuple[int, int]:
    npz = raw / "data.npz"
    with zipfile.ZipFile(npz) as archive:
        num_nodes = int(_npz_array(archive, "num_nodes_list").sum())
        num_edges = int(_npz_array(archive, "num_edges_list").sum())
        shape, _ = _npz_header(archive, "edge_index")
        if tuple(shape) != (2, num_edges):
            raise ValueError(f"'{npz}' holds edge_index of shape {tuple(shape)}, its "
                             f"num_edges_list says [2, {num_edges}]; download it again")
        edges = sink.edges(num_edges, _id_dtype(num_nodes))
        for offset, block in _npz_rows(archive, "edge_index", flat=True):
            check_ids(block, num_nodes, npz)
            row, col = divmod(offset, num_edges)  # chunks never straddle a row (see below)
            edges[row, col : col + block.size] = block
        shape, _ = _npz_header(archive, "node_feat")
        if shape[0] != num_nodes:
            raise ValueError(f"'{npz}' holds node_feat of {shape[0]} rows for {num_nodes} "
                             f"nodes; download it again")
        x = sink.node_array("x", tuple(shape), np.float32)
        for offset, block in _npz_rows(archive, "node_feat"):
            check_finite(block, npz, offset)
            x[offset : offset + block.shape[0]] = block
        for extra in spec.extra:
            target = sink.node_array(extra, (num_nodes,), np.int64)
            for offset, block in _npz_rows(archive, extra):
                target[offset : offset + block.shape[0]] = labels(block.reshape(-1))
    with zipfile.ZipFile(raw / "node-label.npz") as archive:
        y = sink.node_array("y", (num_nodes,), np.int64)
        for offset, block in _npz_rows(archive, "node_label"):
            y[offset : offset + block.shape[0]] = labels(block.reshape(-1))
    return num_nodes, num_edges


def _id_dtype(num_nodes: int) -> Any:
    """int32 node ids on disk where they fit: half the bytes of int64."""
    return np.int32 if num_nodes < 2**31 else np.int64


def _npz_header(archive: zipfile.ZipFile, key: str) -> tuple[tuple[int, ...], np.dtype]:
    with _npz_member(archive, key) as f:
        shape, _, dtype = _read_header(f)
    return shape, dtype


def _npz_array(archive: zipfile.ZipFile, key: str) -> np.ndarray:
    with _npz_member(archive, key) as f:
        return np.lib.format.read_array(f)


def _npz_member(archive: zipfile.ZipFile, key: str) -> Any:
    name = f"{key}.npy"
    if name not in archive.namelist():
        raise ValueError(f"'{archive.filename}' has no array '{key}'; download it again")
    return archive.open(name)


def _read_header(f: Any) -> tuple[tuple[int, ...], bool, np.dtype]:
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    return np.lib.format.read_array_header_2_0(f)


def _npz_rows(archive: zipfile.ZipFile, key: str,
              flat: bool = False) -> Iterator[tuple[int, np.ndarray]]:
    """Streams array ``key`` of an ``.npz`` (compressed or not) as
    ``(first row, rows)`` blocks; ``flat``: ``(first entry, entries)`` of the
    flattened array, blocks never straddling a row of a 2-d array."""
    with _npz_member(archive, key) as f:
        shape, fortran, dtype = _read_header(f)
        if fortran and len(shape) > 1:
            raise ValueError(f"'{archive.filename}' stores '{key}' in Fortran order; "
                             f"download it again")
        row = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        if flat:
            unit, per_block = 1, ROW_CHUNK
            total = int(np.prod(shape))
            stride = shape[-1] if len(shape) > 1 else total
        else:
            unit, per_block, total, stride = row, max(1, ROW_CHUNK // max(row, 1)), shape[0], 0
        offset = 0
        while offset < total:
            count = min(per_block, total - offset)
            if stride:  # stop at the end of the row
                count = min(count, stride - offset % stride)
            raw = f.read(count * unit * dtype.itemsize)
            if len(raw) != count * unit * dtype.itemsize:
                raise ValueError(f"'{archive.filename}' ends inside '{key}'; download it again")
            block = np.frombuffer(raw, dtype=dtype)
            yield offset, block if flat else block.reshape((count, *shape[1:]))
            offset += count
