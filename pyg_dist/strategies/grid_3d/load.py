r"""A rank's share of a graph on the 3D grid: the adjacency blocks of the
layouts its model aggregates in, its block of the input features and the
labels of its row blocks, read in chunks from a graph folder or a partition
folder (of any part count; or a graph in memory) in the permuted node order of
``permute.py``.

Reading takes three passes over the edges, a chunk at a time, none of which
keeps more than this rank's blocks: each rank counts the degrees of its
:math:`1/P` share of the edges (summed over the ranks: the order needs them);
then each layout's block keeps the edges whose target and source positions
fall in the rank's runs; the per-node sums the aggregations normalise by
(in-degrees, self-loops) are summed over the ranks of one block layout.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pyg_dist.datasets.folder_files import GRAPH_FILE
from pyg_dist.halo.ledger import Ledger
from pyg_dist.metrics import MASKS
from pyg_dist.partitioning.arrays import map_large_allocations
from pyg_dist.partitioning.io import META_FILE, PartitionMeta
from pyg_dist.runtime import distributed
from pyg_dist.strategies.grid_3d.grid import (
    INPUT,
    Grid3DPlace,
    Layout,
    grid_place,
)
from pyg_dist.strategies.grid_3d.permute import node_order
from pyg_dist.strategies.grid_3d.readers import DataReader, FolderReader, PartsReader, Reader
from pyg_dist.utils.dropout import DropoutState

__all__ = ["Grid3DData", "Block", "NodeSums", "load_grid_3d", "index_dtype", "MAP_THRESHOLD"]

#: Bytes from which glibc gives an allocation a mapping of its own, returned
#: to the system when freed (``map_large_allocations``; glibc's default
#: starting value): a layer's chunks then leave no free pages resident in the
#: heap. The resident size of each 2x2x4 rank sampled while it trained the
#: memory benchmark's model on its 400k-node graph peaked at 145 MiB above the
#: imports against 162 MiB with 1 MiB (the heap's free pages 4 MiB against 20).
MAP_THRESHOLD = 1 << 17


@dataclass
class Block:
    """This rank's block of the adjacency in one layout, stored once, as
    CSR: the edges whose target's position lies in its run ``rows`` of the
    layout's rows axis and whose source's in its run ``cols`` of the cols
    axis, by target (a target's edges in the order they were read).

    Attributes:
        rows (tuple[int, int]): Its target positions ``[lo, hi)``.
        cols (tuple[int, int]): Its source positions ``[lo, hi)``.
        rowptr (torch.Tensor): ``[rows + 1]`` where each target's edges start.
        col (torch.Tensor): ``[nnz]`` source of each edge, from ``cols[0]``
            (both int32 where the run and the edges fit: the smallest index
            dtype ``spmm`` reads).
        weight (torch.Tensor, optional): ``[nnz]`` its edge weights.
    """

    rows: tuple[int, int]
    cols: tuple[int, int]
    rowptr: Tensor
    col: Tensor
    weight: Tensor | None = None

    @classmethod
    def of_edges(cls, rows: tuple[int, int], cols: tuple[int, int], row: Tensor, col: Tensor,
                 weight: Tensor | None = None) -> Block:
        """The block of edges ``(row, col)`` (targets from ``rows[0]``,
        sources from ``cols[0]``, any order)."""
        order = torch.argsort(row, stable=True)
        size = rows[1] - rows[0]
        dtype = index_dtype(max(cols[1] - cols[0], row.numel()))
        rowptr = torch.zeros(size + 1, dtype=torch.long)
        torch.cumsum(torch.bincount(row, minlength=size), 0, out=rowptr[1:])
        return cls(rows, cols, rowptr.to(dtype), col[order].to(dtype),
                   None if weight is None else weight[order])

    @property
    def nnz(self) -> int:
        return int(self.col.numel())

    @property
    def row(self) -> Tensor:
        """``[nnz]`` target of each edge, from ``rows[0]`` (made at each call)."""
        counts = (self.rowptr[1:] - self.rowptr[:-1]).long()
        return torch.repeat_interleave(torch.arange(counts.numel()), counts)

    def loop(self, row: Tensor | None = None) -> Tensor:
        """``[nnz]`` whether each edge is a self-loop (``row``: :attr:`row`, if made)."""
        row = self.row if row is None else row
        return row + self.rows[0] == self.col.long() + self.cols[0]

    def diagonal(self) -> tuple[int, int]:
        """The positions ``[lo, hi)`` that are both a row and a column of the block."""
        lo, hi = max(self.rows[0], self.cols[0]), min(self.rows[1], self.cols[1])
        return lo, max(lo, hi)

    def nbytes(self) -> int:
        """Bytes its tensors hold."""
        return sum(t.numel() * t.element_size() for t in (self.rowptr, self.col, self.weight)
                   if t is not None)


def index_dtype(size: int) -> torch.dtype:
    """The smallest index dtype ``spmm`` reads for positions below ``size``."""
    return torch.int32 if size < 2**31 else torch.long


@dataclass
class NodeSums:
    """Per-node sums of the whole graph for one run of positions (what the
    aggregations normalise by), summed over every block that holds them.

    Attributes:
        in_edges (torch.Tensor): ``[run]`` in-edges (self-loops and duplicates
            counted; int32).
        in_other (torch.Tensor): ``[run]`` in-edges that are no self-loop (int32).
        loop (torch.Tensor): ``[run]`` whether the node has a self-loop.
        weight_other (torch.Tensor, optional): ``[run]`` the weights of the
            in-edges that are no self-loop (float64; a weighted graph's only).
        loop_weight (torch.Tensor, optional): ``[run]`` the weight of its last
            self-loop (float64; a weighted graph's only).
    """

    in_edges: Tensor
    in_other: Tensor
    loop: Tensor
    weight_other: Tensor | None = None
    loop_weight: Tensor | None = None


class Grid3DData:
    """One rank's share of a graph on the 3D grid (:func:`load_grid_3d`).

    Args:
        place (Grid3DPlace): Its place on the grid.
        reader: What reads the graph's edges and node rows in chunks.
        seed (int, optional): The node order's random permutation's seed.
            (default: :obj:`0`)
        permute (str, optional): The node order (``"double"``, ``"random"``,
            ``"none"``). (default: :obj:`"double"`)
        folder (str or os.PathLike, optional): Where it is read from.
            (default: :obj:`None`)

    Attributes:
        place (Grid3DPlace): Its place on the grid.
        num_nodes (int): :math:`N`.
        num_features (int): The input features' width.
        order (torch.Tensor): ``[N]`` global id of the node at each position,
            int32 where :math:`N` fits (:obj:`None` when read from a grid
            folder, which keeps each run's ids alone: :meth:`global_id`).
        x (torch.Tensor): Its block of the input features in layout
            :data:`~pyg_dist.strategies.grid_3d.INPUT` (rows over y,
            columns over z): the piece of its run's rows cut again over
            x (:meth:`x_rows`), gathered where a layer reads it.
        y, train_mask, val_mask, test_mask (torch.Tensor): Labels and masks
            of its run of the x axis (:meth:`labels` gives any axis's).
        ledger (Ledger): Bytes its collectives moved.
        dropout: Its shared dropout seed and calls (a ``DropoutState`` of
            ``pyg_dist.utils.dropout``).
        folder (str, optional): Where it was read from.
        meta (PartitionMeta): The graph's sizes and classes (a partition
            folder's own; one part of the whole graph otherwise).
    """

    def __init__(self, place: Grid3DPlace, reader: Reader, seed: int = 0,
                 permute: str = "double", folder: Any = None) -> None:
        self.place, self.folder = place, folder
        self._reader: Reader | None = reader  # None: read from a grid folder, nothing to read
        self.num_nodes, self.num_features = reader.num_nodes, reader.num_features
        self.weighted, self.meta = reader.weighted, reader.meta
        self.ledger, self.dropout = Ledger(), DropoutState()
        self.registry = None
        order = node_order(self._degrees(), place.shape, seed, permute)
        self.order: Tensor | None = order.to(index_dtype(self.num_nodes))
        self._blocks: dict[tuple[int, int], Block] = {}
        self._ids: dict[int, Tensor] = {}
        self._sums: dict[int, NodeSums] = {}
        self._labels: dict[int, dict[str, Tensor]] = {}
        self.block(INPUT)  # layer 0's, and the node sums
        start = self.run(INPUT.rows)[0]
        lo, hi = self.x_rows()
        self.x = reader.nodes("x", self.order[start + lo : start + hi].long(),
                              place.block(self.num_features, INPUT.cols))
        for key, value in self.labels(0).items():
            setattr(self, key, value)
        self.edge_index = self  # what the loop's Task reads: the grid's share

    def keys(self) -> list[str]:
        return ["x", "edge_index", *self.labels(0)]

    def run(self, axis: int) -> tuple[int, int]:
        """This rank's run of positions ``[lo, hi)`` on ``axis``."""
        return self.place.block(self.num_nodes, axis)

    def x_rows(self) -> tuple[int, int]:
        """``[lo, hi)`` of the rows of this rank's run on the input's rows
        axis that its block of the input features holds: its piece over the
        spare axis (``distributed.row_piece``; the whole run on an axis of
        one rank)."""
        lo, hi = self.run(INPUT.rows)
        spare = INPUT.spare
        return distributed.row_piece(hi - lo, self.place.shape[spare], self.place.coords[spare])

    def global_id(self, axis: int) -> Tensor:
        """``[run]`` global id of each position of this rank's run on ``axis``."""
        if self.order is None:  # read from a grid folder: the runs' ids alone
            return self._ids[axis]
        lo, hi = self.run(axis)
        return self.order[lo:hi].long()

    def share(self) -> dict[str, Any]:
        """This rank's whole share as plain values (what a grid folder keeps
        of it): its runs' global ids, node sums and labels on every axis, its
        blocks read so far and its piece of the input features."""
        meta = dataclasses.asdict(self.meta)
        return {"shape": list(self.place.shape), "coords": list(self.place.coords),
                "num_nodes": self.num_nodes, "num_features": self.num_features,
                "weighted": self.weighted, "meta": meta, "x": self.x,
                "ids": {str(a): self.global_id(a).clone() for a in range(3)},
                "sums": {str(a): dataclasses.asdict(self.sums(a)) for a in range(3)},
                "labels": {str(a): self.labels(a) for a in range(3)},
                "blocks": {f"{r}{c}": dataclasses.asdict(b) for (r, c), b in self._blocks.items()}}

    @classmethod
    def of_share(cls, place: Grid3DPlace, share: dict[str, Any],
                 folder: Any = None) -> Grid3DData:
        """The data of a share :meth:`share` gave (read from a grid folder);
        every block it uses must be in it.

        Args:
            place (Grid3DPlace): This rank's place (the share's).
            share (dict): The share.
            folder (str or os.PathLike, optional): Where it was read from.
                (default: :obj:`None`)
        """
        data = cls.__new__(cls)
        data.place, data._reader, data.folder = place, None, folder
        data.num_nodes, data.num_features = int(share["num_nodes"]), int(share["num_features"])
        data.weighted, data.meta = bool(share["weighted"]), PartitionMeta(**share["meta"])
        data.ledger, data.dropout, data.registry = Ledger(), DropoutState(), None
        data.order = None
        data._ids = {int(a): ids for a, ids in share["ids"].items()}
        data._sums = {int(a): NodeSums(**sums) for a, sums in share["sums"].items()}
        data._labels = {int(a): labels for a, labels in share["labels"].items()}
        data._blocks = {(int(key[0]), int(key[1])): Block(
            tuple(b["rows"]), tuple(b["cols"]), b["rowptr"], b["col"], b["weight"])
            for key, b in share["blocks"].items()}
        data.x = share["x"]
        for key, value in data.labels(0).items():
            setattr(data, key, value)
        data.edge_index = data
        return data

    def labels(self, axis: int) -> dict[str, Tensor]:
        """``y`` and the masks of this rank's run on ``axis``."""
        if axis not in self._labels:
            ids, reader = self.global_id(axis), self._source()
            self._labels[axis] = {key: reader.nodes(key, ids)
                                  for key in ("y", *MASKS) if key in reader.node_attrs}
        return self._labels[axis]

    def _source(self) -> Reader:
        """What this share is read from (a share of a grid folder holds all of it)."""
        assert self._reader is not None, "a grid folder's share holds every run and block"
        return self._reader

    def _degrees(self) -> Tensor:
        """``[N]`` every node's in + out degree: each rank counts its share
        of the edges, summed over the ranks (collective)."""
        n = self.num_nodes
        degree = torch.zeros(n, dtype=torch.long)
        for edges, _ in self._source().edges(distributed.rank(), distributed.world_size()):
            degree += torch.bincount(edges.reshape(-1), minlength=n)
        return distributed.all_reduce(degree)

    def block(self, layout: Layout) -> Block:
        """This rank's adjacency block of the aggregation that starts in
        ``layout`` (targets over its spare axis, sources over its rows axis),
        read at the first call (collective then: the first also sums the node
        sums over the ranks of its layout)."""
        key = (layout.spare, layout.rows)
        if key not in self._blocks:
            if self._reader is None:
                raise ValueError(f"'{self.folder}' holds this rank's blocks "
                                 f"{sorted(self._blocks)} (targets' axis, sources' axis), "
                                 f"not {key}; write the grid folder again with every block")
            self._blocks[key] = self._read_block(*key)
        return self._blocks[key]

    def blocks(self) -> dict[tuple[int, int], Block]:
        """The blocks read so far, by (targets' axis, sources' axis)."""
        return dict(self._blocks)

    def _read_block(self, r: int, c: int) -> Block:
        rows, cols = self.run(r), self.run(c)
        small = index_dtype(self.num_nodes)  # the chunks kept, in the smallest dtype
        kept: list[tuple[Tensor, Tensor, Tensor | None]] = []
        assert self.order is not None, "a share read from a graph knows the node order"
        position = torch.empty(self.num_nodes, dtype=torch.long)  # made per block, not kept
        position[self.order.long()] = torch.arange(self.num_nodes)
        for edges, weight in self._source().edges(0, 1):
            dst, src = position[edges[1]], position[edges[0]]
            mine = (dst >= rows[0]) & (dst < rows[1]) & (src >= cols[0]) & (src < cols[1])
            kept.append(((dst[mine] - rows[0]).to(small), (src[mine] - cols[0]).to(small),
                         None if weight is None else weight[mine]))
            del edges, dst, src, mine
        row = torch.cat([k[0] for k in kept]) if kept else torch.zeros(0, dtype=small)
        col = torch.cat([k[1] for k in kept]) if kept else torch.zeros(0, dtype=small)
        weight = (torch.cat([k[2] for k in kept]) if kept and self.weighted  # type: ignore[misc]
                  else None)
        del kept
        block = Block.of_edges(rows, cols, row, col, weight)
        del row, col, weight
        if not self._sums:
            self._sum_nodes(block, r, c)
        return block

    def _sum_nodes(self, block: Block, r: int, c: int) -> None:
        """Sums, over the ranks of ``block``'s layout (every edge once), each
        node's in-edges, self-loop and weights; keeps the runs of each axis."""
        n = self.num_nodes
        row = block.row
        target = row + block.rows[0]
        loop = block.loop(row)
        weight = (block.weight.double() if block.weight is not None
                  else torch.ones(block.nnz, dtype=torch.float64))
        sums = torch.zeros(5, n, dtype=torch.float64)
        sums[0].index_add_(0, target, torch.ones(block.nnz, dtype=torch.float64))
        sums[1].index_add_(0, target[~loop], torch.ones(int((~loop).sum()),
                                                        dtype=torch.float64))
        sums[2].index_add_(0, target[~loop], weight[~loop])
        # the last self-loop of a node wins (as PyG's add_remaining_self_loops);
        # one rank of the layout holds all of a node's self-loops
        last = torch.full((n,), -1, dtype=torch.long)
        edge = torch.arange(block.nnz)
        last.scatter_reduce_(0, target[loop], edge[loop], "amax")
        has = last >= 0
        sums[3][has] = 1.0
        sums[4][has] = weight[last[has]]
        sums = distributed.all_reduce(sums, group=self.place.group(r, c))
        weighted = block.weight is not None
        for axis in range(3):  # copies of the runs: the [5, N] sums go
            lo, hi = self.run(axis)
            part = sums[:, lo:hi]
            self._sums[axis] = NodeSums(part[0].int(), part[1].int(), part[3] > 0,
                                        part[2].clone() if weighted else None,
                                        part[4].clone() if weighted else None)

    def sums(self, axis: int) -> NodeSums:
        """The node sums of this rank's run on ``axis``."""
        return self._sums[axis]

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        raise AttributeError(f"'Grid3DData' has no attribute '{key}'; this rank holds "
                             f"{', '.join(self.keys())}")

    def __repr__(self) -> str:
        return (f"Grid3DData(grid={self.place}, coords={self.place.coords}, "
                f"x={list(self.x.shape)}, nnz={[b.nnz for b in self._blocks.values()]})")


def load_grid_3d(source: Any, shape: tuple[int, int, int], seed: int = 0,
                 permute: str = "double") -> Grid3DData:
    """This rank's share of ``source`` on the grid ``shape``. Collective.

    Args:
        source (str, os.PathLike or torch_geometric.data.Data): A graph
            folder (``pyg-dist convert``, :func:`~pyg_dist.datasets.write_graph_folder`),
            or a graph in memory (every rank passing the same one).
        shape (tuple[int, int, int]): The grid :math:`(X, Y, Z)`.
        seed (int, optional): The node order's random permutation's seed.
            (default: :obj:`0`)
        permute (str, optional): The node order:
            ``"double"``, ``"random"`` or ``"none"`` (the graph's own).
            (default: :obj:`"double"`)
    """
    map_large_allocations(MAP_THRESHOLD)  # each pass's and each layer's chunks go back
    place = grid_place(shape)
    reader: Reader | None = None
    error: Exception | None = None
    folder = None
    try:
        if hasattr(source, "edge_index"):
            reader = DataReader(source)
        elif (Path(source) / GRAPH_FILE).is_file():
            reader, folder = FolderReader(source), source
        elif (Path(source) / META_FILE).is_file():
            reader, folder = PartsReader(source), source
        else:
            raise ValueError(f"'Grid3D.load' reads a graph folder (pyg-dist convert ... --out "
                             f"DIR) or a partition folder (pyg-dist partition ... --out-dir "
                             f"DIR); '{source}' has neither {GRAPH_FILE} nor {META_FILE}")
    except (OSError, ValueError) as exc:
        error = exc
    distributed.raise_together(error, f"'Grid3D.load' of '{source}'")
    assert reader is not None, "every rank opened the graph"
    return Grid3DData(place, reader, seed, permute, folder)
