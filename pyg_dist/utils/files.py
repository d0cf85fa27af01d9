"""Writing files that are either whole or absent: the error of a full disk
(naming the folder, the room needed and the room free), the checksum files
are checked against, and the size of what is about to be written. Used by
the partition folders (:mod:`pyg_dist.partitioning.io`), the graph folders
(:mod:`pyg_dist.datasets.folder_files`) and checkpoints
(:mod:`pyg_dist.train.checkpoint`)."""
from __future__ import annotations

import errno
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

__all__ = ["disk_error", "file_sha256", "payload_bytes", "free_bytes", "human_bytes",
           "os_error_of", "fsync_folder", "write_file", "replace_durably"]


def disk_error(exc: OSError, folder: str | os.PathLike, doing: str, needed: int | None = None,
               fix: str = "free space there or write to a filesystem with room") -> OSError:
    """``exc``, or for a full disk an error that says so: the folder, the
    step (``doing``), the room ``needed`` (bytes, when known) beside the room
    free now, and the ``fix``; its ``errno`` stays ``ENOSPC``.

    Args:
        exc (OSError): The error of the failed write.
        folder (str or os.PathLike): The folder that was written.
        doing (str): The step, e.g. ``"writing part_3.pt"``.
        needed (int, optional): Bytes the whole write needs. (default: :obj:`None`)
        fix (str, optional): What to do. (default: free space or choose
            another filesystem)
    """
    if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        return exc
    free = free_bytes(folder)
    room = "" if needed is None else f" (it needs about {human_bytes(needed)}"
    room += "" if needed is None else (f", {human_bytes(free)} are free)" if free is not None
                                        else ")")
    what = "no space left" if exc.errno == errno.ENOSPC else "the disk quota is used up"
    return OSError(exc.errno, f"{what} on the device of '{folder}' while {doing}{room}; "
                              f"nothing was written; {fix}")


def os_error_of(exc: BaseException) -> OSError | None:
    """The :class:`OSError` behind ``exc``: itself, or the one torch's
    writers report as a :class:`RuntimeError` of their own (its context)."""
    if isinstance(exc, OSError):
        return exc
    cause = exc.__context__ or exc.__cause__
    return cause if isinstance(cause, OSError) else None


def free_bytes(folder: str | os.PathLike) -> int | None:
    """Bytes free for this user on the filesystem of ``folder`` (or of its
    nearest existing parent); :obj:`None` when it cannot be asked."""
    path = Path(folder)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def human_bytes(size: int | None) -> str:
    """``"12.3 MB"`` (decimal units)."""
    if size is None:
        return "an unknown amount"
    value = float(size)
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{int(value)} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable: TB ends the loop")


def payload_bytes(obj: Any) -> int:
    """The bytes of the tensors and arrays in ``obj`` (nested dicts, lists,
    tuples), each storage counted once: about what ``torch.save`` writes."""
    seen: set[int] = set()

    def walk(value: Any) -> int:
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            key = storage.data_ptr()
            if key in seen:
                return 0
            seen.add(key)
            return int(storage.nbytes())
        if isinstance(value, np.ndarray):
            return int(value.nbytes)
        if isinstance(value, dict):
            return sum(walk(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return sum(walk(v) for v in value)
        return 0

    return walk(obj)


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of the file at ``path``, read in blocks of 4 MiB into one
    buffer (a reader of a large file holds one block at a time)."""
    digest = hashlib.sha256()
    block = bytearray(1 << 22)
    view = memoryview(block)
    with open(path, "rb") as f:
        while size := f.readinto(block):
            digest.update(view[:size])
    return digest.hexdigest()


def fsync_folder(folder: str | os.PathLike) -> None:
    """Makes the renames in ``folder`` durable (a crash of the machine
    right after keeps them); does nothing where folders cannot be synced."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_file(path: str | os.PathLike, write: Callable[[IO[bytes]], Any], doing: str,
               needed: int | None = None,
               fix: str = "free space there or write to a filesystem with room",
               where: str | os.PathLike | None = None) -> None:
    """Writes ``path`` with ``write(f)`` and makes it durable (flushed and
    fsynced), or leaves no file there: on any error (a full disk, Ctrl-C)
    what was written is removed; a failed write raises its
    :class:`OSError` (also where torch reports it as a :class:`RuntimeError`),
    a full disk the :func:`disk_error` naming the folder, the room ``needed``
    and the ``fix``. Write to a
    temporary name in the destination's folder and :func:`replace_durably`
    it into place, so a reader sees the old file or the new one, whole.

    Args:
        path (str or os.PathLike): The (temporary) file to write.
        write (Callable): Writes the content to the open binary file.
        doing (str): The step, as a full-disk error names it
            (``"writing rank_0.pt.tmp"``).
        needed (int, optional): Bytes the write needs. (default: :obj:`None`)
        fix (str, optional): What to do when the disk is full.
        where (str or os.PathLike, optional): The folder a full-disk error
            names. (default: the folder of ``path``)
    """
    path = Path(path)
    try:
        with open(path, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException as exc:
        path.unlink(missing_ok=True)
        cause = os_error_of(exc) if isinstance(exc, Exception) else None
        if cause is None:
            raise
        full = disk_error(cause, path.parent if where is None else where, doing, needed, fix=fix)
        if full is cause and cause is exc:  # not a full disk: the error as it came
            raise
        if full is cause:  # the OSError behind torch's RuntimeError
            raise cause from exc
        raise full from exc


def replace_durably(tmp: str | os.PathLike, path: str | os.PathLike) -> None:
    """Renames ``tmp`` to ``path`` (atomic on one filesystem: a reader sees
    the old file or the new one) and syncs their folder."""
    os.replace(tmp, path)
    fsync_folder(Path(path).parent)
