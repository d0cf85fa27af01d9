"""What a rank holds: its part of the graph (:class:`DistData`) and the local
adjacency with its halo plan (:class:`DistEdgeIndex`)."""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pyg_dist.halo.cover import cover_adjacency
from pyg_dist.halo.exchange import HaloChannel, exchange_halo
from pyg_dist.halo.layer import HaloRegistry
from pyg_dist.halo.ledger import Ledger
from pyg_dist.halo.plan import HaloPlan
from pyg_dist.halo.policy import HaloPolicy
from pyg_dist.ops.csr import csr_row, ptr_from_sorted
from pyg_dist.partitioning.io import PartitionMeta, read_meta, read_part
from pyg_dist.runtime import distributed
from pyg_dist.tasks.supervision import SupervisionEdges

__all__ = ["DistData", "DistEdgeIndex", "Adj"]


class DistEdgeIndex:
    r"""The in-edges of the nodes a rank owns, as a local CSR whose columns run
    over ``[owned ; halo]``, together with the halo plan that fills the halo rows.

    Pass it where a PyG layer takes ``edge_index``: the Dist layers then run
    distributed (a plain ``edge_index`` tensor keeps them single-process).

    Args:
        rowptr (torch.Tensor): ``[num_owned + 1]`` int64 row pointers (row = owned target).
        col (torch.Tensor): ``[num_edges]`` int64 local source columns; ``c < num_owned``
            is an owned node, ``num_owned + h`` is halo row ``h``.
        edge_id (torch.Tensor): ``[num_edges]`` position of each edge in the
            partitioned graph's ``edge_index``.
        halo_in_degree (torch.Tensor): ``[num_halo]`` in-degree of each halo node in
            the whole graph (self-loops and duplicates included).
        halo_self_loops (torch.Tensor): ``[num_halo]`` self-loops of each halo node.
        channel (HaloChannel): The plan, process group and ledger of exchanges.
        global_id (torch.Tensor): ``[num_owned]`` global id of each owned node.
        registry (HaloRegistry, optional): The default halo policy and every
            layer's halo state on this graph (checkpointed); :obj:`None` for a
            new, empty one. (default: :obj:`None`)
        origin (DistEdgeIndex, optional): The graph this one was cut from by
            :meth:`keep_edges`; :obj:`None` for itself. Both share the halo
            plan. (default: :obj:`None`)
        pre_aggregate (bool, optional): Whether the layers that can (linear
            aggregations with fixed coefficients) exchange partial sums on a
            minimum vertex cover instead of rows (see
            :meth:`pre_aggregated`); a layer's own ``pre_aggregate`` wins.
            (default: :obj:`False`)

    Attributes:
        num_owned (int): Nodes this rank owns (output rows of every layer).
        num_halo (int): Remote source nodes (halo rows: on a pre-aggregated
            graph, covered sources and partial sums).
        base (DistEdgeIndex): The graph a pre-aggregated one was derived
            from (:meth:`pre_aggregated`); the graph itself otherwise.
    """

    def __init__(
        self,
        rowptr: Tensor,
        col: Tensor,
        edge_id: Tensor,
        halo_in_degree: Tensor,
        halo_self_loops: Tensor,
        channel: HaloChannel,
        global_id: Tensor,
        registry: HaloRegistry | None = None,
        origin: DistEdgeIndex | None = None,
        pre_aggregate: bool = False,
    ) -> None:
        self.rowptr, self.col, self.edge_id = rowptr, col, edge_id
        self.origin = self if origin is None else origin
        self.pre_aggregate = pre_aggregate
        self.base = self
        self.global_id = global_id
        self.num_owned = rowptr.numel() - 1
        self.num_halo = channel.plan.num_halo
        self.halo_in_degree, self.halo_self_loops = halo_in_degree, halo_self_loops
        self.channel = channel
        self.registry = registry if registry is not None else HaloRegistry()
        self._cache: dict[Any, Any] = {}
        assert halo_in_degree.numel() == self.num_halo, "halo degrees must match the plan"

    @property
    def plan(self) -> HaloPlan:
        return self.channel.plan

    @property
    def ledger(self) -> Ledger:
        return self.channel.ledger

    @property
    def num_edges(self) -> int:
        return self.col.numel()

    @property
    def device(self) -> torch.device:
        return self.col.device

    def row(self) -> Tensor:
        """``[num_edges]`` local target row of every edge."""
        return csr_row(self.rowptr, self.col)

    def max_in_degree(self) -> int:
        """The largest in-degree of any node of the whole graph (its owner holds
        all its in-edges): the maximum over the ranks, collective the first
        time, then remembered."""
        def build() -> int:
            local = int((self.rowptr[1:] - self.rowptr[:-1]).max()) if self.num_owned else 0
            return int(distributed.all_reduce_values([local], "max", self.channel.group)[0])

        return int(self.cached("max_in_degree", build))

    def cached(self, key: Any, build: Any) -> Any:
        """``build()``, computed once per graph and remembered under ``key``."""
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def has_cached(self, key: Any) -> bool:
        """Whether :meth:`cached` remembers something under ``key``.

        Args:
            key (Any): The key.
        """
        return key in self._cache

    def restrict(self, halo_mask: Tensor) -> tuple[DistEdgeIndex, Tensor]:
        """The local graph without the edges from halo rows absent in
        ``halo_mask`` (``[num_halo]`` bool), and the ``[num_edges]`` mask of kept edges.
        The graph of the owned nodes alone (no halo row kept, as under
        ``Isolated``) is built once and reused, with what it caches."""
        if not bool(halo_mask.any()):
            return self.cached("owned_only", lambda: self._restrict(halo_mask))
        return self._restrict(halo_mask)

    def _restrict(self, halo_mask: Tensor) -> tuple[DistEdgeIndex, Tensor]:
        remote = self.col >= self.num_owned
        keep = ~remote
        keep[remote] = halo_mask[self.col[remote] - self.num_owned]
        rowptr = ptr_from_sorted(self.row()[keep], self.num_owned)
        sub = DistEdgeIndex(rowptr, self.col[keep], self.edge_id[keep], self.halo_in_degree,
                            self.halo_self_loops, self.channel, self.global_id, self.registry,
                            self.origin, self.pre_aggregate)
        return sub, keep

    def pre_aggregated(self, key: Any, rowptr: Tensor, col: Tensor,
                       value: Tensor) -> tuple[DistEdgeIndex, Tensor]:
        r"""The graph over a pre-aggregated halo of the aggregation
        ``(rowptr, col, value)`` (this graph's adjacency with fixed
        coefficients, reduce ``"sum"``), and its coefficients: peers send,
        per pair of ranks, the rows of a minimum vertex cover's sources and
        one partial sum per covered target (``pyg_dist.halo.cover``).
        Aggregating ``[owned ; its halo]`` with reduce ``"sum"`` over it equals
        aggregating ``[owned ; this halo]`` over ``(rowptr, col, value)``.
        Collective the first time per ``key`` (one setup exchange booked as
        ``cover``), then remembered; the derived graph has its own halo plan
        and shares this graph's ledger, message tags and halo registry.

        Args:
            key (Any): Names the coefficients (the aggregation and its
                options); a new key builds a new graph.
            rowptr (torch.Tensor): ``[num_owned + 1]`` int64 row pointers.
            col (torch.Tensor): ``[e]`` int64 columns over ``[owned ; halo]``.
            value (torch.Tensor): ``[e]`` coefficients (no gradient).
        """
        assert self.base is self, "pre-aggregate a plain graph"

        def build() -> tuple[DistEdgeIndex, Tensor]:
            covered = cover_adjacency(self.channel, rowptr, col, value)
            channel = HaloChannel(covered.plan, self.channel.ledger, self.channel.group,
                                  self.channel.transport, _tags=self.channel._tags)
            zeros = torch.zeros(covered.plan.num_halo, dtype=torch.long, device=self.device)
            graph = DistEdgeIndex(covered.rowptr, covered.col, covered.edge, zeros, zeros,
                                  channel, self.global_id, self.registry, None, True)
            graph.base = self
            return graph, covered.value

        return self.cached(("pre_aggregated", key), build)

    def global_edges(self) -> tuple[Tensor, Tensor]:
        """``([num_edges], [num_edges])`` global source and target id of every edge."""
        ids = torch.cat([self.global_id, self.plan.halo_global_id.to(self.global_id.device)])
        return ids[self.col], self.global_id[self.row()]

    def keep_edges(self, keep: Tensor, name: str = "keep_edges") -> DistEdgeIndex:
        """The graph of the edges in ``keep`` (``[num_edges]`` bool), on the same
        halo plan (halo rows no kept edge reads are still fetched). Collective:
        every rank calls it, since the halo nodes' in-degrees and self-loops
        in the kept graph are known only to their owners and come from them in
        one exchange of two int32 a halo row, booked as ``name/degree``."""
        row = self.row()[keep]
        col = self.col[keep]
        counts = torch.zeros(self.num_owned, 2, dtype=torch.int32, device=col.device)
        counts[:, 0].index_add_(0, row, torch.ones_like(row, dtype=torch.int32))
        loops = row[col == row]
        counts[:, 1].index_add_(0, loops, torch.ones_like(loops, dtype=torch.int32))
        halo = exchange_halo(counts, self.channel, f"{name}/degree").to(torch.int64)
        return DistEdgeIndex(ptr_from_sorted(row, self.num_owned), col, self.edge_id[keep],
                             halo[:, 0], halo[:, 1], self.channel, self.global_id,
                             self.registry, self.origin, self.pre_aggregate)

    def flush(self) -> None:
        """Completes halo exchanges still in flight (pipelined policies)."""
        self.registry.flush()

    @contextmanager
    def using(self, pre_aggregate: bool) -> Iterator[DistEdgeIndex]:
        """Pre-aggregates (or not) for the block, and gives the old setting
        back after it.

        Args:
            pre_aggregate (bool): Whether layers that can exchange partial
                sums (see :meth:`pre_aggregated`).
        """
        before, self.pre_aggregate = self.pre_aggregate, pre_aggregate
        try:
            yield self
        finally:
            self.pre_aggregate = before

    @contextmanager
    def trial(self, pre_aggregate: bool | None = None,
              **settings: Any) -> Iterator[Ledger]:
        """A block the graph forgets after it: its traffic booked in a ledger
        of its own (yielded), its halo state fresh and then dropped
        (:meth:`~pyg_dist.halo.HaloRegistry.trial`, with ``settings``), the graphs it derived
        (pre-aggregated, restricted) and the random draws made undone: what a
        probe measures on leaves the run as it was.

        Args:
            pre_aggregate (bool, optional): Whether to pre-aggregate in the
                block; :obj:`None` keeps the graph's setting. (default: :obj:`None`)
            **settings: The halo registry's settings for the block
                (:meth:`~pyg_dist.halo.HaloRegistry.using`).
        """
        derived = set(self._cache)
        with ExitStack() as held:
            held.enter_context(torch.random.fork_rng(devices=[]))
            ledger = held.enter_context(self.channel.trial())
            held.enter_context(self.registry.trial(**settings))
            if pre_aggregate is not None:
                held.enter_context(self.using(pre_aggregate))
            try:
                yield ledger
            finally:
                for key in set(self._cache) - derived:
                    del self._cache[key]

    def to(self, device: torch.device | str) -> DistEdgeIndex:
        """This graph on ``device`` (move it before the first layer call: the
        registry's halo state stays where it is)."""
        channel = HaloChannel(
            self.channel.plan.to(device), self.channel.ledger, self.channel.group,
            self.channel.transport,
        )
        return DistEdgeIndex(
            self.rowptr.to(device), self.col.to(device), self.edge_id.to(device),
            self.halo_in_degree.to(device), self.halo_self_loops.to(device), channel,
            self.global_id.to(device), self.registry, None, self.pre_aggregate,
        )

    def __repr__(self) -> str:
        return (
            f"DistEdgeIndex(rank={self.plan.rank}/{self.plan.world_size}, "
            f"num_owned={self.num_owned}, num_halo={self.num_halo}, num_edges={self.num_edges})"
        )


