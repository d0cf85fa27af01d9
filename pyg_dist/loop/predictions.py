"""Every node's prediction in global order, written by the ranks to one file:
no rank holds more than its own rows."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from torch import Tensor

from pyg_dist.runtime import distributed

__all__ = ["save_predictions", "manifest_path"]


def manifest_path(path: str | os.PathLike) -> Path:
    """The manifest written beside the predictions file ``path``
    (``preds.npy`` -> ``preds.json``).

    Args:
        path (str or os.PathLike): The predictions file.
    """
    return Path(path).with_suffix(".json")


def save_predictions(pred: Tensor, data: Any, path: str | os.PathLike) -> Path:
    r"""Writes the predictions of all ranks' nodes to the NumPy file
    ``path``, row :math:`i` for the node of global id :math:`i` (the order of
    the graph given to :func:`pyg_dist.partition`), and a manifest beside it
    (``preds.json`` beside ``preds.npy``: shape, dtype, nodes, the rows of
    each rank). Each rank writes its
    own rows at their global ids into a file rank 0 preallocates, so no rank
    holds more than its rows; the file appears under its name only once every
    row is written (it is written as ``.<name>.partial`` and renamed), so a
    reader never sees a partial one. Read it with
    ``numpy.load(path, mmap_mode="r")``. Every rank must see ``path`` (one
    machine, or a shared file system). Collective.

    Args:
        pred (torch.Tensor): This rank's rows: logits :math:`(N, C)`, classes
            :math:`(N)` (``out.argmax(dim=-1)``), or any per-node rows of one
            dtype on every rank.
        data (DistData): This rank's part, whose ``global_id`` names the rows.
        path (str or os.PathLike): The file to write (``.npy``), replaced if
            it exists.

    Returns:
        The path written.

    Shapes:
        - **input:** :math:`(N, *)` (:math:`N` this rank's nodes)
        - **output:** a file of :math:`(|\mathcal{V}|, *)`
    """
    path = Path(path)
    global_id = data.global_id
    if not isinstance(pred, Tensor) or pred.dim() < 1 or pred.size(0) != global_id.numel():
        got = tuple(pred.shape) if isinstance(pred, Tensor) else type(pred).__name__
        raise ValueError(f"'pyg_dist.save_predictions' takes one row per node of this rank "
                         f"({global_id.numel()} rows, in the order of data.global_id; got "
                         f"{got}); pass model(data.x, data.edge_index) or its argmax(dim=-1) "
                         f"for the same DistData")
    rows = pred.detach().cpu().numpy()
    shape = (int(data.meta.num_nodes), *rows.shape[1:])
    layouts = distributed.all_gather_objects((shape, rows.dtype.str, rows.shape[0]))
    if len({layout[:2] for layout in layouts}) != 1:
        raise ValueError(f"'pyg_dist.save_predictions' needs the same row width and dtype on "
                         f"every rank (got {[layout[:2] for layout in layouts]}); pass the same "
                         f"model's output on every rank")
    if sum(layout[2] for layout in layouts) != shape[0]:
        raise ValueError(f"'pyg_dist.save_predictions': the ranks hold "
                         f"{sum(layout[2] for layout in layouts)} rows but the graph has "
                         f"{shape[0]} nodes; call it on every rank of the partition, each with "
                         f"its own part's rows")
    partial = path.with_name(f".{path.name}.partial")
    rank = distributed.rank()
    with distributed.failing_together(f"preallocating '{partial}'"):
        if rank == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.lib.format.open_memmap(partial, mode="w+", dtype=rows.dtype, shape=shape).flush()
    with distributed.failing_together(f"writing this rank's rows into '{partial}' (every "
                                      f"rank must see the file: one machine or a shared "
                                      f"file system)"):
        if rows.shape[0]:
            out = np.lib.format.open_memmap(partial, mode="r+")
            out[global_id.cpu().numpy()] = rows
            out.flush()
            del out
    with distributed.failing_together(f"renaming '{partial}' to '{path}'"):
        if rank == 0:
            os.replace(partial, path)
            manifest = {"file": path.name, "shape": list(shape), "dtype": rows.dtype.str,
                        "num_nodes": shape[0], "ranks": len(layouts),
                        "rows_per_rank": [layout[2] for layout in layouts],
                        "order": "global node id"}
            _write_json(manifest_path(path), manifest)
    return path


def _write_json(path: Path, value: dict[str, Any]) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(value, indent=1) + "\n")
    os.replace(partial, path)

