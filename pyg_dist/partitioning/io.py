"""The on-disk format of a partition folder, written atomically.

::

    parts/
      meta.json     PartitionMeta: sizes, edge cut, method, seed, graph
                    fingerprint, partition id, and each part file's sha256
      part_0.pt     one torch.save'd dict per part: that part's owned nodes
      part_1.pt     (features, labels, masks, global ids), its in-edges as a
      ...           local CSR and its halo plan (see plan.LocalPart)
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import pickle
import shutil
import struct
import uuid
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pyg_dist.utils.files import disk_error, file_sha256, fsync_folder, payload_bytes, write_file

__all__ = ["PartitionMeta", "HeteroTypes", "write_folder", "read_meta", "read_part",
           "read_part_columns", "FORMAT_VERSION", "CLUSTERS_DIR", "META_FILE", "part_file",
           "file_sha256", "replace_folder", "save_part", "disk_error", "DISK_FIX",
           "COLUMN_CHUNK_BYTES"]

FORMAT_VERSION = 2
META_FILE = "meta.json"
#: The subfolder of a partition folder cut with ``clusters_per_part > 1``: a
#: folder of the same format with one part per cluster.
CLUSTERS_DIR = "clusters"
#: Bytes of whole rows :func:`read_part_columns` reads at a time (the
#: transient beside the columns it keeps).
COLUMN_CHUNK_BYTES = 1 << 24


@dataclass
class HeteroTypes:
    """The types of a heterogeneous partition folder (``PartitionMeta.types``).

    Attributes:
        node_types: Node types, in the input ``HeteroData``'s order.
        edge_types: Edge types ``[src, rel, dst]``, in the input's order.
        num_nodes: Nodes of each type in the whole graph.
        num_edges: Edges of each edge type (keyed ``"src__rel__dst"``).
        part_sizes: Owned nodes of each type per part.
        halo_sizes: Halo nodes of each (source) type per part: the union over
            the edge types that read the type.
        edge_cut: Edges of each edge type whose ends lie in different parts.
        node_attrs: Node-level attributes stored per node type.
        edge_attrs: Edge-level attributes stored per edge type.
        train_sizes: Training nodes of each type with a ``train_mask`` per part.
    """

    node_types: list[str]
    edge_types: list[list[str]]
    num_nodes: dict[str, int]
    num_edges: dict[str, int]
    part_sizes: dict[str, list[int]]
    halo_sizes: dict[str, list[int]]
    edge_cut: dict[str, int]
    node_attrs: dict[str, list[str]]
    edge_attrs: dict[str, list[str]]
    train_sizes: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class PartitionMeta:
    """What :func:`pyg_dist.partition` did; also written to ``<out_dir>/meta.json``.

    Attributes:
        num_parts: Number of parts (= ranks that load the folder).
        num_nodes: Nodes in the whole graph.
        num_edges: Edges in the whole graph (as given, duplicates and self-loops
            included).
        edge_cut: Edges whose source and target lie in different parts.
        part_sizes: Owned nodes per part.
        halo_sizes: Halo nodes per part (remote sources of its in-edges).
        train_sizes: Training nodes per part (empty if there is no ``train_mask``).
        method: The cutter: ``"metis"``, ``"metis-coarse"`` or ``"random"``
            (``pyg_dist.partitioning.cut.METHODS``).
        seed: The seed of the cut.
        fingerprint: sha256 of the graph's structure and attribute shapes.
        num_classes: ``max(y) + 1`` for integer node labels ``y``, else :obj:`None`.
        partition_id: Unique id of this partitioning; every part file carries it.
        node_attrs: Names of the node-level attributes stored per part.
        edge_attrs: Names of the edge-level attributes stored per part.
        part_sha256: sha256 of each part file, in part order.
        format_version: Version of this on-disk format.
        clusters_per_part: Clusters each part is the union of (1: none);
            above 1, ``CLUSTERS_DIR`` holds one part per cluster
            (cluster :math:`c` lies in part :math:`\\lfloor c / m \\rfloor`).
        types: The node and edge types of a heterogeneous graph and their
            sizes per part; :obj:`None` for a homogeneous one.
        link_splits: The splits of supervision edges each part holds (a
            link split, see :mod:`pyg_dist.tasks.supervision`); empty for none.
    """

    num_parts: int
    num_nodes: int
    num_edges: int
    edge_cut: int
    part_sizes: list[int]
    halo_sizes: list[int]
    train_sizes: list[int]
    method: str
    seed: int
    fingerprint: str
    num_classes: int | None = None
    partition_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    node_attrs: list[str] = field(default_factory=list)
    edge_attrs: list[str] = field(default_factory=list)
    part_sha256: list[str] = field(default_factory=list)
    format_version: int = FORMAT_VERSION
    clusters_per_part: int = 1
    types: HeteroTypes | None = None
    link_splits: list[str] = field(default_factory=list)

    @property
    def is_hetero(self) -> bool:
        """Whether the folder holds a heterogeneous graph
        (:class:`~pyg_dist.partitioning.HeteroTypes`)."""
        return self.types is not None

    @property
    def halo_fraction(self) -> float:
        """Halo nodes over owned nodes, summed over parts."""
        return sum(self.halo_sizes) / max(self.num_nodes, 1)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)


def part_file(p: int) -> str:
    return f"part_{p}.pt"


def write_folder(out_dir: Path, meta: PartitionMeta, parts: Iterable[dict[str, Any]],
                 overwrite: bool,
                 subfolders: dict[str, tuple[PartitionMeta, Iterable[dict[str, Any]]]]
                 | None = None) -> None:
    """Writes ``parts`` (one at a time, as the iterable makes them: a part is
    freed before the next is made) and ``meta``, and each of ``subfolders``
    alike, into a temporary sibling folder, then renames it to ``out_dir``: a
    failure at any point leaves no half-written folder."""
    out_dir = out_dir.resolve()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        _write_parts(tmp, meta, parts)
        for name, (sub_meta, sub_parts) in (subfolders or {}).items():
            (tmp / name).mkdir()
            _write_parts(tmp / name, sub_meta, sub_parts)
        replace_folder(tmp, out_dir, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_parts(folder: Path, meta: PartitionMeta, parts: Iterable[dict[str, Any]]) -> None:
    meta.part_sha256 = []
    written = 0
    for content in parts:  # no enumerate: its reused tuple would keep the last part alive
        done = len(meta.part_sha256)
        path = folder / part_file(done)
        # the folder's size, estimated from the parts so far and this one
        needed = (written + payload_bytes(content)) * meta.num_parts // (done + 1)
        save_part(content, path, f"writing {path.name}", needed)
        del content  # before the next part is made
        written += path.stat().st_size
        meta.part_sha256.append(file_sha256(path))
    try:
        (folder / META_FILE).write_text(meta.to_json())
    except OSError as exc:
        raise disk_error(exc, folder.parent, f"writing {META_FILE}", written,
                         fix=DISK_FIX) from exc


#: What to do when a partition folder does not fit.
DISK_FIX = "free space there or choose an out_dir on a filesystem with room for every part"


def save_part(content: dict[str, Any], path: Path, doing: str,
              needed: int | None = None) -> None:
    """``torch.save(content, path)``, raising the :class:`OSError` of a
    failed write (torch reports it as a :class:`RuntimeError` of its own),
    and for a full disk one that says so, how much room the folder needs
    (``needed`` bytes; this part's when not given) and what to do; ``doing``
    names the step in that message (e.g. ``"writing part_3.pt"``). The
    folder ``path`` is in is a temporary sibling of the one being made."""
    needed = payload_bytes(content) if needed is None else needed
    write_file(path, lambda f: torch.save(content, f), doing, needed, DISK_FIX,
               where=path.parent.parent)


def replace_folder(tmp: Path, out_dir: Path, overwrite: bool) -> None:
    """Renames the finished folder ``tmp`` to ``out_dir`` (its sibling),
    replacing an existing ``out_dir`` only if ``overwrite``."""
    if not out_dir.exists():
        os.replace(tmp, out_dir)
        fsync_folder(out_dir.parent)
        return
    if not overwrite:
        raise FileExistsError(
            f"'pyg_dist.partition' would overwrite '{out_dir}'; pass overwrite=True or "
            f"choose another out_dir"
        )
    old = out_dir.parent / f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}"
    os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    fsync_folder(out_dir.parent)
    shutil.rmtree(old, ignore_errors=True)


def read_meta(out_dir: str | os.PathLike) -> PartitionMeta:
    """Reads ``meta.json``; errors name what to do when the folder is not a partition.

    Args:
        out_dir (str or os.PathLike): The partition folder.
    """
    path = Path(out_dir) / META_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"'{out_dir}' is not a pyg_dist partition folder (no {META_FILE}); create it with "
            f"pyg_dist.partition(data, num_parts, out_dir='{out_dir}')"
        )
    try:
        raw = json.loads(path.read_text())
        types = raw.pop("types", None)
        meta = PartitionMeta(**raw, types=None if types is None else HeteroTypes(**types))
    except (json.JSONDecodeError, TypeError) as exc:
        raise ValueError(
            f"'{path}' is corrupted ({exc}); re-create the folder with pyg_dist.partition"
        ) from exc
    if meta.format_version != FORMAT_VERSION:
        raise ValueError(
            f"'{out_dir}' was written in format {meta.format_version}, this pyg_dist reads "
            f"format {FORMAT_VERSION}; re-partition with this version"
        )
    return meta


def read_part(out_dir: str | os.PathLike, p: int, meta: PartitionMeta) -> dict[str, Any]:
    """Loads part ``p`` after checking that it is present, intact and of this partitioning.

    Args:
        out_dir (str or os.PathLike): The partition folder.
        p (int): The part.
        meta (PartitionMeta): The folder's metadata (:func:`read_meta`),
            holding each part's checksum.
    """
    path = Path(out_dir) / part_file(p)
    fix = f"re-create the folder with pyg_dist.partition(..., num_parts={meta.num_parts})"
    if not path.is_file():
        raise FileNotFoundError(
            f"part {p} is missing from '{out_dir}' (no {path.name}): every machine needs "
            f"{META_FILE} and the part files of its own ranks (rank r loads part_r.pt; under "
            f"torchrun, node n with k ranks per node runs ranks n*k to n*k+k-1); copy "
            f"{path.name} there from the folder pyg_dist.partition wrote, or {fix}"
        )
    if p >= len(meta.part_sha256) or file_sha256(path) != meta.part_sha256[p]:
        raise ValueError(
            f"part {p} in '{out_dir}' is corrupted or from another partitioning "
            f"({path.name} does not match the checksum in {META_FILE}); {fix}"
        )
    content = torch.load(path, weights_only=True, mmap=True)
    if content.get("partition_id") != meta.partition_id or content.get("part") != p:
        raise ValueError(
            f"'{path}' belongs to partitioning {content.get('partition_id')!r}, not to "
            f"{meta.partition_id!r} of {META_FILE}; parts of different partitionings are "
            f"mixed; {fix}"
        )
    return content


def read_part_columns(out_dir: str | os.PathLike, p: int, key: str, lo: int,
                      hi: int) -> torch.Tensor:
    """Columns ``lo:hi`` of node attribute ``key`` of part ``p``, read from
    the part file a block of whole rows at a time (:data:`COLUMN_CHUNK_BYTES`):
    the process holds the columns it keeps and one block, never the part's
    whole matrix (the file is read, not mapped, so no page of it stays
    resident). Check the part with :func:`read_part` first.

    Args:
        out_dir (str or os.PathLike): The partition folder.
        p (int): The part.
        key (str): A 2-d node attribute (e.g. ``"x"``).
        lo (int): The first column.
        hi (int): One past the last column.

    Shapes:
        - **output:** ``[rows of part p, hi - lo]``, the attribute's dtype
    """
    path = Path(out_dir) / part_file(p)
    ref = _tensor_refs(path)["node"].get(key)
    if ref is None or len(ref.size) != 2:
        raise ValueError(f"part {p} in '{out_dir}' has no 2-d node attribute '{key}'; "
                         f"re-create the folder with pyg_dist.partition")
    rows, width = ref.size
    if not 0 <= lo <= hi <= width:
        raise ValueError(f"'read_part_columns' got columns {lo}:{hi} of '{key}', which has "
                         f"{width}; ask for columns within 0:{width}")
    out = torch.empty(rows, hi - lo, dtype=ref.dtype)
    if ref.stride != (width, 1):
        raise ValueError(f"'{key}' of part {p} in '{out_dir}' is not stored row by row; "
                         f"re-create the folder with pyg_dist.partition")
    itemsize = out.element_size()
    block = max(1, COLUMN_CHUNK_BYTES // max(width * itemsize, 1))
    with open(path, "rb") as f:
        start = _record_offset(f, path, ref.key) + ref.offset * itemsize
        for first in range(0, rows, block):
            count = min(block, rows - first)
            f.seek(start + first * width * itemsize)
            raw = bytearray(count * width * itemsize)
            if f.readinto(raw) != len(raw):
                raise ValueError(f"'{path}' ends inside '{key}'; re-create the folder with "
                                 f"pyg_dist.partition")
            whole = torch.frombuffer(raw, dtype=ref.dtype).view(count, width)
            out[first : first + count] = whole[:, lo:hi]
    return out


@dataclass(frozen=True)
class _TensorRef:
    """Where a tensor of a part file lies: its storage's record, its offset
    in the storage (elements), its size, stride and dtype."""

    key: str
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype


_STORAGE_DTYPES = {"FloatStorage": torch.float32, "DoubleStorage": torch.float64,
                   "HalfStorage": torch.float16, "BFloat16Storage": torch.bfloat16,
                   "LongStorage": torch.int64, "IntStorage": torch.int32,
                   "ShortStorage": torch.int16, "CharStorage": torch.int8,
                   "ByteStorage": torch.uint8, "BoolStorage": torch.bool}


class _RefReader(pickle.Unpickler):
    """Reads a part file's ``data.pkl`` with every tensor as a
    :class:`_TensorRef` (nothing else than the format's own classes)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return lambda storage, offset, size, stride, *_: _TensorRef(
                storage[0], int(offset), tuple(size), tuple(stride), storage[1])
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch" and name in _STORAGE_DTYPES:
            return _STORAGE_DTYPES[name]
        raise pickle.UnpicklingError(f"unexpected {module}.{name} in a part file")

    def persistent_load(self, pid: Any) -> Any:
        _, dtype, key, _, _ = pid
        return str(key), dtype


def _tensor_refs(path: Path) -> dict[str, Any]:
    """The part file's content with every tensor as a :class:`_TensorRef`."""
    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
        return _RefReader(archive.open(name)).load()  # type: ignore[no-any-return]


def _record_offset(f: Any, path: Path, key: str) -> int:
    """Byte offset in the part file of storage record ``key`` (stored
    uncompressed: its data follows the record's local zip header)."""
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith(f"/data/{key}"))
    f.seek(info.header_offset)
    header = f.read(30)
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    return int(info.header_offset + 30 + name_len + extra_len)

