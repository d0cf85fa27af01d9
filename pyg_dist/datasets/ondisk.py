r"""A graph as a folder of ``.npy`` files that every rank memory-maps and reads
a slice of, so that no step needs the whole graph in one process.

::

    graph/
      graph.json        {"format": "pyg_dist.graph", "version": 1, "name": ...,
                         "num_nodes": N, "num_edges": E, "num_classes": C or null,
                         "edges": "edges.npy",
                         "node": {"x": "x.npy", "y": "y.npy", ...},
                         "splits": {"train_mask": "split/train.npy", ...}}
      edges.npy         [2, E] int32 or int64: row 0 sources, row 1 targets
      x.npy, y.npy, ... [N, ...] one file per node-level attribute
      split/train.npy   int64 ids of the nodes in each split (read as masks)

``graph.json`` is written last, into a temporary sibling folder that is then
renamed: a folder with a ``graph.json`` is complete. Write one with
:func:`write_graph_folder` (from a PyG ``Data``) or ``pyg-dist convert``
(from any dataset :func:`~pyg_dist.datasets.load_dataset` knows, OGB's
downloaded folders streamed in chunks); ``pyg-dist partition --distributed
--input DIR`` cuts it on the ranks themselves.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pyg_dist.datasets.graph import attributes, check_finite, check_graph, num_classes

__all__ = ["GraphFolder", "GraphFolderWriter", "write_graph_folder", "GRAPH_FILE",
           "FORMAT", "VERSION"]

GRAPH_FILE = "graph.json"
FORMAT = "pyg_dist.graph"
VERSION = 1
#: Rows (or edge columns) per chunk of a check or a copy.
CHUNK = 1 << 20
#: File names of the usual splits; any other ``<name>_mask`` is ``split/<name>.npy``.
_SPLIT_FILES = {"train_mask": "train", "val_mask": "valid", "test_mask": "test"}


class GraphFolder:
    r"""A graph folder opened for reading: its arrays are memory-mapped, and
    a rank reads only the slices it asks for.

    Opening checks the description, that every file is present and that the
    shapes agree; :meth:`check_edges` and :meth:`check_nodes` check the
    values of a slice (node ids in range, finite features), so that each rank
    checks only what it reads.

    Args:
        path (pathlib.Path): The folder.
        info (dict): Its parsed ``graph.json``; :meth:`open` reads and checks it.

    Attributes:
        path (pathlib.Path): The folder.
        name (str): The graph's name.
        num_nodes (int): Nodes :math:`N`.
        num_edges (int): Directed edges :math:`E` (as stored: duplicates and
            self-loops included).
        num_classes (int, optional): Classes of ``y``, when it holds them.
        node_attrs (list[str]): Node-level attributes: the arrays, then the
            split masks (``train_mask``, ``val_mask``, ``test_mask``, ...).
    """

    def __init__(self, path: Path, info: dict[str, Any]) -> None:
        self.path = path
        self.name = str(info.get("name", path.name))
        self.num_nodes = int(info["num_nodes"])
        self.num_edges = int(info["num_edges"])
        self.num_classes = info.get("num_classes")
        self._edges = _load(path, info["edges"])
        self._arrays = {k: _load(path, v) for k, v in info.get("node", {}).items()}
        self._splits = {k: path / v for k, v in info.get("splits", {}).items()}
        self._split_ids: dict[str, np.ndarray] = {}
        self.node_attrs = [*self._arrays, *self._splits]
        self._check_shapes()

    @classmethod
    def open(cls, path: str | os.PathLike) -> GraphFolder:
        """Opens the graph folder ``path``.

        Args:
            path (str or os.PathLike): A folder written by
                :func:`write_graph_folder` or ``pyg-dist convert``.
        """
        path = Path(path)
        file = path / GRAPH_FILE
        if not file.is_file():
            raise FileNotFoundError(
                f"'{path}' is not a graph folder (no {GRAPH_FILE}); write one with "
                f"'pyg-dist convert --dataset NAME --root ROOT --out {path}' or "
                f"pyg_dist.datasets.write_graph_folder(data, '{path}')"
            )
        try:
            info = json.loads(file.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"'{file}' is not valid JSON ({exc}); convert the graph "
                             f"again") from exc
        if info.get("format") != FORMAT or info.get("version") != VERSION:
            raise ValueError(
                f"'{file}' describes format {info.get('format')!r} version "
                f"{info.get('version')!r}; this pyg_dist reads {FORMAT!r} version {VERSION}: "
                f"convert the graph again with this version"
            )
        missing = [k for k in ("num_nodes", "num_edges", "edges") if k not in info]
        if missing:
            raise ValueError(f"'{file}' lacks {', '.join(missing)}; convert the graph again")
        return cls(path, info)

    def __repr__(self) -> str:
        return (f"GraphFolder('{self.path}', num_nodes={self.num_nodes}, "
                f"num_edges={self.num_edges}, node_attrs={self.node_attrs})")

    def edges(self, lo: int = 0, hi: int | None = None, dtype: Any = np.int64) -> np.ndarray:
        """Edge columns ``lo:hi`` as a ``[2, hi - lo]`` array of ``dtype``
        (a copy, read from the file: the pages read do not stay resident in
        this process)."""
        hi = self.num_edges if hi is None else hi
        out = np.empty((2, hi - lo), dtype=dtype)
        for row in range(2):
            out[row] = _read(self._edges, row * self.num_edges + lo, hi - lo)
        return out

    def node(self, name: str, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Rows ``lo:hi`` of node attribute ``name`` (a copy); a split comes
        out as a bool mask."""
        hi = self.num_nodes if hi is None else hi
        if name in self._arrays:
            array = self._arrays[name]
            width = int(np.prod(array.shape[1:], dtype=np.int64))
            return _read(array, lo * width, (hi - lo) * width).reshape(hi - lo, *array.shape[1:])
        if name in self._splits:
            ids = self._ids(name)
            mask = np.zeros(hi - lo, dtype=bool)
            mask[ids[(ids >= lo) & (ids < hi)] - lo] = True
            return mask
        raise KeyError(f"'{self.path}' has no node attribute '{name}' "
                       f"(it has {', '.join(self.node_attrs) or 'none'})")

    def check_edges(self, lo: int = 0, hi: int | None = None) -> None:
        """Raises :class:`ValueError` if edge columns ``lo:hi`` name a node
        outside :math:`[0, N)`."""
        hi = self.num_edges if hi is None else hi
        for start in range(lo, hi, CHUNK):
            block = self.edges(start, min(start + CHUNK, hi), self._edges.dtype)
            if block.size and (int(block.min()) < 0 or int(block.max()) >= self.num_nodes):
                bad = np.flatnonzero(((block < 0) | (block >= self.num_nodes)).any(axis=0))
                raise ValueError(
                    f"'{self.path / 'edges.npy'}' names nodes outside [0, {self.num_nodes}) "
                    f"in columns {(bad[:5] + start).tolist()}: fix the edge list, or "
                    f"num_nodes in {GRAPH_FILE} if the graph has more nodes"
                )

    def check_nodes(self, lo: int = 0, hi: int | None = None) -> None:
        """Raises :class:`ValueError` if rows ``lo:hi`` of a floating node
        attribute hold NaN or infinite values, or a split names a node
        outside :math:`[0, N)` (checked whole: splits are small)."""
        hi = self.num_nodes if hi is None else hi
        for key, array in self._arrays.items():
            if not np.issubdtype(array.dtype, np.floating):
                continue
            for start in range(lo, hi, CHUNK):
                block = self.node(key, start, min(start + CHUNK, hi))
                if not np.isfinite(block).all():
                    rows = np.flatnonzero(~np.isfinite(block.reshape(block.shape[0], -1))
                                          .all(axis=1)) + start
                    raise ValueError(
                        f"'{self.path}' has NaN or infinite values in node attribute "
                        f"'{key}' (rows {rows[:5].tolist()}); clean or impute them "
                        f"(e.g. numpy.nan_to_num) and write the folder again"
                    )
        for key in self._splits:
            self._ids(key)

    def to_data(self) -> Any:
        """The whole graph as a :class:`torch_geometric.data.Data` (for graphs
        that fit one process)."""
        import torch
        from torch_geometric.data import Data

        data = Data(edge_index=torch.from_numpy(self.edges()), num_nodes=self.num_nodes)
        for key in self.node_attrs:
            data[key] = torch.from_numpy(self.node(key))
        return data

    def _ids(self, name: str) -> np.ndarray:
        if name not in self._split_ids:
            ids = np.load(self._splits[name])
            if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
                raise ValueError(f"split file '{self._splits[name]}' must hold a 1-d array of "
                                 f"integer node ids (got {ids.dtype} {ids.shape})")
            if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.num_nodes):
                raise ValueError(f"split file '{self._splits[name]}' names nodes outside "
                                 f"[0, {self.num_nodes}); fix the split")
            self._split_ids[name] = ids.astype(np.int64, copy=False)
        return self._split_ids[name]

    def _check_shapes(self) -> None:
        edges = self._edges
        if edges.ndim != 2 or edges.shape[0] != 2 or edges.shape[1] != self.num_edges:
            raise ValueError(
                f"'{self.path / 'edges.npy'}' has shape {edges.shape}, {GRAPH_FILE} says "
                f"[2, {self.num_edges}]: the files are from different graphs; convert again"
            )
        if not np.issubdtype(edges.dtype, np.integer):
            raise ValueError(f"'{self.path / 'edges.npy'}' holds {edges.dtype}; node ids must "
                             f"be int32 or int64")
        for key, array in self._arrays.items():
            if array.ndim == 0 or array.shape[0] != self.num_nodes:
                raise ValueError(
                    f"node attribute '{key}' in '{self.path}' has "
                    f"{array.shape[0] if array.ndim else 0} rows, "
                    f"{GRAPH_FILE} says {self.num_nodes} nodes: every node array needs one "
                    f"row per node; convert again"
                )
        for key, file in self._splits.items():
            if not file.is_file():
                raise FileNotFoundError(f"split '{key}' is missing from '{self.path}' "
                                        f"(no {file.relative_to(self.path)}); convert again")


