"""The files of a graph folder, shared by both kinds
(:mod:`pyg_dist.datasets.ondisk` describes the layouts): ``graph.json``
read and checked, node arrays, edge files and a link split's supervision
edges memory-mapped and read a slice at a time, and the atomic writer."""
from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from typing_extensions import Self

from pyg_dist.tasks.supervision import SPLITS
from pyg_dist.utils.files import disk_error, fsync_folder

__all__ = ["read_info", "require", "entry", "NodeArrays", "EdgeArray", "LinkArrays",
           "FolderWriter", "spans", "GRAPH_FILE", "FORMAT", "VERSION", "HOMOGENEOUS",
           "HETEROGENEOUS", "CHUNK", "LINK_FIX"]

GRAPH_FILE = "graph.json"
FORMAT = "pyg_dist.graph"
VERSION = 1
#: ``graph.json``'s ``"kind"``: one node and edge set, or typed ones
#: (:mod:`pyg_dist.datasets.ondisk_hetero`); a folder without it is homogeneous.
HOMOGENEOUS, HETEROGENEOUS = "homogeneous", "hetero"
#: Rows (or edge columns) per chunk of a check or a copy.
CHUNK = 1 << 20
#: The folder of a link split's files (``link/<split>/edge_label_index.npy``, ...).
LINK_DIR = "link"
#: File names of the usual splits; any other ``<name>_mask`` is ``split/<name>.npy``.
_SPLIT_FILES = {"train_mask": "train", "val_mask": "valid", "test_mask": "test"}
#: What to do when a graph folder does not fit.
DISK_FIX = "free space there or choose an out_dir on a filesystem with room for the graph"
#: What to do about a link split's files that do not fit together or the graph.
LINK_FIX = ("write the folder again from the link split with "
            "pyg_dist.datasets.write_graph_folder(split, out_dir) "
            "(or 'pyg-dist convert --task link')")


def read_info(path: str | os.PathLike) -> dict[str, Any]:
    """The parsed ``graph.json`` of the graph folder ``path``, after checking
    its format and version (either kind of folder)."""
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
    if not isinstance(info, dict):
        raise ValueError(f"'{file}' holds {type(info).__name__}, not the JSON object a graph "
                         f"folder is described by; convert the graph again")
    if info.get("format") != FORMAT or info.get("version") != VERSION:
        raise ValueError(
            f"'{file}' describes format {info.get('format')!r} version "
            f"{info.get('version')!r}; this pyg_dist reads {FORMAT!r} version {VERSION}: "
            f"convert the graph again with this version"
        )
    return info


def require(info: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    """Raises :class:`ValueError` naming the ``keys`` that ``info`` lacks."""
    missing = [k for k in keys if k not in info]
    if missing:
        raise ValueError(f"'{where}' lacks {', '.join(missing)}; convert the graph again")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _files(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str)
                                           for k, v in value.items())


#: What ``graph.json`` keeps under each key: a test and how errors describe it.
_ENTRIES = {
    "name": (lambda v: isinstance(v, str), "a string"),
    "num_nodes": (_count, "an integer >= 0"),
    "num_edges": (_count, "an integer >= 0"),
    "num_classes": (lambda v: v is None or _count(v), "an integer >= 0 or null"),
    "edges": (lambda v: isinstance(v, str), 'a .npy file name, e.g. "edges.npy"'),
    "node": (_files, 'an object of attribute names to .npy files, e.g. {"x": "x.npy"}'),
    "splits": (_files, 'an object of split masks to .npy files, e.g. '
                       '{"train_mask": "split/train.npy"}'),
    "node_types": (lambda v: isinstance(v, list) and all(isinstance(e, dict) for e in v),
                   "an array of objects, one per node type"),
    "edge_types": (lambda v: isinstance(v, list) and all(isinstance(e, dict) for e in v),
                   "an array of objects, one per relation"),
    "type": (lambda v: isinstance(v, list) and len(v) == 3
             and all(isinstance(part, str) for part in v),
             'a relation ["source", "name", "target"]'),
    "link": (lambda v: isinstance(v, dict) and all(isinstance(e, dict) for e in v.values()),
             'an object of splits to their files, e.g. {"train": {"num_edges": 10, '
             '"edge_label_index": "link/train/edge_label_index.npy", '
             '"edge_label": "link/train/edge_label.npy"}}'),
    "edge_label_index": (lambda v: isinstance(v, str),
                         'a .npy file name, e.g. "link/train/edge_label_index.npy"'),
    "edge_label": (lambda v: isinstance(v, str),
                   'a .npy file name, e.g. "link/train/edge_label.npy"'),
}


