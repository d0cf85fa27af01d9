r"""Node embeddings out of a trained model, by every rank: :func:`save_embeddings`
writes a folder, :func:`read_embeddings` reads it back in global order.

::

    emb/
      manifest.json   shape, dtype, each part's rows and the sha256 of its files
      ids_0.npy       rank 0's global node ids       ([n_0] int64)
      rows_0.npy      rank 0's embeddings, same order ([n_0, F])
      ...

Each rank writes its own two files into a hidden folder beside ``emb/`` and
reads them back for their checksums; once every rank has, rank 0 writes the
manifest with every file's checksum and renames the folder: a reader never
sees a partial one, and a folder that exists is whole.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from pyg_dist.runtime import distributed
from pyg_dist.utils.files import file_sha256

__all__ = ["save_embeddings", "write_embeddings", "read_embeddings", "Embeddings", "MANIFEST"]

#: The manifest's file name.
MANIFEST = "manifest.json"


@torch.no_grad()
def save_embeddings(model: nn.Module, data: Any, out_dir: str | os.PathLike,
                    overwrite: bool = False) -> Path:
    r"""Writes every node's embedding, ``model(data.x, data.edge_index)`` in
    evaluation mode (``model(data.edge_index)`` for a graph without ``x``,
    e.g. LightGCN's), to the folder ``out_dir``: each rank its own rows with
    their global ids (see the module's layout). Every rank must see
    ``out_dir`` (one machine, or a shared file system). Collective.

    Args:
        model (torch.nn.Module): The trained model (its encoder's output is
            the embedding).
        data (DistData): This rank's part (a PyG ``Data`` in one process).
        out_dir (str or os.PathLike): The folder to write.
        overwrite (bool, optional): Replace an existing folder. (default: :obj:`False`)

    Returns:
        The folder written.

    Shapes:
        - **output:** a folder of :math:`(|\mathcal{V}|, F)` rows
    """
    out = Path(out_dir)
    if out.exists() and not overwrite:
        raise FileExistsError(f"'save_embeddings' found '{out}'; pass overwrite=True (CLI: "
                              f"--overwrite) or choose another folder")
    model.eval()
    inputs = (data.edge_index,) if getattr(data, "x", None) is None else (data.x,
                                                                           data.edge_index)
    rows = model(*inputs).detach()
    gid = getattr(data, "global_id", None)
    return write_embeddings(rows, torch.arange(rows.size(0)) if gid is None else gid, out,
                            overwrite)


def write_embeddings(rows: Tensor, global_id: Tensor, out_dir: str | os.PathLike,
                     overwrite: bool = False) -> Path:
    r"""Writes this rank's ``rows`` (the embeddings of the nodes
    ``global_id``) into the folder ``out_dir`` beside every other rank's.
    It is the write step of :func:`~pyg_dist.save_embeddings`, for rows
    computed another way. The rows are written as
    they are (no copy on the CPU; numpy streams them to the file), and each
    rank reads its files back for their checksums in blocks of 4 MiB. Collective.

    Args:
        rows (torch.Tensor): This rank's rows, ``[n, *]``.
        global_id (torch.Tensor): ``[n]`` the global id of each row.
        out_dir (str or os.PathLike): The folder to write.
        overwrite (bool, optional): Replace an existing folder. (default: :obj:`False`)

    Returns:
        The folder written.

    Shapes:
        - **input:** ``rows`` :math:`(n, *)`, ``global_id`` :math:`(n)` int64
    """
    out = Path(out_dir)
    if out.exists() and not overwrite:
        raise FileExistsError(f"'write_embeddings' found '{out}'; pass overwrite=True (CLI: "
                              f"--overwrite) or choose another folder")
    if global_id.numel() != rows.size(0):
        raise ValueError(f"'write_embeddings' got {rows.size(0)} rows and {global_id.numel()} "
                         f"global ids; pass the global id of each row (data.global_id)")
    rows_np = rows.detach().cpu().numpy()
    ids = global_id.detach().cpu().to(torch.int64).numpy()
    rank, world = distributed.rank(), max(distributed.world_size(), 1)
    token = distributed.all_gather_objects(uuid.uuid4().hex)[0] \
        if distributed.is_distributed() else uuid.uuid4().hex
    tmp = out.with_name(f".{out.name}.partial-{token[:12]}")
    with distributed.failing_together(f"writing rank {rank}'s embeddings into '{tmp}' (every "
                                      f"rank must see the folder)"):
        tmp.mkdir(parents=True, exist_ok=True)
        np.save(tmp / f"ids_{rank}.npy", ids)
        np.save(tmp / f"rows_{rank}.npy", rows_np)
        digests = {f.name: file_sha256(f) for f in (tmp / f"ids_{rank}.npy",
                                                   tmp / f"rows_{rank}.npy")}
    mine = (rows_np.shape, rows_np.dtype.str, digests)
    layouts = distributed.all_gather_objects(mine) if distributed.is_distributed() else [mine]
    with distributed.failing_together(f"renaming '{tmp}' to '{out}'"):
        if rank == 0:
            _finish(tmp, out, layouts, world, overwrite)
    return out


def _finish(tmp: Path, out: Path, layouts: list[Any], world: int, overwrite: bool) -> None:
    widths = {(tuple(shape[1:]), dtype) for shape, dtype, _ in layouts}
    if len(widths) != 1:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ValueError(f"'save_embeddings' got rows of different widths or dtypes on the "
                         f"ranks ({sorted(widths)}); pass the same model on every rank")
    (width, dtype), = widths
    manifest = {
        "num_nodes": sum(shape[0] for shape, _, _ in layouts), "shape_per_row": list(width),
        "dtype": dtype, "ranks": world, "rows_per_rank": [shape[0] for shape, _, _ in layouts],
        "sha256": dict(sorted(d for _, _, digests in layouts for d in digests.items())),
    }
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    if out.exists() and overwrite:
        shutil.rmtree(out)
    os.replace(tmp, out)


@dataclass
class Embeddings:
    """A folder of embeddings, read back: each part's ids and rows
    memory-mapped (``numpy.load(..., mmap_mode="r")``).

    Attributes:
        ids (list[numpy.ndarray]): Each part's global ids.
        rows (list[numpy.ndarray]): Each part's rows.
        num_nodes (int): Nodes of the whole graph.
    """

    ids: list[np.ndarray]
    rows: list[np.ndarray]
    num_nodes: int

    def __len__(self) -> int:
        return self.num_nodes

    def __getitem__(self, index: Any) -> np.ndarray:
        """The rows of the global ids ``index`` (an int, a slice or an array)."""
        where = self._where()
        index = np.arange(self.num_nodes)[index]
        part, pos = where[0][index], where[1][index]
        width = self.rows[0].shape[1:]
        out = np.empty((np.size(index), *width), dtype=self.rows[0].dtype)
        for p, rows in enumerate(self.rows):
            mine = np.flatnonzero(np.atleast_1d(part) == p)
            out[mine] = rows[np.atleast_1d(pos)[mine]]
        return out[0] if np.ndim(index) == 0 else out

    def numpy(self) -> np.ndarray:
        """Every row in global order (one array)."""
        return self[:]

    def tensor(self) -> Tensor:
        """Every row in global order, as a tensor."""
        return torch.from_numpy(self.numpy())

    def _where(self) -> tuple[np.ndarray, np.ndarray]:
        if not hasattr(self, "_at"):
            part = np.full(self.num_nodes, -1, dtype=np.int64)
            pos = np.zeros(self.num_nodes, dtype=np.int64)
            for p, ids in enumerate(self.ids):
                part[ids] = p
                pos[ids] = np.arange(ids.shape[0])
            if (part < 0).any():
                raise ValueError(f"the embeddings lack {(part < 0).sum()} of "
                                 f"{self.num_nodes} nodes; write them again with "
                                 f"save_embeddings on every rank")
            self._at = (part, pos)
        return self._at


def read_embeddings(folder: str | os.PathLike, verify: bool = True) -> Embeddings:
    """Reads a folder :func:`save_embeddings` wrote, memory-mapped.

    Args:
        folder (str or os.PathLike): The folder.
        verify (bool, optional): Check every file against the manifest's
            sha256 first. (default: :obj:`True`)
    """
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"'{folder}' holds no embeddings (no {MANIFEST}); write them "
                                f"with pyg_dist.save_embeddings(model, data, '{folder}') or "
                                f"pyg-dist embed")
    manifest = json.loads(path.read_text())
    if verify:
        for name, digest in manifest["sha256"].items():
            if file_sha256(folder / name) != digest:
                raise ValueError(f"'{folder / name}' does not match its checksum in "
                                 f"{MANIFEST}; write the embeddings again")
    ranks = range(manifest["ranks"])
    return Embeddings([np.load(folder / f"ids_{r}.npy", mmap_mode="r") for r in ranks],
                      [np.load(folder / f"rows_{r}.npy", mmap_mode="r") for r in ranks],
                      int(manifest["num_nodes"]))