class GraphFolderWriter:
    """Writes a graph folder atomically: arrays go into a temporary sibling
    folder (filled in chunks through the memory maps that ``array`` returns),
    and ``commit`` writes ``graph.json`` there and renames the folder into
    place. Used as a context manager, an exception removes what was written.

    Args:
        out_dir (str or os.PathLike): The folder to create.
        overwrite (bool, optional): Replace an existing ``out_dir``.
            (default: :obj:`False`)
    """

    def __init__(self, out_dir: str | os.PathLike, overwrite: bool = False) -> None:
        self.out_dir = Path(out_dir).resolve()
        if self.out_dir.exists() and not overwrite:
            raise FileExistsError(f"'{self.out_dir}' exists; pass overwrite=True (--overwrite) "
                                  f"or choose another folder")
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.out_dir.parent / f".{self.out_dir.name}.tmp-{uuid.uuid4().hex[:8]}"
        self.tmp.mkdir()
        self.node: dict[str, str] = {}
        self.splits: dict[str, str] = {}

    def __enter__(self) -> GraphFolderWriter:
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        if kind is not None:
            self.abort()

    def array(self, file: str, shape: tuple[int, ...], dtype: Any) -> np.memmap:
        """A new ``.npy`` file ``file`` of ``shape`` and ``dtype``, as a
        writable memory map."""
        path = self.tmp / file
        path.parent.mkdir(parents=True, exist_ok=True)
        return np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)

    def edges(self, num_edges: int, dtype: Any = np.int64) -> np.memmap:
        """The ``[2, num_edges]`` edge array to fill."""
        return self.array("edges.npy", (2, num_edges), dtype)

    def node_array(self, name: str, shape: tuple[int, ...], dtype: Any) -> np.memmap:
        """Node attribute ``name``'s array to fill (``shape[0]`` = nodes)."""
        self.node[name] = f"{name}.npy"
        return self.array(self.node[name], shape, dtype)

    def split(self, mask_name: str, ids: np.ndarray) -> None:
        """Writes the node ids of split ``mask_name`` (e.g. ``"train_mask"``)."""
        file = f"split/{_SPLIT_FILES.get(mask_name, mask_name.removesuffix('_mask'))}.npy"
        path = self.tmp / file
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, np.asarray(ids, dtype=np.int64))
        self.splits[mask_name] = file

    def commit(self, num_nodes: int, num_edges: int, name: str,
               num_classes: int | None = None) -> GraphFolder:
        """Writes ``graph.json`` and renames the folder into place."""
        info = {"format": FORMAT, "version": VERSION, "name": name, "num_nodes": int(num_nodes),
                "num_edges": int(num_edges), "num_classes": num_classes, "edges": "edges.npy",
                "node": self.node, "splits": self.splits}
        try:
            GraphFolder(self.tmp, info)  # the shapes agree before anything is in place
            (self.tmp / GRAPH_FILE).write_text(json.dumps(info, indent=2))
            if self.out_dir.exists():
                old = self.out_dir.parent / f".{self.out_dir.name}.old-{uuid.uuid4().hex[:8]}"
                os.replace(self.out_dir, old)
                os.replace(self.tmp, self.out_dir)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(self.tmp, self.out_dir)
        except BaseException:
            self.abort()
            raise
        return GraphFolder.open(self.out_dir)

    def abort(self) -> None:
        """Removes what was written."""
        shutil.rmtree(self.tmp, ignore_errors=True)


