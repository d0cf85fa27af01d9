"""A rank's share of a graph trained feature parallel: part :math:`d`'s
structure and columns :math:`t` of its rows, read from a partition folder
(merging parts where the grid has fewer) or a graph folder, in chunks."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from pyg_dist.data.dist_data import DistEdgeIndex
from pyg_dist.datasets.folder_files import GRAPH_FILE
from pyg_dist.datasets.ondisk import GraphFolder
from pyg_dist.halo import HaloPolicy
from pyg_dist.halo.exchange import HaloChannel
from pyg_dist.halo.layer import HaloRegistry
from pyg_dist.halo.ledger import Ledger
from pyg_dist.halo.plan import HaloPlan
from pyg_dist.partitioning.io import PartitionMeta, read_meta, read_part, read_part_columns
from pyg_dist.partitioning.plan import PartPlan
from pyg_dist.runtime import distributed
from pyg_dist.strategies.feature_parallel.grid import NAME, FeatureGrid, feature_grid
from pyg_dist.strategies.options import as_policy

#: Rows of whole features a graph-folder load reads at a time (bytes).
READ_BYTES = 1 << 24



class FeatureParallelData:
    """One rank's share of a graph trained feature parallel (:func:`load_grid`).

    Args:
        edge_index (DistEdgeIndex): Its part's in-edges and halo plan, whose
            exchanges run among the ranks of its slice.
        x (torch.Tensor): ``[part rows, columns of its slice]``: its columns
            of its part's rows, in the order of ``edge_index.global_id``.
        node_attrs (dict[str, torch.Tensor]): The other node attributes
            (``y``, masks) of its row block.
        edge_attrs (dict[str, torch.Tensor]): Edge attributes of its part, in
            the order of ``edge_index.col``.
        meta (PartitionMeta): The folder's metadata.
        grid (FeatureGrid): Its place in the grid.
        num_features (int): The features' whole width.
        folder (str or os.PathLike, optional): Where it was loaded from.
            (default: :obj:`None`)

    Attributes:
        rows (tuple[int, int]): Its row block ``[lo, hi)`` of the part's rows.
        columns (tuple[int, int]): Its columns ``[lo, hi)`` of the features.
    """

    def __init__(self, edge_index: DistEdgeIndex, x: Tensor, node_attrs: dict[str, Tensor],
                 edge_attrs: dict[str, Tensor], meta: PartitionMeta, grid: FeatureGrid,
                 num_features: int, folder: Any = None) -> None:
        self.edge_index, self.x, self.meta, self.grid = edge_index, x, meta, grid
        self.num_features, self.folder = num_features, folder
        self.rank, self.world_size = distributed.rank(), grid.parts * grid.slices
        self.rows = grid.bounds(edge_index.num_owned)
        self.columns = grid.bounds(num_features)
        self._node_keys, self._edge_keys = sorted(node_attrs), sorted(edge_attrs)
        for key, value in {**node_attrs, **edge_attrs}.items():
            setattr(self, key, value)

    @property
    def global_id(self) -> Tensor:
        """``[part rows]`` global id of each row of the part (of ``x``)."""
        return self.edge_index.global_id

    @property
    def row_global_id(self) -> Tensor:
        """``[row block]`` global id of each row of the row block (of ``y``)."""
        return self.global_id[self.rows[0] : self.rows[1]]

    @property
    def ledger(self) -> Ledger:
        return self.edge_index.ledger

    def keys(self) -> list[str]:
        return ["edge_index", "x", *self._node_keys, *self._edge_keys]

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        raise AttributeError(f"'FeatureParallelData' has no attribute '{key}'; this rank holds "
                             f"{', '.join(self.keys())}")

    def __repr__(self) -> str:
        return (f"FeatureParallelData(part={self.grid.part}/{self.grid.parts}, "
                f"slice={self.grid.slice}/{self.grid.slices}, x={list(self.x.shape)}, "
                f"rows={self.rows}, columns={self.columns}, "
                f"num_halo={self.edge_index.num_halo}, num_edges={self.edge_index.num_edges})")


@dataclass
class _Part:
    """One grid part as read: its graph (the fields of
    :class:`~pyg_dist.partitioning.plan.LocalPart`), its ``x`` columns, the
    row block's node attributes, its edge attributes and the metadata."""

    graph: dict[str, Tensor]
    x: Tensor
    node: dict[str, Tensor]
    edge: dict[str, Tensor]
    meta: PartitionMeta
    num_features: int


