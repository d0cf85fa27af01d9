"""What reads a graph for the 3D grid, a chunk at a time: a graph folder, a
partition folder (a part at a time), or a graph in memory."""
from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from pyg_dist.datasets.ondisk import GraphFolder
from pyg_dist.metrics import MASKS
from pyg_dist.partitioning.io import PartitionMeta, read_meta, read_part, read_part_columns
from pyg_dist.strategies.grid_3d.grid import NAME, bounds

__all__ = ["Reader", "FolderReader", "PartsReader", "DataReader", "whole_meta", "EDGE_CHUNK"]

#: Edges read at a time (each a pair of int64 and a weight: 20 MB a chunk).
EDGE_CHUNK = 1 << 20


class Reader:
    """Chunks of a graph's edges and rows of its node attributes."""

    num_nodes: int
    num_edges: int
    num_features: int
    weighted: bool
    node_attrs: list[str]
    meta: PartitionMeta

    def edges(self, share: int, shares: int) -> Iterator[tuple[Tensor, Tensor | None]]:
        """``([2, chunk] (source, target) global ids, [chunk] weights or
        None)`` of share ``share`` of ``shares`` of the edges (every edge in
        one share), a chunk at a time."""
        raise NotImplementedError

    def nodes(self, name: str, ids: Tensor, columns: tuple[int, int] | None = None) -> Tensor:
        """Rows ``ids`` (columns ``[lo, hi)``) of node attribute ``name``."""
        raise NotImplementedError