def entry(info: dict[str, Any], key: str, where: str, default: Any = None) -> Any:
    """``info[key]`` (``default`` when absent) after checking that it holds
    what a graph folder's description keeps there (a count, a file name, an
    object of names to files, ...); raises :class:`ValueError` starting with
    ``where`` (the file, and the entry of a list), naming the key, the value
    and the fix."""
    value = info.get(key, default)
    fits, what = _ENTRIES[key]
    if not fits(value):
        shown = json.dumps(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise ValueError(f"{where}: '{key}' must be {what} (got {shown}); fix it or convert "
                         f"the graph again")
    return value


class NodeArrays:
    r"""The node-level arrays and split files of one node set of a graph
    folder (the whole graph, or one node type), memory-mapped.

    Args:
        path (pathlib.Path): The graph folder.
        num_nodes (int): Nodes of the set.
        node (dict[str, str]): Attribute name to ``.npy`` file (relative).
        splits (dict[str, str]): Split mask name to ``.npy`` file of node ids.
        what (str): How errors name the node set (e.g. ``"node type 'paper'"``).
    """

    def __init__(self, path: Path, num_nodes: int, node: dict[str, str],
                 splits: dict[str, str], what: str = "the graph") -> None:
        self.path, self.num_nodes, self.what = path, int(num_nodes), what
        self.arrays = {k: _load(path, v) for k, v in node.items()}
        self.splits = {k: path / v for k, v in splits.items()}
        self._split_ids: dict[str, np.ndarray] = {}
        self.names = [*self.arrays, *self.splits]
        self._check_shapes()

    def read(self, name: str, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Rows ``lo:hi`` of attribute ``name`` (a copy); a split comes out as a
        bool mask."""
        hi = self.num_nodes if hi is None else hi
        if name in self.arrays:
            array = self.arrays[name]
            width = int(np.prod(array.shape[1:], dtype=np.int64))
            return _read(array, lo * width, (hi - lo) * width).reshape(hi - lo, *array.shape[1:])
        if name in self.splits:
            ids = self._ids(name)
            mask = np.zeros(hi - lo, dtype=bool)
            mask[ids[(ids >= lo) & (ids < hi)] - lo] = True
            return mask
        raise KeyError(f"'{self.path}' has no node attribute '{name}' for {self.what} "
                       f"(it has {', '.join(self.names) or 'none'})")

    def check(self, lo: int = 0, hi: int | None = None) -> None:
        """Raises :class:`ValueError` if rows ``lo:hi`` of a floating attribute
        hold NaN or infinite values, or a split names a node outside
        :math:`[0, N)` (checked whole: splits are small)."""
        hi = self.num_nodes if hi is None else hi
        for key, array in self.arrays.items():
            if not np.issubdtype(array.dtype, np.floating):
                continue
            for start in range(lo, hi, CHUNK):
                block = self.read(key, start, min(start + CHUNK, hi))
                if not np.isfinite(block).all():
                    rows = np.flatnonzero(~np.isfinite(block.reshape(block.shape[0], -1))
                                          .all(axis=1)) + start
                    raise ValueError(
                        f"'{self.path}' has NaN or infinite values in node attribute "
                        f"'{key}' of {self.what} (rows {rows[:5].tolist()}); clean or impute "
                        f"them (e.g. numpy.nan_to_num) and write the folder again"
                    )
        for key in self.splits:
            self._ids(key)

    def _ids(self, name: str) -> np.ndarray:
        if name not in self._split_ids:
            ids = _npy(self.splits[name])
            if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
                raise ValueError(f"split file '{self.splits[name]}' must hold a 1-d array of "
                                 f"integer node ids (got {ids.dtype} {ids.shape})")
            if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.num_nodes):
                raise ValueError(f"split file '{self.splits[name]}' names nodes outside "
                                 f"[0, {self.num_nodes}) of {self.what}; fix the split")
            self._split_ids[name] = ids.astype(np.int64, copy=False)
        return self._split_ids[name]

    def _check_shapes(self) -> None:
        for key, array in self.arrays.items():
            if array.ndim == 0 or array.shape[0] != self.num_nodes:
                raise ValueError(
                    f"node attribute '{key}' of {self.what} in '{self.path}' has "
                    f"{array.shape[0] if array.ndim else 0} rows, "
                    f"{GRAPH_FILE} says {self.num_nodes} nodes: every node array needs one "
                    f"row per node; convert again"
                )
        for key, file in self.splits.items():
            if not file.is_file():
                raise FileNotFoundError(f"split '{key}' of {self.what} is missing from "
                                        f"'{self.path}' (no {file.relative_to(self.path)}); "
                                        f"convert again")


class EdgeArray:
    r"""One ``[2, E]`` edge file of a graph folder, memory-mapped.

    Args:
        path (pathlib.Path): The graph folder.
        file (str): The ``.npy`` file (relative).
        num_edges (int): Edges :math:`E` the description promises.
        num_src (int): Sources lie in :math:`[0, \text{num_src})`.
        num_dst (int): Targets lie in :math:`[0, \text{num_dst})`.
        fix (str, optional): What errors of the shape say to do.
            (default: :obj:`"convert again"`)
    """

    def __init__(self, path: Path, file: str, num_edges: int, num_src: int,
                 num_dst: int, fix: str = "convert again") -> None:
        self.file, self.num_edges = path / file, int(num_edges)
        self.bounds = (int(num_src), int(num_dst))
        self.array = _load(path, file)
        shape = self.array.shape
        if self.array.ndim != 2 or shape[0] != 2 or shape[1] != self.num_edges:
            raise ValueError(
                f"'{self.file}' has shape {shape}, {GRAPH_FILE} says "
                f"[2, {self.num_edges}]: the files are from different graphs; {fix}"
            )
        if not np.issubdtype(self.array.dtype, np.integer):
            raise ValueError(f"'{self.file}' holds {self.array.dtype}; node ids must "
                             f"be int32 or int64")

    def read(self, lo: int = 0, hi: int | None = None, dtype: Any = np.int64) -> np.ndarray:
        """Columns ``lo:hi`` as a ``[2, hi - lo]`` array of ``dtype`` (a copy)."""
        hi = self.num_edges if hi is None else hi
        out = np.empty((2, hi - lo), dtype=dtype)
        for row in range(2):
            out[row] = _read(self.array, row * self.num_edges + lo, hi - lo)
        return out

    def check(self, lo: int = 0, hi: int | None = None, fix: str = "") -> None:
        """Raises :class:`ValueError` if columns ``lo:hi`` name a source or a
        target outside its range; ``fix``, what to do, ends the message."""
        hi = self.num_edges if hi is None else hi
        for start in range(lo, hi, CHUNK):
            block = self.read(start, min(start + CHUNK, hi), self.array.dtype)
            for row, bound in enumerate(self.bounds):
                ids = block[row]
                if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= bound):
                    bad = np.flatnonzero((ids < 0) | (ids >= bound))
                    raise ValueError(
                        f"'{self.file}' names {('sources', 'targets')[row]} outside "
                        f"[0, {bound}) in columns {(bad[:5] + start).tolist()}: {fix}"
                    )


class LinkArrays:
    r"""The supervision edges of a graph folder's link split, memory-mapped:
    per split (``"train"``, ``"val"``, ``"test"``), ``edge_label_index``
    (``[2, L]`` int32 or int64 node ids, sources then targets) and
    ``edge_label`` (``[L]`` float32, 1 for a positive edge and 0 for a
    negative one), in the order of the split's list.

    Opening checks that every file is there and that each split's labels
    and edges agree in number; :meth:`check` checks a slice's values.

    Args:
        path (pathlib.Path): The graph folder.
        link (dict): ``graph.json``'s ``"link"``: per split, its
            ``num_edges`` and the two files (relative).
        num_nodes (int): Nodes :math:`N` of the graph the edges join.

    Attributes:
        names (list[str]): The splits, in the order of
            :data:`~pyg_dist.tasks.SPLITS`.
        sizes (dict[str, int]): Supervision edges :math:`L` of each split.
    """

    def __init__(self, path: Path, link: dict[str, Any], num_nodes: int) -> None:
        where = f"'{path / GRAPH_FILE}'"
        unknown = [name for name in link if name not in SPLITS]
        if unknown:
            raise ValueError(f"{where}: 'link' holds the splits {unknown}; a link split's are "
                             f"{', '.join(SPLITS)} (OGB's 'valid' is 'val'): rename them, or "
                             f"{LINK_FIX}")
        self.names = [name for name in SPLITS if name in link]
        self.sizes: dict[str, int] = {}
        self.index: dict[str, EdgeArray] = {}
        self.label: dict[str, np.ndarray] = {}
        self.files: dict[str, Path] = {}
        for name in self.names:
            spec, at = link[name], f"{where} link '{name}'"
            missing = [k for k in ("num_edges", "edge_label_index", "edge_label")
                       if k not in spec]
            if missing:
                raise ValueError(f"{at} lacks {', '.join(missing)}; {LINK_FIX}")
            size = int(entry(spec, "num_edges", at))
            self.index[name] = EdgeArray(path, entry(spec, "edge_label_index", at), size,
                                         num_nodes, num_nodes, LINK_FIX)
            label = _load(path, entry(spec, "edge_label", at))
            if label.shape != (size,):
                held = f"{label.size} labels" if label.ndim == 1 else \
                    f"labels of shape {label.shape}"
                raise ValueError(
                    f"'{path / spec['edge_label']}' holds {held}, {at} says {size} supervision "
                    f"edges (as '{spec['edge_label_index']}' holds): a split needs one label "
                    f"per edge; {LINK_FIX}"
                )
            if not np.issubdtype(label.dtype, np.floating):
                raise ValueError(f"'{path / spec['edge_label']}' holds {label.dtype}; labels "
                                 f"are float32 (1 positive, 0 negative): {LINK_FIX}")
            self.sizes[name], self.label[name] = size, label
            self.files[name] = path / spec["edge_label"]

    def read(self, name: str, lo: int = 0, hi: int | None = None,
             dtype: Any = np.int64) -> tuple[np.ndarray, np.ndarray]:
        """Edges ``lo:hi`` of split ``name``: ``[2, hi - lo]`` node ids of
        ``dtype`` and ``[hi - lo]`` float32 labels (copies)."""
        hi = self.sizes[name] if hi is None else hi
        label = _read(self.label[name], lo, hi - lo).astype(np.float32, copy=False)
        return self.index[name].read(lo, hi, dtype), label

    def check(self, name: str, lo: int = 0, hi: int | None = None) -> None:
        """Raises :class:`ValueError` if edges ``lo:hi`` of split ``name``
        name a node outside :math:`[0, N)` or have a NaN or infinite label."""
        hi = self.sizes[name] if hi is None else hi
        self.index[name].check(lo, hi, f"a split's edges join nodes of the graph; {LINK_FIX}")
        for start in range(lo, hi, CHUNK):
            label = _read(self.label[name], start, min(start + CHUNK, hi) - start)
            if not np.isfinite(label).all():
                bad = np.flatnonzero(~np.isfinite(label)) + start
                raise ValueError(f"'{self.files[name]}' has NaN or infinite labels "
                                 f"(edges {bad[:5].tolist()}); {LINK_FIX}")


class FolderWriter:
    """Writes a graph folder of either kind atomically: arrays go into a
    temporary sibling folder (filled in chunks through the memory maps that
    ``array`` returns), and ``finish`` writes ``graph.json`` there and renames
    the folder into place. Used as a context manager, an exception removes
    what was written.

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
        self.link: dict[str, dict[str, Any]] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        if kind is not None:
            self.abort()

    def array(self, file: str, shape: tuple[int, ...], dtype: Any) -> np.memmap:
        """A new ``.npy`` file ``file`` of ``shape`` and ``dtype``, as a
        writable memory map."""
        path = self.tmp / file
        with self._room(f"writing {file}", int(np.prod(shape)) * np.dtype(dtype).itemsize):
            path.parent.mkdir(parents=True, exist_ok=True)
            array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
            # The room is taken now: a memory map filled past a full disk
            # would end the process (SIGBUS) instead of raising.
            with open(path, "r+b") as f:
                os.posix_fallocate(f.fileno(), 0, os.path.getsize(path))
        return array

    @contextmanager
    def _room(self, doing: str, size: int) -> Iterator[None]:
        """Turns a full disk while ``doing`` into an error naming
        ``out_dir``, the room the folder needs so far and ``size`` more, and
        what to do."""
        try:
            yield
        except OSError as exc:
            written = sum(f.stat().st_size for f in self.tmp.rglob("*") if f.is_file())
            full = disk_error(exc, self.out_dir, doing, written + size, fix=DISK_FIX)
            if full is exc:
                raise
            raise full from exc

    def split(self, mask_name: str, ids: np.ndarray, folder: str = "") -> str:
        """Writes the node ids of split ``mask_name`` (e.g. ``"train_mask"``)
        under ``folder`` and returns the file's relative path."""
        file = f"{folder}split/{_SPLIT_FILES.get(mask_name, mask_name.removesuffix('_mask'))}.npy"
        path = self.tmp / file
        ids = np.asarray(ids, dtype=np.int64)
        with self._room(f"writing {file}", ids.nbytes):
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, ids)
        if not folder:
            self.splits[mask_name] = file
        return file

    def supervision(self, name: str, index: np.ndarray, label: np.ndarray) -> None:
        """Writes split ``name``'s supervision edges, ``[2, L]`` node ids
        ``index`` and ``[L]`` labels ``label`` (as float32), in chunks, under
        ``link/name/``."""
        if index.ndim != 2 or index.shape[0] != 2 or label.shape != (index.shape[1],):
            raise ValueError(f"split '{name}' has edge_label_index of shape {index.shape} and "
                             f"edge_label of shape {label.shape}; pass [2, L] and [L]")
        files = {key: f"{LINK_DIR}/{name}/{key}.npy" for key in ("edge_label_index",
                                                                  "edge_label")}
        edges = self.array(files["edge_label_index"], index.shape, index.dtype)
        labels = self.array(files["edge_label"], label.shape, np.float32)
        for lo, hi in spans(index.shape[1]):
            edges[:, lo:hi] = index[:, lo:hi]
            labels[lo:hi] = label[lo:hi]
        edges.flush()
        labels.flush()
        self.link[name] = {"num_edges": int(index.shape[1]), **files}

    def finish(self, info: dict[str, Any], reader: Any) -> Any:
        """Checks the files against ``info`` with ``reader(folder, info)``,
        writes ``info`` as ``graph.json``, renames the folder into place and
        returns it opened with ``reader``."""
        try:
            reader(self.tmp, info)  # the shapes agree before anything is in place
            with self._room(f"writing {GRAPH_FILE}", 0):
                (self.tmp / GRAPH_FILE).write_text(json.dumps(info, indent=2))
                _sync(self.tmp)
            if self.out_dir.exists():
                old = self.out_dir.parent / f".{self.out_dir.name}.old-{uuid.uuid4().hex[:8]}"
                os.replace(self.out_dir, old)
                os.replace(self.tmp, self.out_dir)
                fsync_folder(self.out_dir.parent)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(self.tmp, self.out_dir)
                fsync_folder(self.out_dir.parent)
        except BaseException:
            self.abort()
            raise
        return reader(self.out_dir, info)

    def abort(self) -> None:
        """Removes what was written."""
        shutil.rmtree(self.tmp, ignore_errors=True)


def _sync(folder: Path) -> None:
    """Makes every file under ``folder`` durable before it is renamed into place."""
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb+") as f:
                os.fsync(f.fileno())
        elif path.is_dir():
            fsync_folder(path)
    fsync_folder(folder)


def spans(length: int) -> Iterator[tuple[int, int]]:
    for lo in range(0, length, CHUNK):
        yield lo, min(lo + CHUNK, length)


def _read(array: np.ndarray, start: int, count: int) -> np.ndarray:
    """Entries ``start:start + count`` of the flattened C-ordered array
    ``array`` (memory-mapped from a ``.npy`` file), read from the file rather
    than through the mapping, so that no page of the mapping becomes resident."""
    if (not isinstance(array, np.memmap) or not array.flags.c_contiguous
            or array.filename is None):
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
    return _npy(path, mmap_mode="r")


def _npy(path: Path, mmap_mode: Any = None) -> np.ndarray:
    """The ``.npy`` array at ``path``; a file numpy cannot read (empty,
    truncated, not ``.npy``) raises :class:`ValueError` naming it."""
    try:
        return np.load(path, mmap_mode=mmap_mode)
    except (ValueError, EOFError) as exc:
        why = "it is empty" if path.stat().st_size == 0 else str(exc) or type(exc).__name__
        raise ValueError(f"'{path}' is not a .npy file ({why}); convert the graph again") \
            from exc
