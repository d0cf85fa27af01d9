r"""A grid folder: every rank's share of a graph on one 3D grid, written by
the ranks of that grid (``pyg-dist partition --distributed --grid XxYxZ``),
so that a rank of it later reads its own file and nothing else.

Each rank reads its share from a graph folder or a partition folder in
chunks, as :func:`~pyg_dist.strategies.grid_3d.load_grid_3d` does, reads
the blocks of all six layouts (any model's), and writes it as
``rank_<r>.pt`` into a temporary sibling folder; rank 0 writes ``grid.json``
(the grid, the node order's seed, every file's sha256) last and renames the
folder into place, so a failure on any rank leaves no complete-looking
folder.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from pyg_dist.partitioning.arrays import map_large_allocations
from pyg_dist.partitioning.dist_partitioner import write_folder_together
from pyg_dist.partitioning.io import file_sha256
from pyg_dist.runtime import distributed
from pyg_dist.strategies.grid_3d.grid import Grid3DPlace, Layout, grid_place
from pyg_dist.strategies.grid_3d.load import MAP_THRESHOLD, Grid3DData, load_grid_3d

__all__ = ["GRID_FILE", "FORMAT", "rank_file", "write_grid_folder", "read_grid_folder",
           "is_grid_folder", "grid_ranks"]

#: The file naming the grid of a grid folder.
GRID_FILE = "grid.json"
#: The version of a grid folder's format (2: a rank keeps its piece of the
#: input features' rows, cut over the spare axis).
FORMAT = 2
_NAME = "'write_grid_folder'"


def rank_file(rank: int) -> str:
    """The file of rank ``rank``'s share in a grid folder."""
    return f"rank_{rank}.pt"


def write_grid_folder(source: Any, out_dir: str | os.PathLike, shape: tuple[int, int, int],
                      seed: int = 0, permute: str = "double",
                      overwrite: bool = False) -> dict[str, Any]:
    r"""Writes the grid folder of ``source`` for the grid ``shape``, on every
    rank of the grid at once (collective; the world holds
    :math:`X \cdot Y \cdot Z` ranks). No rank holds more than its share and
    one chunk of the edges.

    Args:
        source (str or os.PathLike): A graph folder (``pyg-dist convert``) or
            a partition folder (of any part count).
        out_dir (str or os.PathLike): Folder to create; on a filesystem every
            rank sees.
        shape (tuple[int, int, int]): The grid :math:`(X, Y, Z)`.
        seed (int, optional): The node order's random permutation's seed.
            (default: :obj:`0`)
        permute (str, optional): The node order (``"double"``, ``"random"``,
            ``"none"``). (default: :obj:`"double"`)
        overwrite (bool, optional): Replace an existing ``out_dir``.
            (default: :obj:`False`)

    Returns:
        The contents of ``grid.json``, on every rank.
    """
    out = Path(out_dir).resolve()
    with distributed.failing_together(f"{_NAME} checking '{out}'"):
        if out.exists() and not overwrite:
            raise FileExistsError(f"{_NAME} would overwrite '{out}'; pass overwrite=True (CLI: "
                                  f"--overwrite) or choose another out_dir")
    data = load_grid_3d(source, shape, seed, permute)
    for rows in range(3):
        for cols in range(3):
            if rows != cols:
                data.block(Layout(rows, cols))  # every layout's, read on every rank alike
    share = data.share()
    grid = {"format": FORMAT, "shape": list(shape), "seed": seed, "permute": permute,
            "num_nodes": data.num_nodes, "num_edges": data.meta.num_edges,
            "source": str(Path(source).resolve())}

    def manifest(digests: list[str]) -> tuple[str, str]:
        return GRID_FILE, json.dumps({**grid, "rank_sha256": digests}, indent=1)

    grid["rank_sha256"] = write_folder_together(out, rank_file(distributed.rank()), share,
                                                manifest, overwrite, _NAME, "share")
    return grid


def is_grid_folder(folder: Any) -> bool:
    """Whether ``folder`` is a grid folder (holds ``grid.json``).

    Args:
        folder: A path (anything else is no grid folder).
    """
    return isinstance(folder, (str, os.PathLike)) and (Path(folder) / GRID_FILE).is_file()


def grid_ranks(folder: str | os.PathLike) -> int:
    """The ranks of the grid a grid folder was written for.

    Args:
        folder (str or os.PathLike): A grid folder.
    """
    return len(json.loads((Path(folder) / GRID_FILE).read_text())["rank_sha256"])


def read_grid_folder(folder: str | os.PathLike,
                     shape: tuple[int, int, int] | None = None,
                     seed: int | None = None) -> Grid3DData:
    """This rank's share of the grid folder ``folder`` (its own file alone);
    raises :class:`ValueError`, naming the fix, when the world or ``shape``
    is not the folder's grid, or the file is not the one written.
    Collective.

    Args:
        folder (str or os.PathLike): A grid folder (:func:`write_grid_folder`).
        shape (tuple[int, int, int], optional): The grid asked for
            (:obj:`None`: the folder's). (default: :obj:`None`)
        seed (int, optional): The node order's seed asked for (:obj:`None`:
            the folder's). (default: :obj:`None`)
    """
    map_large_allocations(MAP_THRESHOLD)  # freed activations go back (as load_grid_3d)
    grid = json.loads((Path(folder) / GRID_FILE).read_text())
    if seed is not None and seed != grid["seed"]:
        raise ValueError(f"'{folder}' orders the nodes with seed {grid['seed']}, not {seed}; "
                         f"train with Grid3D(seed={grid['seed']}) or write the folder again")
    if grid.get("format") != FORMAT:
        raise ValueError(f"'{folder}' is a grid folder of format {grid.get('format')}, not "
                         f"{FORMAT} (each rank's piece of the input features); write the "
                         f"grid folder again")
    written = tuple(grid["shape"])
    text = "x".join(map(str, written))
    if shape is not None and tuple(shape) != written:
        raise ValueError(f"'{folder}' holds the grid {text}, not "
                         f"{'x'.join(map(str, shape))}; train with --grid {text} on "
                         f"{len(grid['rank_sha256'])} ranks, or write the folder again for "
                         f"this grid")
    if distributed.world_size() != len(grid["rank_sha256"]):
        raise ValueError(f"'{folder}' holds the grid {text} of {len(grid['rank_sha256'])} "
                         f"ranks but the world has {distributed.world_size()}; launch "
                         f"{len(grid['rank_sha256'])} ranks or write the folder again")
    place: Grid3DPlace = grid_place(written)  # type: ignore[arg-type]
    rank = distributed.rank()
    path = Path(folder) / rank_file(rank)
    share: dict[str, Any] = {}
    with distributed.failing_together(f"'read_grid_folder' of '{folder}'"):
        if file_sha256(path) != grid["rank_sha256"][rank]:
            raise ValueError(f"'{path}' is not the file {GRID_FILE} names (its sha256 "
                             f"differs); write the grid folder again")
        share = torch.load(path, weights_only=True)
        if tuple(share["coords"]) != place.coords:
            raise ValueError(f"'{path}' holds the share of coordinates "
                             f"{tuple(share['coords'])}, not this rank's {place.coords}; "
                             f"write the grid folder again")
    return Grid3DData.of_share(place, share, str(folder))