def write_graph_folder(data: Any, out_dir: str | os.PathLike, overwrite: bool = False,
                       name: str | None = None) -> GraphFolder:
    """Writes the PyG ``Data`` ``data`` as a graph folder: ``edge_index``,
    every node-level tensor (``x``, ``y``, ...) and every boolean
    ``<name>_mask`` as a split of node ids.

    Args:
        data (torch_geometric.data.Data): The graph (``edge_index`` int32 or
            int64; node attributes with one row per node).
        out_dir (str or os.PathLike): Folder to create (atomically).
        overwrite (bool, optional): Replace an existing ``out_dir``.
            (default: :obj:`False`)
        name (str, optional): The graph's name. (default: the folder's name)
    """
    edge_index, num_nodes = check_graph(data, "write_graph_folder")
    node_attrs, _ = attributes(data, num_nodes, edge_index.size(1))
    check_finite(node_attrs, {}, "write_graph_folder")
    with GraphFolderWriter(out_dir, overwrite) as writer:
        edges = writer.edges(edge_index.size(1), edge_index.numpy().dtype)
        for lo, hi in _spans(edge_index.size(1)):
            edges[:, lo:hi] = edge_index[:, lo:hi].numpy()
        edges.flush()
        for key, value in node_attrs.items():
            if key.endswith("_mask") and value.dim() == 1 and value.dtype == torch.bool:
                writer.split(key, value.nonzero().view(-1).numpy())
                continue
            array = writer.node_array(key, tuple(value.shape), value.numpy().dtype)
            for lo, hi in _spans(value.size(0)):
                array[lo:hi] = value[lo:hi].numpy()
            array.flush()
        return writer.commit(num_nodes, edge_index.size(1),
                             name or Path(out_dir).name, num_classes(node_attrs.get("y")))