def load_grid(folder: Any, slices: int, halo: HaloPolicy | str | None = None,
              pre_aggregate: bool = False) -> FeatureParallelData:
    """This rank's share of ``folder`` on the grid of world size / ``slices``
    parts × ``slices`` slices. Collective.

    ``folder`` is a partition folder (:func:`pyg_dist.partition`) whose part
    count the grid's parts divide: part :math:`d` of the grid is the folder's
    parts :math:`dk .. dk + k - 1` (:math:`k` = folder parts / grid parts),
    so one folder serves every grid whose parts divide its own. A rank reads
    only its columns of those parts' rows, a block of rows at a time
    (``pyg_dist.partitioning.io.read_part_columns``). With one grid part
    it may also be a graph folder (``pyg_dist.datasets.ondisk``): every
    rank reads the whole structure and its columns, with no partitioning.

    Args:
        folder (str or os.PathLike): The partition or graph folder.
        slices (int): :math:`T`, feature slices.
        halo (HaloPolicy or str, optional): The graph's default halo policy.
            (default: :obj:`None`, exact)
        pre_aggregate (bool, optional): The graph's pre-aggregation setting.
            (default: :obj:`False`)
    """
    grid = feature_grid(slices)
    part: _Part | None = None
    error: Exception | None = None
    try:
        if (Path(folder) / GRAPH_FILE).is_file():
            part = _read_graph_folder(folder, grid)
        else:
            part = _read_parts(folder, grid)
    except (OSError, ValueError) as exc:
        error = exc
    distributed.raise_together(error, f"'FeatureParallel.load' of '{folder}'")
    assert part is not None, "every rank read its part"
    others = distributed.differing_ranks(int(part.meta.partition_id[:15], 16))
    if others:
        raise ValueError(f"ranks {others} loaded a different partitioning than rank "
                         f"{distributed.rank()}; point every rank at the same folder")
    g = part.graph
    plan = HaloPlan.from_pointers(grid.part, g["send_idx"], g["send_ptr"], g["halo_ptr"],
                                  g["halo_global_id"], g["global_id"])
    channel = HaloChannel(plan, Ledger(), grid.slice_group)
    graph = DistEdgeIndex(g["rowptr"], g["col"], g["edge_id"], g["halo_in_degree"],
                          g["halo_self_loops"], channel, g["global_id"],
                          HaloRegistry(as_policy(halo)), pre_aggregate=pre_aggregate)
    return FeatureParallelData(graph, part.x, part.node, part.edge, part.meta, grid,
                               part.num_features, folder)


def _read_parts(folder: Any, grid: FeatureGrid) -> _Part:
    """Grid part ``grid.part``: the folder's parts merged, this rank's columns."""
    meta = read_meta(folder)
    if meta.types is not None:
        raise ValueError(f"'{folder}' holds a heterogeneous graph; {NAME} "
                         f"trains homogeneous ones")
    if meta.num_parts % grid.parts:
        raise ValueError(f"'{folder}' holds {meta.num_parts} parts, which the grid's "
                         f"{grid.parts} parts (ranks / slices) do not divide; partition with "
                         f"num_parts={grid.parts} (or a multiple), or choose slices so that "
                         f"ranks / slices divides {meta.num_parts}")
    k = meta.num_parts // grid.parts
    parts = list(range(grid.part * k, (grid.part + 1) * k))
    contents = [read_part(folder, p, meta) for p in parts]
    if "x" not in contents[0]["node"]:
        raise ValueError(f"'{folder}' has no node features 'x'; partition a graph with x")
    width = int(contents[0]["node"]["x"].size(1))
    lo, hi = grid.bounds(width)
    x = torch.cat([read_part_columns(folder, p, "x", lo, hi) for p in parts])
    graph = _merge([c["graph"] for c in contents], grid.part, k, meta.num_nodes, grid.parts)
    rows = grid.bounds(graph["global_id"].numel())
    node = {key: torch.cat([c["node"][key] for c in contents])[rows[0] : rows[1]].clone()
            for key in contents[0]["node"] if key != "x"}
    edge = {key: torch.cat([c["edge"][key] for c in contents]) for key in contents[0]["edge"]}
    return _Part(graph, x, node, edge, meta, width)