#: A layer's ``edge_index``: PyG's ``[2, num_edges]`` tensor (the layer runs as
#: the PyG layer does) or a :class:`~pyg_dist.DistEdgeIndex` (it runs distributed).
Adj = Tensor | DistEdgeIndex


class DistData:
    r"""One rank's part of a partitioned graph, loaded by
    :meth:`~pyg_dist.DistData.load`.

    Node-level attributes of the partitioned graph (``x``, ``y``,
    ``train_mask``, ...) hold the rows of the nodes this rank owns, in the order
    of :attr:`global_id`; edge-level attributes (``edge_weight``, ...) follow
    the order of ``edge_index.col``. A graph partitioned without ``x`` has no
    ``x`` here either.

    Args:
        edge_index (DistEdgeIndex): Local adjacency and halo plan.
        node_attrs (dict[str, torch.Tensor]): The node-level attributes, each
            with a row per owned node (set as attributes of the same name).
        edge_attrs (dict[str, torch.Tensor]): The edge-level attributes, each
            with a row per edge of ``edge_index.col`` (set as attributes of
            the same name).
        meta (PartitionMeta): The partition's metadata.
        rank (int): This rank (= the part it holds).
        folder (str or os.PathLike, optional): The partition folder it was
            loaded from; :obj:`None` when built by hand. (default: :obj:`None`)
        link (dict[str, ~pyg_dist.tasks.SupervisionEdges], optional): This rank's supervision
            edges of each split of a link split (those whose source node it
            owns; :meth:`supervision`). (default: :obj:`None`, none)

    Attributes:
        global_id (torch.Tensor): ``[num_nodes]`` global id of each owned node.
        num_nodes (int): Nodes this rank owns.
        world_size (int): Number of ranks (= parts).
        folder (pathlib.Path): The partition folder (:obj:`None` when built by hand).
    """

    def __init__(
        self,
        edge_index: DistEdgeIndex,
        node_attrs: dict[str, Tensor],
        edge_attrs: dict[str, Tensor],
        meta: PartitionMeta,
        rank: int,
        folder: str | os.PathLike | None = None,
        link: dict[str, SupervisionEdges] | None = None,
    ) -> None:
        self.edge_index = edge_index
        self._link = dict(link or {})
        self.meta = meta
        self.folder = None if folder is None else Path(folder)
        self.rank = rank
        self.world_size = meta.num_parts
        self._node_keys = sorted(node_attrs)
        self._edge_keys = sorted(edge_attrs)
        for key, value in {**node_attrs, **edge_attrs}.items():
            setattr(self, key, value)

    @property
    def global_id(self) -> Tensor:
        return self.edge_index.global_id

    @property
    def num_nodes(self) -> int:
        return self.global_id.numel()

    @property
    def ledger(self) -> Ledger:
        return self.edge_index.ledger

    def keys(self) -> list[str]:
        return ["edge_index", "global_id", *self._node_keys, *self._edge_keys]

    @property
    def link_splits(self) -> list[str]:
        """The splits of supervision edges this part holds (``"train"``,
        ``"val"``, ``"test"``); empty unless a link split was partitioned."""
        return list(self._link)

    def supervision(self, split: str = "train") -> SupervisionEdges:
        """This rank's supervision edges of ``split``: those whose source node
        it owns, with their global ids, labels and positions in the split.

        Args:
            split (str, optional): ``"train"``, ``"val"`` or ``"test"``.
                (default: :obj:`"train"`)
        """
        if split not in self._link:
            have = ", ".join(self._link) or "none"
            raise ValueError(f"'DistData.supervision' has no '{split}' edges (this part holds "
                             f"{have}); partition a link split, e.g. the three graphs "
                             f"RandomLinkSplit returns, to train link prediction")
        return self._link[split]

    def __getattr__(self, key: str) -> Any:
        # Only reached for missing attributes: name what exists.
        if key.startswith("_"):
            raise AttributeError(key)
        raise AttributeError(
            f"'DistData' has no attribute '{key}'; this part holds {', '.join(self.keys())}"
        )

    def to(self, device: torch.device | str) -> DistData:
        """Moves every tensor to ``device`` (in place) and returns ``self``."""
        self.edge_index = self.edge_index.to(device)
        for key in [*self._node_keys, *self._edge_keys]:
            setattr(self, key, getattr(self, key).to(device))
        self._link = {k: v.to(device) for k, v in self._link.items()}
        return self

    def __repr__(self) -> str:
        parts = [f"{k}={list(getattr(self, k).shape)}" for k in self._node_keys]
        parts += [f"{k}={list(getattr(self, k).shape)}" for k in self._edge_keys]
        return (
            f"DistData(rank={self.rank}/{self.world_size}, num_nodes={self.num_nodes}, "
            f"num_halo={self.edge_index.num_halo}, num_edges={self.edge_index.num_edges}, "
            f"{', '.join(parts)})"
        )

    @classmethod
    def load(
        cls,
        out_dir: str | os.PathLike,
        rank: int | None = None,
        device: torch.device | str | None = None,
        halo: HaloPolicy | None = None,
        group: Any = None,
        pre_aggregate: bool = False,
    ) -> DistData:
        r"""Loads this rank's part of the partition folder ``out_dir``, and only it.

        Args:
            out_dir (str or os.PathLike): Folder written by :func:`pyg_dist.partition`.
            rank (int, optional): The part to load; defaults to this process's rank.
                Without a process group, any part can be loaded for inspection.
                (default: :obj:`None`)
            device (torch.device or str, optional): Where to put the tensors; defaults
                to this rank's GPU under NCCL, else the CPU. (default: :obj:`None`)
            halo (optional): Default halo policy of the layers that set none.
                (default: :obj:`None`, exact)
            group (torch.distributed.ProcessGroup, optional): The group whose ranks
                hold the parts. (default: the default group)
            pre_aggregate (bool, optional): Layers whose aggregation is
                linear with fixed coefficients (GCN, GCN2, SAGE with sum or
                mean, GIN) exchange partial sums on a minimum vertex cover of
                each pair's cut edges instead of every halo row: exact, fewer
                rows. A layer's own ``pre_aggregate`` wins; layers that cannot
                exchange rows. (default: :obj:`False`)
        """
        meta, rank, content = _read(out_dir, rank, group)
        if meta.types is not None:
            raise ValueError(f"'{out_dir}' holds a heterogeneous graph; load it with "
                             f"pyg_dist.DistHeteroData.load('{out_dir}')")
        _check_same_partitioning(meta, group)
        graph = content["graph"]
        plan = HaloPlan.from_pointers(
            rank, graph["send_idx"], graph["send_ptr"], graph["halo_ptr"],
            graph["halo_global_id"], graph["global_id"],
        )
        channel = HaloChannel(plan, Ledger(), group)
        edge_index = DistEdgeIndex(
            graph["rowptr"], graph["col"], graph["edge_id"], graph["halo_in_degree"],
            graph["halo_self_loops"], channel, graph["global_id"], HaloRegistry(halo),
            pre_aggregate=pre_aggregate,
        )
        link = {name: SupervisionEdges(**edges)
                for name, edges in content.get("link", {}).items()}
        data = cls(edge_index, content["node"], content["edge"], meta, rank, out_dir, link)
        device = torch.device(device) if device is not None else distributed.default_device()
        return data.to(device) if device.type != "cpu" else data