class FolderReader(Reader):
    """A graph folder (:mod:`pyg_dist.datasets.ondisk`), read in chunks."""

    def __init__(self, folder: Any) -> None:
        self.graph = GraphFolder.open(folder)
        self.num_nodes, self.num_edges = self.graph.num_nodes, self.graph.num_edges
        self.node_attrs = list(self.graph.node_attrs)
        if "x" not in self.node_attrs:
            raise ValueError(f"'{folder}' has no node features 'x'; convert a graph with x")
        self.num_features = int(self.graph.node("x", 0, 1).shape[1])
        self.weighted = False
        self.meta = whole_meta(self.num_nodes, self.num_edges, self.graph.num_classes,
                           self.node_attrs, f"{Path(folder).resolve()}")

    def edges(self, share: int, shares: int) -> Iterator[tuple[Tensor, Tensor | None]]:
        lo, hi = bounds(self.num_edges, shares, share)
        for start in range(lo, hi, EDGE_CHUNK):
            yield torch.from_numpy(self.graph.edges(start, min(hi, start + EDGE_CHUNK))), None

    def nodes(self, name: str, ids: Tensor, columns: tuple[int, int] | None = None) -> Tensor:
        first = self.graph.node(name, 0, 1)
        width = first.shape[1] if first.ndim > 1 else 0
        rows = max(1, EDGE_CHUNK // max(width, 1))
        order = torch.argsort(ids)
        wanted = ids[order]
        shape = (ids.numel(),) if first.ndim == 1 else (
            ids.numel(), width if columns is None else columns[1] - columns[0])
        out = torch.empty(shape, dtype=torch.from_numpy(first[:0]).dtype)
        for start in range(0, self.num_nodes, rows):  # each row written once, where it goes
            lo = int(torch.searchsorted(wanted, start))
            hi = int(torch.searchsorted(wanted, start + rows))
            if lo == hi:
                continue
            chunk = self.graph.node(name, start, min(self.num_nodes, start + rows))
            if columns is not None:
                chunk = chunk[:, columns[0] : columns[1]]
            out[order[lo:hi]] = torch.from_numpy(np.ascontiguousarray(
                chunk[(wanted[lo:hi] - start).numpy()]))
        return out


class PartsReader(Reader):
    """A partition folder (:func:`pyg_dist.partition`), read a part at a
    time (each part file memory-mapped) and a chunk of its edges at a time;
    node features a column block of a part's rows at a time."""

    def __init__(self, folder: Any) -> None:
        self.folder, self.meta = folder, read_meta(folder)
        if self.meta.types is not None:
            raise ValueError(f"'{folder}' holds a heterogeneous graph; {NAME} trains "
                             f"homogeneous ones")
        self.num_nodes, self.num_edges = self.meta.num_nodes, self.meta.num_edges
        first = self._part(0)
        self.node_attrs = list(first["node"])
        if "x" not in self.node_attrs:
            raise ValueError(f"'{folder}' has no node features 'x'; partition a graph with x")
        self.num_features = int(first["node"]["x"].size(1))
        self.weighted = "edge_weight" in first["edge"]

    def _part(self, p: int) -> dict[str, Any]:
        return read_part(self.folder, p, self.meta)  # type: ignore[no-any-return]

    def edges(self, share: int, shares: int) -> Iterator[tuple[Tensor, Tensor | None]]:
        for p in range(share, self.meta.num_parts, shares):
            content = self._part(p)
            g = content["graph"]
            ids = torch.cat([g["global_id"], g["halo_global_id"]])
            weight = content["edge"].get("edge_weight") if self.weighted else None
            for start in range(0, int(g["col"].numel()), EDGE_CHUNK):
                stop = min(int(g["col"].numel()), start + EDGE_CHUNK)
                row = torch.searchsorted(g["rowptr"], torch.arange(start, stop), right=True) - 1
                edges = torch.stack([ids[g["col"][start:stop]], g["global_id"][row]])
                yield edges, None if weight is None else weight[start:stop]

    def nodes(self, name: str, ids: Tensor, columns: tuple[int, int] | None = None) -> Tensor:
        where = torch.full((self.num_nodes,), -1, dtype=torch.long)
        where[ids] = torch.arange(ids.numel())
        out: Tensor | None = None
        for p in range(self.meta.num_parts):
            owned = self._part(p)["graph"]["global_id"]
            at = where[owned]
            hit = at >= 0
            if not bool(hit.any()):
                continue
            if columns is not None:
                rows = read_part_columns(self.folder, p, name, *columns)
            else:
                rows = self._part(p)["node"][name]
            if out is None:  # each row written once, where it goes
                out = rows.new_empty((ids.numel(), *rows.shape[1:]))
            out[at[hit]] = rows[hit]
            del rows
        assert out is not None, "every id is owned by a part"
        return out


class DataReader(Reader):
    """A graph in memory (a :class:`torch_geometric.data.Data`), read in
    the same chunks (tests and notebooks; every rank holds the graph)."""

    def __init__(self, data: Any) -> None:
        self.data = data
        self.num_nodes = int(data.num_nodes)
        self.num_edges = int(data.edge_index.size(1))
        self.num_features = int(data.x.size(1))
        self.weighted = getattr(data, "edge_weight", None) is not None
        self.node_attrs = [k for k in ("x", "y", *MASKS) if getattr(data, k, None) is not None]
        classes = int(data.y.max()) + 1 if "y" in self.node_attrs else None
        self.meta = whole_meta(self.num_nodes, self.num_edges, classes, self.node_attrs, "memory")

    def edges(self, share: int, shares: int) -> Iterator[tuple[Tensor, Tensor | None]]:
        weight = self.data.edge_weight if self.weighted else None
        lo, hi = bounds(self.num_edges, shares, share)
        for start in range(lo, hi, EDGE_CHUNK):
            stop = min(hi, start + EDGE_CHUNK)
            yield (self.data.edge_index[:, start:stop],
                   None if weight is None else weight[start:stop])

    def nodes(self, name: str, ids: Tensor, columns: tuple[int, int] | None = None) -> Tensor:
        value = getattr(self.data, name)[ids]
        return value if columns is None else value[:, columns[0] : columns[1]].contiguous()


def whole_meta(num_nodes: int, num_edges: int, num_classes: int | None, node_attrs: list[str],
           where: str) -> PartitionMeta:
    """The metadata of a graph read whole (one part, no cut)."""
    identity = hashlib.sha256(f"{where}|{num_nodes}|{num_edges}".encode()).hexdigest()
    return PartitionMeta(1, num_nodes, num_edges, 0, [num_nodes], [0], [], "none", 0, "",
                         num_classes, partition_id=identity, node_attrs=list(node_attrs))