def _spans(length: int) -> Iterator[tuple[int, int]]:
    for lo in range(0, length, CHUNK):
        yield lo, min(lo + CHUNK, length)


def _read(array: np.ndarray, start: int, count: int) -> np.ndarray:
    """Entries ``start:start + count`` of the flattened C-ordered array
    ``array`` (memory-mapped from a ``.npy`` file), read from the file rather
    than through the mapping, so that no page of the mapping becomes resident."""
    if not isinstance(array, np.memmap) or not array.flags.c_contiguous:
        return np.array(array.reshape(-1)[start:start + count])
    with open(array.filename, "rb") as f:
        f.seek(array.offset + start * array.itemsize)
        out = np.fromfile(f, dtype=array.dtype, count=count)
    if out.size != count:
        raise ValueError(f"'{array.filename}' ends before entry {start + count}; convert the "
                         f"graph again")
    return out


def _load(folder: Path, file: str) -> np.ndarray:
    path = folder / file
    if not path.is_file():
        raise FileNotFoundError(f"'{path}' is missing from the graph folder '{folder}'; "
                                f"convert the graph again")
    try:
        return np.load(path, mmap_mode="r")
    except ValueError as exc:
        raise ValueError(f"'{path}' is not a .npy file ({exc}); convert the graph again") \
            from exc