def _merge(graphs: list[dict[str, Tensor]], d: int, k: int, num_nodes: int,
           parts: int) -> dict[str, Tensor]:
    """The graph of grid part ``d``, the union of the ``k`` folder parts of
    ``graphs`` (rows: theirs, in order): columns of a sibling part's node
    become owned rows, the halo is the other grid parts' nodes sorted by
    (grid part, global id), and what ``d`` sends each grid part is that
    part's halo block from ``d`` in the same order."""
    owned = torch.cat([g["global_id"] for g in graphs])
    sorted_id, order = owned.sort()

    def row_of(ids: Tensor) -> Tensor:
        return order[torch.searchsorted(sorted_id, ids)]

    keys, degree, loops, remote_of = [], [], [], []
    for g in graphs:
        counts = g["halo_ptr"][1:] - g["halo_ptr"][:-1]
        owner = torch.repeat_interleave(torch.arange(counts.numel()), counts) // k
        remote = owner != d
        remote_of.append(remote)
        keys.append(owner[remote] * num_nodes + g["halo_global_id"][remote])
        degree.append(g["halo_in_degree"][remote])
        loops.append(g["halo_self_loops"][remote])
    halo_key, slot = torch.unique(torch.cat(keys), return_inverse=True)
    halo_in_degree = torch.zeros(halo_key.numel(), dtype=torch.long)
    halo_in_degree[slot] = torch.cat(degree)
    halo_self_loops = torch.zeros(halo_key.numel(), dtype=torch.long)
    halo_self_loops[slot] = torch.cat(loops)
    cols, rowptrs, start, offset, edges = [], [torch.zeros(1, dtype=torch.long)], 0, 0, 0
    for g, remote in zip(graphs, remote_of):
        n = g["global_id"].numel()
        column = torch.empty(n + remote.numel(), dtype=torch.long)
        column[:n] = torch.arange(offset, offset + n)
        halo = column[n:]
        halo[~remote] = row_of(g["halo_global_id"][~remote])
        taken = int(remote.sum())
        halo[remote] = owned.numel() + slot[start : start + taken]
        start, offset = start + taken, offset + n
        cols.append(column[g["col"]])
        rowptrs.append(g["rowptr"][1:] + edges)
        edges += g["col"].numel()
    sends = []
    for g in graphs:
        counts = g["send_ptr"][1:] - g["send_ptr"][:-1]
        peer = torch.repeat_interleave(torch.arange(counts.numel()), counts) // k
        keep = peer != d
        sends.append(peer[keep] * num_nodes + g["global_id"][g["send_idx"][keep]])
    send_key = torch.unique(torch.cat(sends))
    return {
        "global_id": owned, "rowptr": torch.cat(rowptrs), "col": torch.cat(cols),
        "edge_id": torch.cat([g["edge_id"] for g in graphs]),
        "halo_global_id": halo_key % num_nodes, "halo_ptr": _pointers(halo_key // num_nodes,
                                                                      parts),
        "halo_in_degree": halo_in_degree, "halo_self_loops": halo_self_loops,
        "send_idx": row_of(send_key % num_nodes),
        "send_ptr": _pointers(send_key // num_nodes, parts),
    }


def _pointers(owner: Tensor, parts: int) -> Tensor:
    """``[parts + 1]`` pointers of runs of equal, sorted ``owner`` values."""
    out = torch.zeros(parts + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(owner, minlength=parts), 0, out=out[1:])
    return out


def _read_graph_folder(folder: Any, grid: FeatureGrid) -> _Part:
    """The whole graph of a graph folder as the one grid part: its structure
    and this rank's columns, read a block of rows at a time."""
    if grid.parts != 1:
        raise ValueError(f"'{folder}' is a graph folder, which serves a grid of one part "
                         f"(slices = ranks); got {grid.parts} parts. Partition it for more "
                         f"(pyg-dist partition --distributed --input {folder})")
    graph_folder = GraphFolder.open(folder)
    if "x" not in graph_folder.node_attrs:
        raise ValueError(f"'{folder}' has no node features 'x'; convert a graph with x")
    n = graph_folder.num_nodes
    local = PartPlan.create(torch.from_numpy(graph_folder.edges()),
                            torch.zeros(n, dtype=torch.long), 1).build(0)
    graph = {name: getattr(local, name) for name in local.__dataclass_fields__}
    first = graph_folder.node("x", 0, min(n, 1))
    width = int(first.shape[1])
    lo, hi = grid.bounds(width)
    block = max(1, READ_BYTES // max(width * first.itemsize, 1))
    x = torch.empty(n, hi - lo, dtype=torch.from_numpy(first).dtype)
    for start in range(0, n, block):
        stop = min(start + block, n)
        x[start:stop] = torch.from_numpy(graph_folder.node("x", start, stop)[:, lo:hi])
    rows = grid.bounds(n)
    node = {key: torch.from_numpy(np.ascontiguousarray(graph_folder.node(key, *rows)))
            for key in graph_folder.node_attrs if key != "x"}
    meta = PartitionMeta(1, n, graph_folder.num_edges, 0, [n], [0], [], "none", 0, "",
                         graph_folder.num_classes, partition_id=_folder_id(graph_folder),
                         node_attrs=list(graph_folder.node_attrs))
    return _Part(graph, x, node, {}, meta, width)


def _folder_id(folder: GraphFolder) -> str:
    """An id of the graph folder that every rank computes alike."""
    import hashlib

    text = f"{folder.path.resolve()}|{folder.num_nodes}|{folder.num_edges}"
    return hashlib.sha256(text.encode()).hexdigest()