def _read(out_dir: Any, rank: int | None, group: Any) -> tuple[PartitionMeta, int, Any]:
    """This rank's metadata and part, read by every rank on its own machine;
    if any rank cannot, whatever the error (a missing or damaged file, a
    part without a key it needs), every rank raises one error that lists
    them all."""
    meta = content = None
    with distributed.failing_together(f"'DistData.load' of '{out_dir}'", group):
        meta = read_meta(out_dir)
        rank = _check_rank(out_dir, meta, rank, group)
        content = read_part(out_dir, rank, meta)
    return meta, rank, content  # type: ignore[return-value]


def _check_rank(out_dir: Any, meta: PartitionMeta, rank: int | None, group: Any) -> int:
    if distributed.is_initialized():
        world, me = distributed.world_size(group), distributed.rank(group)
        if meta.num_parts != world:
            raise ValueError(
                f"'DistData.load' found {meta.num_parts} partitions in '{out_dir}' but the "
                f"process group has {world} ranks; re-partition with num_parts={world} or "
                f"launch {meta.num_parts} ranks (under torchrun: --nnodes times "
                f"--nproc-per-node)"
            )
        rank = me if rank is None else rank
    elif rank is None:
        if meta.num_parts != 1:
            raise ValueError(
                f"'DistData.load' has no process group to tell which of the {meta.num_parts} "
                f"parts in '{out_dir}' to load; call pyg_dist.init() first (or run under "
                f"torchrun / pyg_dist.launch), or pass rank= to inspect one part"
            )
        rank = 0
    if not 0 <= rank < meta.num_parts:
        raise ValueError(
            f"'DistData.load' got rank={rank} but '{out_dir}' has parts 0..{meta.num_parts - 1}"
        )
    return rank


def _check_same_partitioning(meta: PartitionMeta, group: Any) -> None:
    """All ranks must have loaded parts of one partitioning."""
    others = distributed.differing_ranks(int(meta.partition_id[:15], 16), group)
    if others:
        raise ValueError(
            f"ranks {others} loaded parts of a different partitioning than rank "
            f"{distributed.rank(group)} (partition id {meta.partition_id[:15]}); point every "
            f"rank at the same partition folder"
        )
