r"""Feature-parallel training (NeutronTP, Plexus): the ranks form a grid of
:math:`D` graph parts × :math:`T` feature slices (:math:`D T` = world size),
and rank :math:`(d, t)` (global rank :math:`d T + t`) holds part :math:`d`'s
structure and columns :math:`t` of its rows.

A node matrix :math:`\mathbf{H}` (:math:`N \times F`) lives in one of two
layouts: **columns** (rank :math:`(d, t)` holds part :math:`d`'s rows,
columns :math:`\lfloor F t / T \rfloor` to :math:`\lfloor F (t+1) / T
\rfloor`) or **rows** (the same rank holds row block :math:`t` of part
:math:`d`'s rows, every column). Aggregations run on columns: with
:math:`D > 1` each slice's halo crosses among the :math:`D` ranks that hold
slice :math:`t` (the graph's halo policies apply per slice); dense transforms
run on rows. An all-to-all among the :math:`T` ranks of a part turns one
layout into the other. Every layer of a linear aggregation runs in the order
that moves fewer bytes, :math:`\hat{\mathbf{A}}(\mathbf{H}\mathbf{W}) =
(\hat{\mathbf{A}}\mathbf{H})\mathbf{W}`: the plan weighs every order of every
layer (:func:`choose_orders`) with all-to-all rows :math:`a = N (T-1)/T` and
halo rows :math:`h` of the :math:`D`-part cut per unit of width.

Elementwise operations (activations, dropout) run on either layout; dropout
masks come from the graph's hash of (global node, global column), so every
grid draws the masks of one process. Norms run on rows, their statistics over
every rank's row block; accuracies run on rows. The loss runs where the last
layer leaves the logits: on rows, or on columns, where two values per row (the
slices' largest log-sum-exp, then the sum of their exponentials) are summed
over the part's ranks instead of moving the logits. Every parameter's
gradient is summed over all :math:`P` ranks (:attr:`FeatureGrid.gradient_group`).
A layer that aggregates the unchanged features (nothing random before it)
moves their aggregate into rows, and exchanges its halo, at the first step
only, and keeps the rows.

Predicted (``FeatureParallel.candidates``, per grid), from the probe's
exact compute :math:`C` scaled by the grid's largest share of edges and rows,
each all-to-all of width :math:`w` :math:`\alpha + B_a(w)/\beta` (:math:`B_a`:
the busiest rank's bytes sent and received), each halo exchange
:math:`\alpha + R\,4\lceil w/T \rceil/\beta` (:math:`R`: the busiest rank's
rows sent and received), twice when gradients flow back, and the gradients'
all-reduce :math:`G`, and for a loss on columns two all-reduces of the
part's rows, :math:`\alpha + 8 (T-1) n / (T \beta)` each. Bytes are the
ledger's own count.
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GINConv, GraphConv, MessagePassing
from torch_geometric.nn.models.basic_gnn import BasicGNN

from pyg_dist.data.dist_data import DistData, DistEdgeIndex
from pyg_dist.datasets.folder_files import GRAPH_FILE
from pyg_dist.datasets.ondisk import GraphFolder
from pyg_dist.grads.sync import LAYER as GRADIENTS_LAYER
from pyg_dist.halo import Exact, HaloPolicy, HaloRows, LayerHalo
from pyg_dist.halo.comm import exchange_rows
from pyg_dist.halo.exchange import HaloChannel
from pyg_dist.halo.layer import HaloRegistry
from pyg_dist.halo.ledger import ALL_TO_ALL, GRADIENTS, Ledger
from pyg_dist.halo.plan import HaloPlan
from pyg_dist.metrics import accuracies, global_loss, mean_over_ranks
from pyg_dist.models.gnn import GNN
from pyg_dist.nn import DistGCNConv, DistLayer, DistMessagePassing, DistSAGEConv
from pyg_dist.nn.gcn_norm import gcn_adjacency
from pyg_dist.nn.norm import NORMS
from pyg_dist.nn.preaggregate import owned_only, pre_aggregated, pre_aggregates, weights_reason
from pyg_dist.ops import spmm
from pyg_dist.ops.csr import csr_row
from pyg_dist.partitioning.io import PartitionMeta, read_meta, read_part, read_part_columns
from pyg_dist.partitioning.plan import PartPlan
from pyg_dist.runtime import distributed
from pyg_dist.strategies.base import Runner, Step, Strategy
from pyg_dist.strategies.cost import Candidate, Probe, grad_seconds
from pyg_dist.strategies.options import as_policy, check_int, check_policy, option
from pyg_dist.strategies.settings import GradSync, Settings
from pyg_dist.strategies.task import Task
from pyg_dist.utils.dropout import DroppedInput, next_call

__all__ = ["FeatureParallel", "FeatureGrid", "FeatureParallelData", "FeatureParallelModel",
           "feature_grid", "load_grid", "compile_model", "choose_orders", "simulate", "needs",
           "orders_of", "measure", "predict", "loss_on_columns", "bounds", "Op", "Event", "RUNS",
           "MODELS", "GNN_REFUSED", "COLUMNS", "ROWS", "AGGREGATE_FIRST", "TRANSFORM_FIRST"]

#: The layers feature-parallel training runs (errors name them).
RUNS = ("GCNConv (DistGCNConv, aggr 'add', with or without edge weights), SAGEConv "
        "(DistSAGEConv, aggr 'mean' or 'sum'), and on the generic path GINConv and GraphConv "
        "(aggr 'add', 'sum' or 'mean'): the layers whose messages are linear in x_j")
#: The CLI's models it trains (:class:`~pyg_dist.models.GNN` kinds).
MODELS = ("gcn", "sage", "gin")
#: :class:`~pyg_dist.models.GNN`'s options it refuses, with their CLI flags.
GNN_REFUSED = (("residual", "--residual"), ("edge_dropout", "--edge-dropout"),
               ("norm", "--norm"), ("skip", "--skip"), ("jk", "--jk"))
#: The layouts of a node matrix: part rows × a column slice, or a row block × every column.
COLUMNS, ROWS = "columns", "rows"
#: The orders of a layer: aggregate the input on columns, then transform on
#: rows; or transform on rows, then aggregate the narrower output on columns.
AGGREGATE_FIRST, TRANSFORM_FIRST = "aggregate", "transform"
#: Generic-path layers whose message is ``x_j`` times an optional per-edge
#: weight (the name of that ``forward`` argument, :obj:`None`: none).
LINEAR_MESSAGES: dict[type, str | None] = {GINConv: None, GraphConv: "edge_weight"}
#: Rows of whole features a graph-folder load reads at a time (bytes).
READ_BYTES = 1 << 24
#: Layers above which :func:`choose_orders` stops weighing every combination
#: of orders and picks layer by layer.
MAX_EXHAUSTIVE = 12


# -- the option object ----------------------------------------------------------------------

@dataclass(frozen=True)
class FeatureParallel(Strategy):
    r"""Feature-parallel training on a grid of world size / ``slices`` graph
    parts × ``slices`` feature slices (see :mod:`~pyg_dist.strategies.feature_parallel`):
    aggregations run on column slices (their halo, with several parts, among
    the ranks of one slice, under the graph's halo policies), dense transforms
    on row blocks, an all-to-all among a part's ranks between the two. Every
    step equals single-process training on the whole graph under exact halos,
    and every rank does the same work whatever the cut. Trains
    :class:`~pyg_dist.models.GNN` (``gcn``, ``sage``, ``gin``), PyG's ``GCN``,
    ``GraphSAGE`` and ``GIN`` converted with :func:`~pyg_dist.nn.to_distributed`,
    or one layer of ``RUNS``; the data comes from :meth:`load` (or, given a
    :class:`~pyg_dist.DistData`, from its folder, whose part count the grid's
    parts divide).

    Args:
        slices (int, optional): :math:`T`, feature slices (ranks per graph
            part). (default: :obj:`2`)
        halo (HaloPolicy or str, optional): The policy of every layer that
            sets none, per slice (as :class:`~pyg_dist.config.GraphParallel`'s);
            :obj:`None` keeps the graph's default. (default: :obj:`None`)
        pre_aggregate (bool, optional): Whether the layers' slices exchange
            partial sums on a minimum vertex cover; :obj:`None` keeps the
            graph's setting. (default: :obj:`None`)
    """

    name: ClassVar[str] = "feature-parallel"
    summary: ClassVar[str] = "D parts x T feature slices"
    hetero_refusal: ClassVar[str] = ("feature-parallel training slices the features of a "
                                     "homogeneous graph")
    slices: int = option(2, "feature slices (grid: ranks/T parts x T)", metavar="T")
    halo: HaloPolicy | str | None = option(
        None, "a policy spec, per slice", type=str, metavar="POLICY")
    pre_aggregate: bool | None = option(None, "send partial sums on a vertex cover (exact)",
                                        type=bool)

    def check(self) -> None:
        check_int(type(self), "slices", self.slices, 1, "it counts the ranks of a graph part")
        check_policy(type(self), "halo", self.halo)
        if self.pre_aggregate not in (None, True, False):
            raise ValueError(f"FeatureParallel(pre_aggregate={self.pre_aggregate!r}): use "
                             f"True (on), False (off) or None (the graph's setting)")

    def ranks_per_part(self) -> int:
        return self.slices

    def graph_parts(self, world_size: int) -> int:
        if world_size % self.slices:
            divisors = [t for t in range(1, world_size + 1) if world_size % t == 0]
            raise ValueError(f"--slices {self.slices} does not divide the {world_size} ranks; "
                             f"the grid is ranks / slices graph parts x slices, so use "
                             f"--slices {'|'.join(map(str, divisors))}")
        return world_size // self.slices

    def load(self, folder: Any) -> FeatureParallelData:
        return load_grid(folder, self.slices)

    def check_model(self, kind: str, layers: int | None = None,
                    options: dict[str, Any] | None = None) -> None:
        if kind not in MODELS:
            raise ValueError(f"--strategy feature-parallel trains --model {'|'.join(MODELS)} "
                             f"(it runs {RUNS}); got --model {kind}")
        given = [flag for key, flag in GNN_REFUSED
                 if (options or {}).get(key) not in (None, False, 0, 0.0)]
        if given:
            raise ValueError(f"--strategy feature-parallel trains GNN without "
                             f"{', '.join(given)}; leave {'them' if len(given) > 1 else 'it'} "
                             f"out")

    def check_settings(self, settings: Settings) -> None:
        super().check_settings(settings)
        if settings.grad_sync.compress not in (None, "none"):
            raise ValueError(f"'train' with strategy={self} sums plain gradients over the "
                             f"grid (got grad_sync={settings.grad_sync}); leave grad_sync out "
                             f"(CLI: drop --grad-compress)")

    def runner(self, model: nn.Module, task: Task, settings: Settings) -> Runner:
        return _FeatureParallelRun(self, model, task, settings)

    @classmethod
    def measure(cls, model: nn.Module, data: Any) -> Any:
        return measure(model, data)

    @classmethod
    def candidates(cls, probe: Probe, epochs: int) -> list[Candidate]:
        measured = probe.measured.get(cls.name)
        if not measured or "program" not in measured:
            return []
        out = []
        for key, sizes in measured["grids"].items():
            slices = int(key)
            seconds, nbytes = predict(measured["program"], sizes, slices, probe, epochs)
            parts = probe.world_size // slices
            out.append(Candidate(f"feature-parallel {parts}x{slices}", cls(slices=slices),
                                 GradSync(), "exact", seconds, int(nbytes), epochs))
        return out


# -- the grid -------------------------------------------------------------------------------

@dataclass(frozen=True)
class FeatureGrid:
    """This rank's place in the grid of graph parts × feature slices.

    Attributes:
        parts: :math:`D`, graph parts.
        slices: :math:`T`, feature slices.
        part: The part this rank holds (global rank // slices).
        slice: The slice of columns it holds (global rank % slices).
        part_group: The :math:`T` ranks of its part (all-to-alls).
        slice_group: The :math:`D` ranks of its slice (halo exchanges; rank
            :math:`d` of the group holds part :math:`d`).
    """

    parts: int
    slices: int
    part: int
    slice: int
    part_group: Any = None
    slice_group: Any = None

    @property
    def gradient_group(self) -> Any:
        """The group every parameter's gradient is summed over: all ranks.
        A parameter used on row blocks gets one partial sum per row block,
        and the :math:`P` row blocks are disjoint and cover every node; one
        used on a column slice (a bias added there, GIN's :math:`\\epsilon`)
        gets partial sums from the :math:`D` ranks of each slice, zero on the
        other slices' entries. The part's ranks alone would miss the other
        parts' rows, the slice's ranks alone the other row blocks."""
        return None

    def bounds(self, size: int, index: int | None = None) -> tuple[int, int]:
        """Rows or columns ``[lo, hi)`` of slice ``index`` (default: this
        rank's) when ``size`` of them are cut into :math:`T` near-equal runs."""
        return bounds(size, self.slices, self.slice if index is None else index)


def bounds(size: int, pieces: int, index: int) -> tuple[int, int]:
    """``[lo, hi)`` of run ``index`` of ``size`` items cut into ``pieces``
    near-equal runs (the first ones shorter when they do not divide).

    Args:
        size (int): The items (rows or columns).
        pieces (int): The runs.
        index (int): The run.
    """
    return size * index // pieces, size * (index + 1) // pieces


#: Grids by (slices, the default group they were made in).
_GRIDS: dict[tuple[int, int], FeatureGrid] = {}


def feature_grid(slices: int) -> FeatureGrid:
    """This rank's :class:`FeatureGrid` of world size / ``slices`` parts ×
    ``slices`` slices. Collective the first time per ``slices`` (it creates
    the part and slice groups); the same object afterwards.

    Args:
        slices (int): :math:`T`, which must divide the world size.
    """
    key = (slices, distributed.group_id())
    if key in _GRIDS:
        return _GRIDS[key]
    world, rank = distributed.world_size(), distributed.rank()
    parts = FeatureParallel(slices=slices).graph_parts(world)
    part_group = slice_group = None
    if world > 1:
        part_groups = [distributed.new_group(range(d * slices, (d + 1) * slices))
                       for d in range(parts)]
        slice_groups = [distributed.new_group(range(t, world, slices)) for t in range(slices)]
        part_group, slice_group = part_groups[rank // slices], slice_groups[rank % slices]
    _GRIDS[key] = FeatureGrid(parts, slices, rank // slices, rank % slices, part_group,
                              slice_group)
    return _GRIDS[key]


# -- a rank's data --------------------------------------------------------------------------

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
        raise ValueError(f"'{folder}' holds a heterogeneous graph; {FeatureParallel.name} "
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


# -- the model as a program of layout-aware steps --------------------------------------------

@dataclass
class Op:
    """One step of a model run on the grid.

    Attributes:
        kind: ``"dropout"``, ``"act"``, ``"norm"`` or ``"conv"``.
        module: The layer, the norm, or the activation (a callable).
        p: Dropout's probability.
        layer: A conv's kind: ``"gcn"``, ``"sage"`` or ``"linear"`` (the
            generic path).
        widths: A conv's input and output widths.
        weighted: Whether a conv takes the graph's edge weights.
    """

    kind: str
    module: Any = None
    p: float = 0.0
    layer: str = ""
    widths: tuple[int, int] = (0, 0)
    weighted: bool = False

    def spec(self) -> list[Any]:
        """The step as plain values (what the planner's arithmetic reads)."""
        if self.kind != "conv":
            return [self.kind]
        conv = self.module
        return ["conv", self.layer, *self.widths, bool(getattr(conv, "root_weight", False)),
                bool(getattr(conv, "project", False))]


def compile_model(model: nn.Module, num_features: int) -> list[Op]:
    """``model`` as :class:`Op` steps: a :class:`~pyg_dist.models.GNN`
    (``gcn``, ``sage``, ``gin``), PyG's ``GCN``, ``GraphSAGE`` or ``GIN``
    converted with :func:`~pyg_dist.nn.to_distributed`, or one layer of
    ``RUNS``; raises :class:`ValueError`, naming what runs, otherwise.

    Args:
        model (torch.nn.Module): The model.
        num_features (int): Its input width.
    """
    plain = [name or type(model).__name__ for name, m in model.named_modules()
             if type(m) in NORMS]
    if plain:
        raise ValueError(f"feature-parallel training normalises over every rank's rows; "
                         f"{', '.join(plain)} normalise(s) one rank's: convert the model "
                         f"with pyg_dist.nn.to_distributed(model)")
    if isinstance(model, GNN):
        ops = _gnn_ops(model)
    elif isinstance(model, BasicGNN):
        ops = _basic_ops(model)
    elif isinstance(model, MessagePassing):
        ops = [Op("conv", model, weighted=True)]
    else:
        raise ValueError(f"feature-parallel training runs pyg_dist.models.GNN, PyG's GCN, "
                         f"GraphSAGE and GIN (converted with to_distributed) or one layer of "
                         f"{RUNS}; got {type(model).__name__}")
    width = num_features
    for op in ops:
        if op.kind == "conv":
            op.layer, op.widths = _conv_kind(op.module, width)
            width = op.widths[1]
    return ops


def _gnn_ops(model: GNN) -> list[Op]:
    if model.kind not in MODELS:
        raise ValueError(f"feature-parallel training runs GNN kinds {', '.join(MODELS)} "
                         f"({RUNS}); got GNN('{model.kind}')")
    extras = [name for name, attribute in (("norm", "norms"), ("skip", "skips"), ("jk", "jk"))
              if hasattr(model, attribute)]
    if model.residual or model.edge_dropout or extras:
        raise ValueError("feature-parallel training runs GNN without residual connections, "
                         "edge dropout, norms, linear skips and a jumping-knowledge head; set "
                         "residual=False, edge_dropout=0, norm=None, skip=False, jk=None")
    ops: list[Op] = []
    for k, conv in enumerate(model.convs):
        p = float(model.input_dropout if k == 0 else model.dropout)
        if p > 0:  # GNN's dropout of p = 0 draws no mask
            ops.append(Op("dropout", p=p))
        ops.append(Op("conv", conv, weighted=model.kind in ("gcn", "sage")))
        if k < len(model.convs) - 1:
            ops.append(Op("act", torch.relu))
    return ops


def _basic_ops(model: BasicGNN) -> list[Op]:
    if model.jk_mode is not None:
        raise ValueError(f"feature-parallel training runs {type(model).__name__} without "
                         f"jumping knowledge; set jk=None")
    ops: list[Op] = []
    p = float(model.dropout.p)
    for i, (conv, norm) in enumerate(zip(model.convs, model.norms)):
        ops.append(Op("conv", conv, weighted=bool(model.supports_edge_weight)))
        if i == model.num_layers - 1:
            break
        if model.act is not None and model.act_first:
            ops.append(Op("act", model.act))
        if not isinstance(norm, nn.Identity):
            ops.append(Op("norm", norm))
        if model.act is not None and not model.act_first:
            ops.append(Op("act", model.act))
        if p > 0:
            ops.append(Op("dropout", p=p))
    return ops


def _conv_kind(conv: Any, width: int) -> tuple[str, tuple[int, int]]:
    """The kind of ``conv`` and its widths on input width ``width``; raises,
    naming what runs, for a layer this strategy cannot run."""
    name = type(conv).__name__
    if getattr(conv, "flow", "source_to_target") != "source_to_target":
        raise ValueError(f"'{name}' runs feature parallel with flow='source_to_target' only; "
                         f"reverse the edges before partitioning instead")
    if isinstance(conv, DistGCNConv):
        if conv.aggr not in ("add", "sum"):
            raise ValueError(f"'{name}' with aggr={conv.aggr!r} does not run feature parallel; "
                             f"it runs {RUNS}")
        _check_width(conv, conv.in_channels, width)
        return "gcn", (width, int(conv.out_channels))
    if isinstance(conv, DistSAGEConv):
        if not (isinstance(conv.aggr, str) and conv.aggr in ("mean", "sum", "add")):
            raise ValueError(f"'{name}' with aggr={conv.aggr!r} does not run feature parallel "
                             f"(its aggregation is not linear in x_j); it runs {RUNS}")
        _check_width(conv, conv.in_channels, width)
        return "sage", (width, int(conv.out_channels))
    if isinstance(conv, DistMessagePassing) and conv.pyg_class in LINEAR_MESSAGES:
        if not (isinstance(conv.aggr, str) and conv.aggr in ("add", "sum", "mean")):
            raise ValueError(f"'{name}' with aggr={conv.aggr!r} does not run feature parallel; "
                             f"it runs {RUNS}")
        return "linear", (width, _out_width(conv))
    if isinstance(conv, MessagePassing) and not isinstance(conv, DistLayer):
        raise ValueError(f"'{name}' is a PyG layer; convert the model with "
                         f"pyg_dist.nn.to_distributed(model) first")
    raise ValueError(f"'{name}' does not run feature parallel; it runs {RUNS}")


def _check_width(conv: Any, declared: Any, width: int) -> None:
    if declared != width:
        raise ValueError(f"'{type(conv).__name__}' takes {declared} input features but gets "
                         f"{width}; build the model for the data's width")


def _out_width(conv: Any) -> int:
    """Output width of a generic layer (GraphConv's ``out_channels``, the last
    linear layer of GINConv's ``nn``)."""
    if isinstance(getattr(conv, "out_channels", None), int):
        return int(conv.out_channels)
    inner = conv.nn
    if isinstance(getattr(inner, "out_channels", None), int):
        return int(inner.out_channels)
    for module in reversed(list(inner.modules())):
        for attribute in ("out_features", "out_channels"):
            if isinstance(getattr(module, attribute, None), int):
                return int(getattr(module, attribute))
    raise ValueError(f"cannot tell the output width of '{type(conv).__name__}'s nn; give it "
                     f"a linear output layer")


# -- the plan: which order each layer runs in -------------------------------------------------

@dataclass(frozen=True)
class Event:
    """One communication of a training step (:func:`simulate`).

    Attributes:
        kind: ``"a2a"`` (an all-to-all among a part's ranks), ``"halo"``
            (a halo exchange among a slice's ranks), or, for logits left on
            the columns, ``"labels"`` (the part's labels gathered by its
            ranks, once) and ``"loss"`` (the loss's row statistics summed
            over a part's ranks).
        width: The whole width of the rows moved (each rank moves its share;
            for ``"loss"`` the statistics per row).
        grad: Whether gradients flow back the same way.
        once: Made at the first ``steps`` steps of a run only, then kept: a
            static input's rows, the aggregate of a static input (its halo
            and its all-to-all, one step), or the halo of a static input
            dropped out before a layer (two steps: exchanged, then fetched
            once and kept, the mask applied to it).
        steps: The steps a ``once`` event runs at.
    """

    kind: str
    width: int
    grad: bool
    once: bool = False
    steps: int = 1


def loss_on_columns(classes: int, slices: int) -> bool:
    r"""Whether the loss of logits left on the columns is taken there
    (:meth:`FeatureParallelModel.loss`): where the classes outnumber twice
    the slices, :math:`C > 2T`, so that two values per row in ring
    all-reduces (:math:`4 N (T-1)` values sent, all ranks) move less than
    the logits' all-to-all to rows and its gradient back (:math:`2 C N
    (T-1)/T`).

    Args:
        classes (int): :math:`C`, the logits' width.
        slices (int): :math:`T`.
    """
    return slices > 1 and classes > 2 * slices


def needs(spec: list[Any], order: str) -> set[str]:
    """The layouts step ``spec`` reads its input in, under ``order``:
    aggregating reads columns (and rows where the layer adds its root's
    transform), transforming first reads rows, norms and the logits rows.

    Args:
        spec (list): The step (:meth:`Op.spec`, or ``["end"]`` for the logits).
        order (str): :data:`AGGREGATE_FIRST` or :data:`TRANSFORM_FIRST`.
    """
    kind = spec[0]
    if kind == "norm" or kind == "end":
        return {ROWS}
    _, layer, _, _, root, project = spec
    if layer == "linear":
        return {COLUMNS, ROWS}
    if order == TRANSFORM_FIRST or project:
        return {ROWS}
    return {COLUMNS, ROWS} if layer == "sage" and root else {COLUMNS}


def orders_of(spec: list[Any]) -> tuple[str, ...]:
    """The orders a conv step can run in: both for GCN and for SAGE without
    a projection (linear aggregations commute with the transform), else
    aggregating first.

    Args:
        spec (list): The conv step (:meth:`Op.spec`).
    """
    _, layer, _, _, _, project = spec
    if layer == "gcn" or (layer == "sage" and not project):
        return AGGREGATE_FIRST, TRANSFORM_FIRST
    return (AGGREGATE_FIRST,)


def simulate(program: list[list[Any]], orders: list[str], slices: int = 1) -> list[Event]:
    """The communications of one training step as
    :class:`FeatureParallelModel` runs it.

    Args:
        program (list): The :meth:`Op.spec` of each step.
        orders (list[str]): The order of each conv step.
        slices (int, optional): :math:`T`. (default: :obj:`1`)
    """
    steps = [*program, ["end"]]
    order_at, convs = {}, iter(orders)
    for i, spec in enumerate(steps):
        if spec[0] == "conv":
            order_at[i] = next(convs)
    events: list[Event] = []
    width = next((int(spec[2]) for spec in steps if spec[0] == "conv"), 0)
    layouts, grad, static, dropped = {COLUMNS}, False, True, False
    for i, spec in enumerate(steps):
        consumer = next(j for j in range(i, len(steps)) if steps[j][0] not in ("dropout", "act"))
        wanted = needs(steps[consumer], order_at.get(consumer, AGGREGATE_FIRST))
        if (spec[0] == "end" and layouts == {COLUMNS} and not static
                and loss_on_columns(width, slices)):
            # the loss on the columns (_ColumnLoss): the labels once, two statistics per row
            events += [Event("labels", 1, False, once=True), Event("loss", 2, False)]
            break
        for _ in sorted(wanted - layouts):
            events.append(Event("a2a", width, grad and not static, once=static))
        layouts = set(wanted)
        kind = spec[0]
        if kind in ("dropout", "act"):
            dropped, static = static and kind == "dropout", False
        elif kind == "norm":
            grad = True
        elif kind == "conv":
            events += _conv_events(spec, order_at[i], grad, static, dropped)
            _, layer, _, width, _, _ = spec
            layouts = {COLUMNS} if layer == "gcn" and order_at[i] == TRANSFORM_FIRST else {ROWS}
            grad, static, dropped = True, False, False
    return events


def _conv_events(spec: list[Any], order: str, grad: bool, static: bool,
                 dropped: bool) -> list[Event]:
    """The communications of conv step ``spec`` in ``order``: its input
    ``static`` (the graph's features, unchanged: its aggregate in rows is
    made at the first step and kept) or ``dropped`` (dropped out from them:
    its halo is kept, the aggregate moved every step)."""
    _, layer, f_in, f_out, _, project = spec
    if order == TRANSFORM_FIRST:
        out = [Event("a2a", f_out, True), Event("halo", f_out, True)]
        return out + ([Event("a2a", f_out, True)] if layer == "sage" else [])
    if project:
        return [Event("a2a", f_in, True), Event("halo", f_in, True), Event("a2a", f_in, True)]
    if static:
        return [Event("halo", f_in, False, once=True), Event("a2a", f_in, False, once=True)]
    return [Event("halo", f_in, grad, once=dropped, steps=2), Event("a2a", f_in, grad)]


def choose_orders(program: list[list[Any]], a2a_rows: float, halo_rows: float,
                  slices: int = 1) -> list[str]:
    """Each conv's order, the combination whose step moves the fewest rows
    × width: ``a2a_rows`` per all-to-all, ``halo_rows`` per halo exchange
    and :math:`2 T` ``a2a_rows`` per statistic of a loss on the columns
    (the values ring all-reduces of one value per row send, :math:`2 N
    (T-1)`; all ranks, per unit of width; twice where gradients flow back;
    nothing for what a static input or the labels move once). Ties go to
    aggregating first.

    Args:
        program (list): The :meth:`Op.spec` of each step.
        a2a_rows (float): Rows an all-to-all moves per unit of width, :math:`N (T-1)/T`.
        halo_rows (float): Halo rows of the grid's cut, :math:`\\sum_d h_d`.
        slices (int, optional): :math:`T`. (default: :obj:`1`)
    """
    choices = [orders_of(spec) for spec in program if spec[0] == "conv"]

    def cost(orders: list[str]) -> float:
        total = 0.0
        for e in simulate(program, orders, slices):
            if not e.once:
                rows = {"a2a": a2a_rows, "halo": halo_rows,
                        "loss": 2 * slices * a2a_rows}[e.kind]
                total += rows * e.width * (2 if e.grad else 1)
        return total

    if len(choices) > MAX_EXHAUSTIVE:  # layer by layer: the cheaper order given the ones before
        picked: list[str] = []
        for options in choices:
            rest = [o[0] for o in choices[len(picked) + 1:]]
            picked.append(min(options, key=lambda o: cost([*picked, o, *rest])))
        return picked
    return list(min(itertools.product(*choices), key=lambda c: cost(list(c))))


# -- moving between layouts -----------------------------------------------------------------

class _Mover:
    """All-to-alls among the ranks of this rank's part, booked in the graph's
    ledger (``<layer>/rows``, ``<layer>/columns``)."""

    #: The message tag of the part group's exchanges (one at a time).
    TAG = 1

    def __init__(self, grid: FeatureGrid, graph: DistEdgeIndex) -> None:
        self.grid, self.graph = grid, graph

    def move(self, x: Tensor, to_rows: bool, width: int, name: str, direction: str) -> Tensor:
        """``x`` (``[part rows, slice columns]`` to rows, ``[row block,
        width]`` to columns) in the other layout."""
        grid = self.grid
        slices, mine = grid.slices, grid.slice
        if slices == 1:
            return x
        n = self.graph.num_owned
        rows = [bounds(n, slices, s) for s in range(slices)]
        cols = [bounds(width, slices, s) for s in range(slices)]
        if to_rows:
            pieces = [x[lo:hi] for lo, hi in rows]
            shapes = [(rows[mine][1] - rows[mine][0], hi - lo) for lo, hi in cols]
        else:
            pieces = [x[:, lo:hi] for lo, hi in cols]
            shapes = [(hi - lo, cols[mine][1] - cols[mine][0]) for lo, hi in rows]
        send_counts = [0 if s == mine else p.numel() for s, p in enumerate(pieces)]
        recv_counts = [0 if s == mine else r * c for s, (r, c) in enumerate(shapes)]
        send = torch.cat([p.reshape(-1) for s, p in enumerate(pieces) if s != mine])
        start = time.perf_counter()
        received = exchange_rows(send.view(-1, 1), send_counts, recv_counts, grid.part_group,
                                 tag=self.TAG)
        assert isinstance(received, Tensor), "a synchronous exchange returns a tensor"
        seconds = time.perf_counter() - start
        blocks, offset = [], 0
        for s in range(slices):
            if s == mine:
                blocks.append(pieces[s])
                continue
            blocks.append(received[offset : offset + recv_counts[s]].view(shapes[s]))
            offset += recv_counts[s]
        size = x.element_size()
        self.graph.ledger.record(name, direction, bytes_sent=sum(send_counts) * size,
                                 bytes_recv=sum(recv_counts) * size, exchanges=1,
                                 seconds=seconds)
        return torch.cat(blocks, dim=1 if to_rows else 0)


class _ColumnLoss(torch.autograd.Function):
    r"""The summed cross entropy of logits left on the columns (``z``:
    ``[part rows, slice classes]``), without moving them to rows: each row's
    log-sum-exp :math:`m + \log \sum_t e^{l_t - m}` from two all-reduces of
    one value per row among the part's ranks (the slices' log-sum-exps
    :math:`l_t`: their largest :math:`m`, then the sum; booked as
    ``logits/loss``), the target's logit on the rank that holds its column.
    The forward gives this rank's share of the sum (the part's
    log-sum-exps on slice 0's rank, less the targets' logits it holds); the
    backward the whole sum's gradient of this rank's columns,
    :math:`\mathrm{softmax}(z) - \mathbf{1}_y` on the counted rows, times
    the incoming gradient: every rank steps back from its share with the
    same weight, as ``loss.backward()`` on :meth:`of`'s loss does."""

    @staticmethod
    def forward(ctx: Any, z: Tensor, targets: Tensor, width: int,  # type: ignore[override]
                grid: FeatureGrid, ledger: Ledger, direction: str) -> Tensor:
        lo, hi = grid.bounds(width)
        counted = targets >= 0
        mine = counted & (targets >= lo) & (targets < hi)
        start = time.perf_counter()
        part = torch.logsumexp(z, dim=1)  # every slice has columns (loss_on_columns)
        top = distributed.all_reduce(part.clone(), "max", grid.part_group)
        lse = top + distributed.all_reduce(torch.exp(part - top), "sum", grid.part_group).log()
        sent = 2 * lse.numel() * lse.element_size()
        ledger.record("logits/loss", direction, bytes_sent=sent, bytes_recv=sent, exchanges=2,
                      seconds=time.perf_counter() - start)
        picked = z[mine, targets[mine] - lo]
        share = -picked.sum()
        if grid.slice == 0:
            share = share + lse[counted].sum()
        ctx.save_for_backward(z, lse, targets)
        ctx.bounds = lo, hi
        return share

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        z, lse, targets = ctx.saved_tensors
        lo, hi = ctx.bounds
        out = torch.exp(z - lse.unsqueeze(1))
        out[targets < 0] = 0.0
        mine = (targets >= lo) & (targets < hi)
        rows = mine.nonzero().view(-1)
        out[rows, targets[rows] - lo] -= 1.0
        return out * grad, None, None, None, None, None

    @classmethod
    def of(cls, z: Tensor, targets: Tensor, width: int, grid: FeatureGrid, ledger: Ledger,
           direction: str) -> tuple[Tensor, float]:
        """The loss averaged over the counted rows of every part, as
        :func:`~pyg_dist.train.global_loss` gives it: this rank's
        differentiable share, and the global value. Collective.

        Args:
            z (torch.Tensor): ``[part rows, slice classes]`` the logits' columns.
            targets (torch.Tensor): ``[part rows]`` each row's class, -1 where not counted.
            width (int): The classes.
            grid (FeatureGrid): The grid.
            ledger (Ledger): Where the exchanges are booked.
            direction (str): Their direction.
        """
        share = cls.apply(z, targets, width, grid, ledger, direction)
        count = int((targets >= 0).sum()) if grid.slice == 0 else 0
        return mean_over_ranks(share, count)


class _Redistribute(torch.autograd.Function):
    """A layout change whose backward is the opposite change of the gradient."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, mover: _Mover, to_rows: bool, width: int,  # type: ignore[override]
                name: str, direction: str) -> Tensor:
        ctx.mover, ctx.to_rows, ctx.width, ctx.name = mover, to_rows, width, name
        return mover.move(x, to_rows, width, name, direction)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        back = ctx.mover.move(grad.contiguous(), not ctx.to_rows, ctx.width, ctx.name,
                              ALL_TO_ALL)
        return back, None, None, None, None, None


# -- aggregations on column slices ----------------------------------------------------------

@dataclass(frozen=True)
class _GCNCoefficients:
    """GCN's (normalised) adjacency, as :class:`~pyg_dist.nn.DistGCNConv` aggregates."""

    normalize: bool
    improved: bool
    loops: bool

    def key(self, dtype: torch.dtype, weight: Tensor | None) -> tuple[Any, ...]:
        return ("gcn", self.normalize, self.improved, self.loops, dtype, weight is None)

    def local(self, graph: DistEdgeIndex, weight: Tensor | None, fetched: HaloRows,
              halo: LayerHalo | None, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor | None]:
        return gcn_adjacency(graph, weight, fetched, halo, dtype, self.normalize, self.improved,
                             self.loops)

    def whole(self, graph: DistEdgeIndex, weight: Tensor | None,
              dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        every = HaloRows(torch.empty(0))
        rowptr, col, value = self.local(graph, weight, every, None, dtype)
        return rowptr, col, (torch.ones(col.numel(), dtype=dtype, device=col.device)
                             if value is None else value)


@dataclass(frozen=True)
class _SumCoefficients:
    """A sum or mean of ``x_j`` times an optional edge weight: ``mean`` of
    the messages (the generic path) or, with ``weighted_mean``, the weighted
    mean :math:`\\sum_j w_{ji} x_j / \\sum_j w_{ji}` (DistSAGEConv's)."""

    mean: bool
    weighted_mean: bool

    def key(self, dtype: torch.dtype, weight: Tensor | None) -> tuple[Any, ...]:
        return ("sum", self.mean, self.weighted_mean, weight is None)

    def local(self, graph: DistEdgeIndex, weight: Tensor | None, fetched: HaloRows,
              halo: LayerHalo | None, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor | None]:
        if fetched.mask is not None:
            graph, keep = graph.restrict(fetched.mask)
            weight = None if weight is None else weight[keep]
        if not self.mean:
            return graph.rowptr, graph.col, weight
        row = csr_row(graph.rowptr, graph.col)
        if weight is not None and self.weighted_mean:
            total = weight.new_zeros(graph.num_owned).index_add_(0, row, weight)
            return graph.rowptr, graph.col, weight / total.clamp(
                min=torch.finfo(weight.dtype).tiny)[row]
        count = (graph.rowptr[1:] - graph.rowptr[:-1]).clamp(min=1).to(dtype)
        value = 1.0 / count[row]
        return graph.rowptr, graph.col, value if weight is None else weight * value

    def whole(self, graph: DistEdgeIndex, weight: Tensor | None,
              dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        every = HaloRows(torch.empty(0))
        rowptr, col, value = self.local(graph, None if weight is None else weight.double(),
                                        every, None, torch.float64)
        return rowptr, col, (torch.ones(col.numel(), dtype=torch.float64, device=col.device)
                             if value is None else value)


# -- the model on the grid ------------------------------------------------------------------

@dataclass
class _Value:
    """A node matrix in one or both layouts; ``static``: the graph's input
    features, unchanged."""

    tensors: dict[str, Tensor]
    width: int
    static: bool = False


@dataclass
class _Kept:
    """A value kept with what it was made from (tensors, or :obj:`None`):
    it serves a later call whose sources are the same, unchanged tensors
    (identity and in-place version). A static input's rows, a layer's
    aggregate of it (input and edge weights), the part's labels (classes
    and mask)."""

    sources: tuple[Tensor | None, ...]
    versions: tuple[int, ...]
    value: Tensor

    @classmethod
    def of(cls, sources: tuple[Tensor | None, ...], value: Tensor) -> _Kept:
        return cls(sources, _versions(sources), value)

    def serves(self, sources: tuple[Tensor | None, ...]) -> bool:
        return (len(sources) == len(self.sources)
                and all(a is b for a, b in zip(sources, self.sources))
                and _versions(sources) == self.versions)


def _versions(sources: tuple[Tensor | None, ...]) -> tuple[int, ...]:
    return tuple(-1 if t is None else t._version for t in sources)


class FeatureParallelModel:
    r"""``model`` run on the grid: calling it gives the logits of this
    rank's row block (``[row block, classes]``). Each step of the model
    (:func:`compile_model`) runs in the layout its plan says
    (:func:`choose_orders`: the orders that move the fewest bytes), the
    halos of column slices under the graph's policies, the all-to-alls booked
    in the graph's ledger apart (direction ``"all_to_all"``; ``"eval"`` in
    evaluation). A static input's rows layout is made once and kept, and so
    is the rows layout of a layer's aggregate of it (``_aggregate_rows``).

    Args:
        model (torch.nn.Module): The model (every rank holds all of it).
        data (FeatureParallelData): This rank's share of the graph.

    Attributes:
        ops (list[Op]): The model's steps.
        orders (list[str]): Each conv's order.
    """

    def __init__(self, model: nn.Module, data: FeatureParallelData) -> None:
        self.model, self.data, self.grid = model, data, data.grid
        self.graph: DistEdgeIndex = data.edge_index
        self.ops = compile_model(model, data.num_features)
        self.program = [op.spec() for op in self.ops]
        slices = self.grid.slices
        halo = distributed.all_reduce_values([float(self.graph.num_halo)])[0] / slices
        self.orders = choose_orders(self.program, _a2a_rows(data.meta.num_nodes, slices), halo,
                                    slices)
        self._needs, self._names = self._plan_needs()
        self._mover = _Mover(self.grid, self.graph)
        self._static: dict[str, _Kept] = {}
        self._aggregates: dict[tuple[str, str], _Kept] = {}
        self._targets: _Kept | None = None
        self._empty = torch.empty(2, 0, dtype=torch.long, device=data.x.device)

    def _plan_needs(self) -> tuple[list[set[str]], list[str]]:
        """Per step, the layouts its input is wanted in (those of the next
        step that is no elementwise one), and the name layout changes before
        it are booked under (that step's layer, or ``"logits"``)."""
        steps = [*self.program, ["end"]]
        orders, at = iter(self.orders), {}
        for i, spec in enumerate(steps):
            if spec[0] == "conv":
                at[i] = next(orders)
        wanted, names = [], []
        for i in range(len(steps)):
            consumer = next(j for j in range(i, len(steps))
                            if steps[j][0] not in ("dropout", "act"))
            wanted.append(needs(steps[consumer], at.get(consumer, AGGREGATE_FIRST)))
            names.append(self._name(self.ops[consumer]) if consumer < len(self.ops)
                         else "logits")
        return wanted, names

    def __call__(self, edge_weight: Tensor | None = None) -> Tensor:
        """This rank's row block of the model's output (collective).

        Args:
            edge_weight (torch.Tensor, optional): ``[part edges]`` weights of
                the part's edges, given to the layers that take them (as the
                model would pass them). (default: :obj:`None`)
        """
        return self.rows(self.output(edge_weight))

    def rows(self, value: _Value) -> Tensor:
        """The row block of an :meth:`output` (collective)."""
        return self._materialize(value, {ROWS}, "logits").tensors[ROWS]

    def output(self, edge_weight: Tensor | None = None) -> _Value:
        """The model's output in the layout its last step leaves it in
        (collective; the arguments of :meth:`__call__`)."""
        value = _Value({COLUMNS: self.data.x}, self.data.num_features, static=True)
        orders = iter(self.orders)
        for i, op in enumerate(self.ops):
            value = self._materialize(value, self._needs[i], self._names[i])
            if op.kind == "dropout":
                value = self._dropout(value, op.p)
            elif op.kind == "act":
                value = _Value({k: op.module(t) for k, t in value.tensors.items()}, value.width)
            elif op.kind == "norm":
                value = _Value({ROWS: op.module(value.tensors[ROWS])}, value.width)
            else:
                value = self._conv(op, next(orders), value, edge_weight)
        return value

    def loss(self, value: _Value, y: Tensor, mask: Tensor) -> tuple[Tensor, float]:
        """The training loss of an :meth:`output` (as
        :func:`~pyg_dist.train.global_loss` gives it): on the columns
        where the output is there alone and :func:`loss_on_columns` says so
        (two statistics per row cross instead of the logits), else on the
        rows. Collective.

        Args:
            value: The model's :meth:`output`.
            y (torch.Tensor): ``[row block]`` classes.
            mask (torch.Tensor): ``[row block]`` the nodes the loss counts.
        """
        if ROWS in value.tensors or value.static or not loss_on_columns(value.width,
                                                                         self.grid.slices):
            return global_loss(self.rows(value), y, mask)
        kept = self._targets
        if kept is None or not kept.serves((y, mask)):
            kept = self._targets = _Kept.of((y, mask), self._gather_targets(y, mask))
        return _ColumnLoss.of(value.tensors[COLUMNS], kept.value, value.width, self.grid,
                              self.graph.ledger, self._direction)

    def _gather_targets(self, y: Tensor, mask: Tensor) -> Tensor:
        """``[part rows]`` each row's class where the mask counts it, else
        -1, from every row block of the part (an all-to-all, booked as
        ``logits/labels``)."""
        slices = self.grid.slices
        mine = torch.where(mask, y, torch.full_like(y, -1)).view(-1, 1).expand(-1, slices)
        with torch.no_grad():
            out = self._mover.move(mine.contiguous(), False, slices, "logits/labels",
                                   self._direction)
        return out.view(-1)

    def _name(self, op: Op) -> str:
        return self.graph.registry.name(op.module) if op.kind in ("conv", "norm") else "input"

    @property
    def _direction(self) -> str:
        return ALL_TO_ALL if self.model.training else "eval"

    def _move(self, x: Tensor, layout: str, width: int, name: str) -> Tensor:
        return _Redistribute.apply(x, self._mover, layout == ROWS, width, f"{name}/{layout}",
                                   self._direction)

    def _materialize(self, value: _Value, wanted: set[str], name: str) -> _Value:
        """``value`` in the ``wanted`` layouts only (a static input's rows
        made once and kept)."""
        for layout in sorted(wanted - value.tensors.keys()):
            source = next(iter(value.tensors.values()))
            if value.static:
                kept = self._static.get(layout)
                if kept is None or not kept.serves((source,)):
                    with torch.no_grad():
                        moved = self._move(source, layout, value.width, "input")
                    kept = self._static[layout] = _Kept.of((source,), moved)
                value.tensors[layout] = kept.value
            else:
                value.tensors[layout] = self._move(source, layout, value.width, name)
        return _Value({k: t for k, t in value.tensors.items() if k in wanted}, value.width,
                      value.static)

    def _rows_of(self, layout: str) -> Tensor:
        ids = self.graph.global_id
        return ids if layout == COLUMNS else ids[self.data.rows[0] : self.data.rows[1]]

    def _columns_of(self, layout: str, width: int) -> Tensor | None:
        if layout == ROWS:
            return None
        lo, hi = self.grid.bounds(width)
        return torch.arange(lo, hi, device=self.graph.device)

    def _dropout(self, value: _Value, p: float) -> _Value:
        """Dropout drawn from the graph's hash of (global node, global
        column): the masks of one process, in every layout."""
        if not self.model.training or p == 0.0:
            return value
        state = self.graph.registry.dropout
        if state.seed is None:  # rank 0's draw, on every rank of the grid
            state.seed = int(distributed.broadcast(
                torch.randint(0, 2**31 - 1, (1,), dtype=torch.int64)))
        seed, call = next_call(self.graph)
        out = {layout: DroppedInput(t, p, seed, call, self.graph,
                                    self._columns_of(layout, value.width)).apply(
                                        self._rows_of(layout))
               for layout, t in value.tensors.items()}
        return _Value(out, value.width)

    def _conv(self, op: Op, order: str, value: _Value, edge_weight: Tensor | None) -> _Value:
        weight = edge_weight if op.weighted else None
        if op.layer == "gcn":
            return self._gcn(op, order, value, weight)
        if op.layer == "sage":
            return self._sage(op, order, value, weight)
        return self._linear(op, value, weight)

    def _gcn(self, op: Op, order: str, value: _Value, weight: Tensor | None) -> _Value:
        conv, f_out, name = op.module, op.widths[1], self._name(op)
        coefficients = _GCNCoefficients(bool(conv.normalize), bool(conv.improved),
                                        bool(conv.add_self_loops))
        if order == AGGREGATE_FIRST:
            agg = self._aggregate_rows(conv, name, value, coefficients, weight, f_out)
            out = F.linear(agg, conv.lin.weight)
            return _Value({ROWS: out if conv.bias is None else out + conv.bias}, f_out)
        z = self._move(F.linear(value.tensors[ROWS], conv.lin.weight), COLUMNS, f_out, name)
        out = self._aggregate(conv, z, coefficients, weight, f_out)
        if conv.bias is not None:
            lo, hi = self.grid.bounds(f_out)
            out = out + conv.bias[lo:hi]
        return _Value({COLUMNS: out}, f_out)

    def _sage(self, op: Op, order: str, value: _Value, weight: Tensor | None) -> _Value:
        conv, f_out, name = op.module, op.widths[1], self._name(op)
        coefficients = _SumCoefficients(conv.aggr == "mean", weighted_mean=True)
        if order == AGGREGATE_FIRST:
            if conv.project:
                width = int(conv.lin.out_channels)
                source = self._move(conv.lin(value.tensors[ROWS]).relu(), COLUMNS, width, name)
                agg = self._aggregate_rows(conv, name, _Value({COLUMNS: source}, width),
                                           coefficients, weight, f_out)
            else:
                agg = self._aggregate_rows(conv, name, value, coefficients, weight, f_out)
            out = conv.lin_l(agg)
        else:
            z = self._move(F.linear(value.tensors[ROWS], conv.lin_l.weight), COLUMNS, f_out,
                           name)
            agg = self._aggregate(conv, z, coefficients, weight, f_out)
            out = self._move(agg, ROWS, f_out, name)
            if conv.lin_l.bias is not None:
                out = out + conv.lin_l.bias
        if conv.root_weight:
            out = out + conv.lin_r(value.tensors[ROWS])
        if conv.normalize:
            out = F.normalize(out, p=2.0, dim=-1)
        return _Value({ROWS: out}, f_out)

    def _linear(self, op: Op, value: _Value, weight: Tensor | None) -> _Value:
        """A generic-path layer whose message is ``x_j`` times an optional
        edge weight: its own ``forward`` on rows, its ``propagate`` the
        aggregation of its input's column slice."""
        conv, f_out, name = op.module, op.widths[1], self._name(op)
        rows = value.tensors[ROWS]
        coefficients = _SumCoefficients(conv.aggr == "mean", weighted_mean=False)
        weight_arg = LINEAR_MESSAGES[conv.pyg_class]

        def propagate(edge_index: Any, size: Any = None, **kwargs: Any) -> Tensor:
            x = kwargs.get("x")
            source = x[0] if isinstance(x, tuple) else x
            if source is not rows:
                raise ValueError(f"'{type(conv).__name__}' propagates something else than its "
                                 f"input; feature-parallel training runs {RUNS}")
            w = kwargs.get(weight_arg) if weight_arg is not None else None
            return self._aggregate_rows(conv, name, value, coefficients, w, f_out)

        extra = {weight_arg: weight} if weight_arg is not None and weight is not None else {}
        with _propagating(conv, propagate):
            out = conv(rows, self._empty, **extra)
        return _Value({ROWS: out}, f_out)

    def _aggregate_rows(self, layer: Any, name: str, value: _Value, coefficients: Any,
                        weight: Tensor | None, out_width: int) -> Tensor:
        """The layer's aggregation of ``value``'s columns, in the rows
        layout. The aggregate of a static input (the graph's features,
        unchanged) under edge weights that need no gradient is made at the
        first call and kept while input and weights stay the same unchanged
        tensors, per halo policy the layer runs (training's and evaluation's
        apart when they differ): its halo and its all-to-all are not run
        again. Kept only where the policy's halo of such an input is the
        one exact exchange (:class:`~pyg_dist.halo.Exact` caching inputs;
        any policy on one graph part, without halo)."""
        columns = value.tensors[COLUMNS]
        policy = self._kept_under(layer, value, weight)
        kept = None if policy is None else self._aggregates.get((name, policy))
        if kept is not None and kept.serves((columns, weight)):
            return kept.value
        agg = self._aggregate(layer, columns, coefficients, weight, out_width)
        rows = self._move(agg, ROWS, value.width, name)
        if policy is not None:
            self._aggregates[name, policy] = _Kept.of((columns, weight), rows.detach())
        return rows

    def _kept_under(self, layer: Any, value: _Value, weight: Tensor | None) -> str | None:
        """The key (the halo policy's spec) under which the layer's
        aggregate of ``value`` is kept, :obj:`None` where it is not."""
        if not value.static or (weight is not None and weight.requires_grad):
            return None
        if self.grid.parts == 1:
            return ""
        policy = LayerHalo.policy_of(self.graph, layer.halo, layer.training)
        if type(policy) is not Exact or not policy.cache_inputs:
            return None
        return policy.spec()

    def _aggregate(self, layer: Any, h: Tensor, coefficients: Any, weight: Tensor | None,
                   out_width: int) -> Tensor:
        """The layer's aggregation of ``h`` (a column slice of the part's
        rows) over the graph: its halo under the layer's policy (this
        slice's columns, among the slice's ranks), pre-aggregated where the
        layer or graph asks."""
        graph = self.graph
        if h.size(1) == 0:  # a slice without columns (fewer columns than slices): the
            return h.clone()  # same autograd graph as the other slices' ranks, no exchange
        if pre_aggregates(layer, graph, weights_reason(weight), h):
            covered, value = pre_aggregated(graph, coefficients.key(h.dtype, weight), weight,
                                            lambda: coefficients.whole(graph, weight, h.dtype))
            halo, static = LayerHalo.open(layer, covered, h, out_width)
            fetched = halo.fetch(h, static)
            if fetched.mask is None:
                return spmm(covered.rowptr, covered.col, h, value.to(h.dtype), "sum",
                            x_halo=fetched.rows)
            fetched, halo = owned_only(fetched, graph), None
        else:
            halo, static = LayerHalo.open(layer, graph, h, out_width)
            fetched = halo.fetch(h, static)
        rowptr, col, coefficient = coefficients.local(graph, weight, fetched, halo, h.dtype)
        coefficient = None if coefficient is None else coefficient.to(h.dtype)
        return spmm(rowptr, col, h, coefficient, "sum", x_halo=fetched.rows)

    def sum_gradients(self) -> None:
        """Sums every parameter's gradient over :attr:`FeatureGrid.gradient_group`
        (booked as ``gradients``). Collective."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        start = time.perf_counter()
        distributed.all_reduce_gradients(params, self.grid.gradient_group)
        if distributed.is_distributed():
            sent = sum(p.numel() * p.element_size() for p in params)
            self.graph.ledger.record(GRADIENTS_LAYER, GRADIENTS, bytes_sent=sent,
                                     bytes_recv=sent, exchanges=1,
                                     seconds=time.perf_counter() - start)


@contextmanager
def _propagating(layer: Any, propagate: Callable[..., Tensor]) -> Iterator[None]:
    """``layer.propagate`` is ``propagate`` for the block."""
    had = "propagate" in layer.__dict__
    before = layer.__dict__.get("propagate")
    layer.propagate = propagate
    try:
        yield
    finally:
        if had:
            layer.propagate = before
        else:
            del layer.propagate


def _a2a_rows(num_nodes: int, slices: int) -> float:
    """Rows an all-to-all moves per unit of width, all ranks: :math:`N (T-1)/T`."""
    return num_nodes * (slices - 1) / slices


# -- the run --------------------------------------------------------------------------------

class _FeatureParallelRun(Runner):
    """A feature-parallel run: each step the model on the grid
    (:class:`FeatureParallelModel`), the loss where the logits are
    (:meth:`FeatureParallelModel.loss`), the gradients
    summed over every rank. Given a graph-parallel part (the planner's
    choice), it loads the grid's share from the part's folder first."""

    def __init__(self, strategy: FeatureParallel, model: nn.Module, task: Task,
                 settings: Settings) -> None:
        data = task.data
        if not isinstance(data, FeatureParallelData):
            folder = getattr(data, "folder", None)
            if folder is None:
                raise ValueError(f"'train' with strategy={strategy} needs the grid's data: "
                                 f"pass strategy.load(folder), or a DistData loaded from a "
                                 f"partition folder")
            data = strategy.load(folder)
        super().__init__(model, Task(data), settings, sync=False)
        graph = data.edge_index
        if strategy.halo is not None:
            self.hold(graph.registry.using(default=as_policy(strategy.halo)))
        if strategy.pre_aggregate is not None:
            self.hold(graph.using(strategy.pre_aggregate))
        self.net = FeatureParallelModel(model, data)

    def step(self, epoch: int, optimizer: torch.optim.Optimizer) -> Step:
        self.model.train()
        optimizer.zero_grad(set_to_none=True)
        start = time.perf_counter()
        loss, value = self.net.loss(self.net.output(), self.task.y, self.task.train_mask)
        forward = time.perf_counter() - start
        loss.backward()
        self.net.sum_gradients()
        optimizer.step()
        return Step(value, forward)

    def evaluate(self, step: Step) -> tuple[float, float, float]:
        with torch.no_grad():
            self.model.eval()
            return accuracies(self.net().argmax(dim=-1), self.task)

    def describe(self) -> dict[str, Any]:
        grid = self.net.grid
        return {**super().describe(), "grid": f"{grid.parts}x{grid.slices}",
                "orders": list(self.net.orders)}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore: the gradients are plain sums."""


# -- the planner's measurements and predictions -----------------------------------------------

def measure(model: nn.Module, data: Any) -> dict[str, Any] | None:
    """What ``FeatureParallel.candidates`` needs of a graph-parallel
    part (collective): the model's steps, and for every grid of the world
    (:math:`T` dividing it, the folder's parts merged :math:`T` at a time) its
    parts' rows and edges and its cut's halo rows received and sent per part.

    Args:
        model (torch.nn.Module): The model.
        data (DistData): This rank's part.
    """
    if not isinstance(data, DistData) or "x" not in data.keys():
        return None
    try:
        program = [op.spec() for op in compile_model(model, int(data.x.size(1)))]
    except ValueError as exc:
        return {"refused": str(exc)}
    graph = data.edge_index
    plan = graph.plan
    owner = graph.plan.halo_peer.cpu().numpy().astype(np.int64)
    mine = (int(graph.num_owned), int(graph.num_edges), plan.halo_global_id.cpu().numpy(),
            owner)
    parts = distributed.all_gather_objects(mine)
    world = len(parts)
    grids: dict[str, Any] = {}
    for slices in (t for t in range(1, world + 1) if world % t == 0):
        grids[str(slices)] = _grid_sizes(parts, slices)
    return {"program": program, "num_nodes": int(data.meta.num_nodes), "grids": grids,
            "rows": [p[0] for p in parts], "edges": [p[1] for p in parts]}


def _grid_sizes(parts: list[Any], k: int) -> dict[str, list[int]]:
    """Rows, edges, halo rows received and sent of each part of the grid
    that merges the folder's parts ``k`` at a time."""
    count = len(parts) // k
    halos = []
    for d in range(count):
        ids = [(h[o // k != d], o[o // k != d] // k) for _, _, h, o in parts[d * k:(d + 1) * k]]
        gid = np.concatenate([i for i, _ in ids]) if ids else np.empty(0, np.int64)
        own = np.concatenate([o for _, o in ids]) if ids else np.empty(0, np.int64)
        halos.append(np.unique(np.stack([own, gid]), axis=1) if gid.size else
                     np.empty((2, 0), np.int64))
    sent = [0] * count
    for halo in halos:
        for owner, n in zip(*np.unique(halo[0], return_counts=True)):
            sent[int(owner)] += int(n)
    return {"rows": [sum(p[0] for p in parts[d * k:(d + 1) * k]) for d in range(count)],
            "edges": [sum(p[1] for p in parts[d * k:(d + 1) * k]) for d in range(count)],
            "halo": [int(h.shape[1]) for h in halos], "sent": sent}


def predict(program: list[list[Any]], sizes: dict[str, list[int]], slices: int, probe: Probe,
            epochs: int) -> tuple[float, float]:
    """Seconds of a step and bytes over ``epochs`` (all ranks, what the
    ledger books) of ``program`` on the grid of ``slices`` slices whose parts
    have ``sizes`` (:func:`measure`).

    Args:
        program (list): The model's steps (:meth:`Op.spec`).
        sizes (dict): The grid's parts: ``rows``, ``edges``, ``halo``, ``sent``.
        slices (int): :math:`T`.
        probe (Probe): The link, the exact compute, the gradients' bytes.
        epochs (int): The planned epochs.
    """
    rows = sizes["rows"]
    halo_rows = sum(sizes["halo"])
    orders = choose_orders(program, _a2a_rows(sum(rows), slices), halo_rows, slices)
    alpha, beta = probe.latency, probe.bandwidth
    busiest_halo = max(h + s for h, s in zip(sizes["halo"], sizes["sent"]))
    seconds = nbytes = 0.0
    for e in simulate(program, orders, slices):
        ways = 2 if e.grad else 1
        if e.kind == "labels":  # int64 classes, each rank's row block to the part's ranks
            nbytes += min(epochs, e.steps) * 8.0 * sum(n * (slices - 1) for n in rows)
            seconds += (alpha + 8.0 * max(rows) * (slices - 1) / slices / beta) / max(epochs, 1)
        elif e.kind == "loss":  # an all-reduce of the part's rows per statistic, each rank its own
            nbytes += epochs * 4.0 * e.width * slices * sum(rows)
            seconds += e.width * (alpha + 4.0 * 2 * (slices - 1) / slices * max(rows) / beta)
        elif e.kind == "a2a":
            if slices == 1:
                continue
            moved = 4.0 * sum(_a2a_elements(n, e.width, slices) for n in rows)
            one = alpha + 4.0 * max(_a2a_busiest(n, e.width, slices) for n in rows) / beta
            if e.once:  # a static input's rows or aggregate, made at the first step and kept
                nbytes += min(epochs, e.steps) * moved
                seconds += min(epochs, e.steps) * one / max(epochs, 1)
            else:
                nbytes += epochs * ways * moved
                seconds += ways * one
        elif len(rows) > 1 and halo_rows:
            moved = 4.0 * halo_rows * e.width
            one = ways * (alpha + busiest_halo * 4.0 * -(-e.width // slices) / beta)
            if e.once:  # a static input's halo: exchanged at the first step(s), then kept
                fills = min(epochs, e.steps)
                nbytes += fills * moved
                seconds += fills * one / max(epochs, 1)
            else:
                nbytes += epochs * ways * moved
                seconds += one
    world = probe.world_size
    grad_bytes = probe.grad_bytes
    nbytes += epochs * world * grad_bytes if world > 1 else 0.0
    return compute_share(sizes, slices, probe) + seconds + grad_seconds(probe, grad_bytes), nbytes


def compute_share(sizes: dict[str, list[int]], slices: int, probe: Probe) -> float:
    r"""The probe's exact compute scaled by the grid's largest share of edges
    and rows per rank, :math:`\max_d (E_d + n_d)/T`, over the probed parts'
    largest, :math:`\max_q (E_q + n_q)`."""
    measured = probe.measured.get(FeatureParallel.name, {})
    probed = max((e + n for e, n in zip(measured.get("edges", []), measured.get("rows", []))),
                 default=0)
    share = max((e + n) / slices for e, n in zip(sizes["edges"], sizes["rows"]))
    return probe.exact_compute * share / probed if probed else probe.exact_compute


def _a2a_elements(n: int, width: int, slices: int) -> int:
    """Elements all ranks of a part of ``n`` rows send in one all-to-all of width ``width``."""
    return n * width - sum((bounds(n, slices, t)[1] - bounds(n, slices, t)[0])
                           * (bounds(width, slices, t)[1] - bounds(width, slices, t)[0])
                           for t in range(slices))


def _a2a_busiest(n: int, width: int, slices: int) -> int:
    """Elements the busiest rank of a part of ``n`` rows sends and receives
    in one all-to-all of width ``width``."""
    out = 0
    for t in range(slices):
        block = bounds(n, slices, t)[1] - bounds(n, slices, t)[0]
        cols = bounds(width, slices, t)[1] - bounds(width, slices, t)[0]
        out = max(out, (n - block) * cols + block * (width - cols))
    return out

