"""What a rank holds of a heterogeneous graph: per node type its owned rows
and halo plan, per edge type its in-edges (:class:`~pyg_dist.DistHeteroData`), each
edge type's adjacency a :class:`~pyg_dist.data.hetero_data.DistRelationIndex`."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pyg_dist.data.dist_data import DistData, DistEdgeIndex, _check_same_partitioning, _read
from pyg_dist.data.hetero_view import homogeneous_view
from pyg_dist.halo.exchange import HaloChannel
from pyg_dist.halo.layer import HaloRegistry
from pyg_dist.halo.ledger import Ledger
from pyg_dist.halo.plan import HaloPlan
from pyg_dist.halo.policy import HaloPolicy
from pyg_dist.halo.shared import SharedExchange
from pyg_dist.ops.csr import ptr_from_sorted
from pyg_dist.partitioning.hetero import edge_key
from pyg_dist.partitioning.io import PartitionMeta

__all__ = ["DistHeteroData", "DistRelationIndex", "NodePart", "EdgePart", "TypeDict"]

EdgeType = tuple[str, str, str]


class DistRelationIndex(DistEdgeIndex):
    r"""The in-edges of one edge type ``(src, rel, dst)`` into the ``dst``
    nodes a rank owns, as a local CSR whose columns run over the ``src``
    type's ``[owned ; halo]`` rows, with the ``src`` type's halo plan (shared
    by every edge type with source ``src``).

    Pass it where a PyG layer takes ``edge_index`` with bipartite input
    ``(x_src, x_dst)``: ``x_src`` has a row per owned ``src`` node, ``x_dst``
    one per owned ``dst`` node.

    Args:
        rowptr (torch.Tensor): ``[num_owned + 1]`` int64 row pointers (row =
            owned ``dst`` node).
        col (torch.Tensor): ``[num_edges]`` int64 columns over ``src``'s
            ``[owned ; halo]``.
        edge_id (torch.Tensor): ``[num_edges]`` position of each edge in the
            edge type's input ``edge_index``.
        halo_in_degree (torch.Tensor): ``[num_halo]`` in-degree in this edge
            type of each ``src`` halo node (zero unless ``src == dst``).
        halo_self_loops (torch.Tensor): ``[num_halo]`` its self-loops.
        channel (HaloChannel): The ``src`` type's plan, group and ledger.
        global_id (torch.Tensor): ``[num_owned]`` id within ``dst`` of each
            owned ``dst`` node.
        src_global_id (torch.Tensor): ``[num_src]`` id within ``src`` of each
            owned ``src`` node.
        edge_type (tuple[str, str, str]): The edge type.
        registry (HaloRegistry, optional): Halo policies and state, shared by
            every edge type of the graph. (default: :obj:`None`)

    Attributes:
        num_src (int): Owned ``src`` nodes (rows of ``x_src``).
    """

    def __init__(self, rowptr: Tensor, col: Tensor, edge_id: Tensor, halo_in_degree: Tensor,
                 halo_self_loops: Tensor, channel: HaloChannel, global_id: Tensor,
                 src_global_id: Tensor, edge_type: EdgeType,
                 registry: HaloRegistry | None = None) -> None:
        super().__init__(rowptr, col, edge_id, halo_in_degree, halo_self_loops, channel,
                         global_id, registry)
        self.src_global_id = src_global_id
        self.num_src = src_global_id.numel()
        self.edge_type = edge_type

    @property
    def is_bipartite(self) -> bool:
        """Whether sources and targets are of different node types."""
        return self.edge_type[0] != self.edge_type[2]

    def global_edges(self) -> tuple[Tensor, Tensor]:
        """``([num_edges], [num_edges])`` source id (within ``src``) and target
        id (within ``dst``) of every edge."""
        ids = torch.cat([self.src_global_id, self.plan.halo_global_id.to(self.device)])
        return ids[self.col], self.global_id[self.row()]

    def _restrict(self, halo_mask: Tensor) -> tuple[DistEdgeIndex, Tensor]:
        remote = self.col >= self.num_src
        keep = ~remote
        keep[remote] = halo_mask[self.col[remote] - self.num_src]
        rowptr = ptr_from_sorted(self.row()[keep], self.num_owned)
        sub = DistRelationIndex(rowptr, self.col[keep], self.edge_id[keep], self.halo_in_degree,
                                self.halo_self_loops, self.channel, self.global_id,
                                self.src_global_id, self.edge_type, self.registry)
        return sub, keep

    def keep_edges(self, keep: Tensor, name: str = "keep_edges") -> DistEdgeIndex:
        raise NotImplementedError(
            f"'DistRelationIndex' of {self.edge_type} cannot drop edges yet; use dropout on "
            f"the features instead of dropout_edge on a DistHeteroData")

    def pre_aggregated(self, key: Any, rowptr: Tensor, col: Tensor,
                       value: Tensor) -> tuple[DistEdgeIndex, Tensor]:
        raise NotImplementedError(
            f"'DistRelationIndex' of {self.edge_type} exchanges rows, not partial sums; "
            f"leave pre_aggregate off on a DistHeteroData")

    def to(self, device: torch.device | str) -> DistRelationIndex:
        """This relation on ``device``."""
        channel = HaloChannel(self.channel.plan.to(device), self.channel.ledger,
                              self.channel.group, self.channel.transport,
                              _tags=self.channel._tags, shared=self.channel.shared)
        return DistRelationIndex(
            self.rowptr.to(device), self.col.to(device), self.edge_id.to(device),
            self.halo_in_degree.to(device), self.halo_self_loops.to(device), channel,
            self.global_id.to(device), self.src_global_id.to(device), self.edge_type,
            self.registry)

    def __repr__(self) -> str:
        return (f"DistRelationIndex({self.edge_type}, rank={self.plan.rank}/"
                f"{self.plan.world_size}, num_src={self.num_src}, num_owned={self.num_owned}, "
                f"num_halo={self.num_halo}, num_edges={self.num_edges})")


class _Store:
    """Attributes of one node or edge type, read as ``data[type].key``.

    Args:
        key (str or tuple[str, str, str]): The type.
        attrs (dict[str, Any]): Its attributes by name.
    """

    _kind = "type"

    def __init__(self, key: Any, attrs: dict[str, Any]) -> None:
        self._key = key
        self._keys = list(attrs)
        for name, value in attrs.items():
            setattr(self, name, value)

    def keys(self) -> list[str]:
        return list(self._keys)

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        raise AttributeError(f"'DistHeteroData[{self._key!r}]' has no attribute '{key}'; this "
                             f"{self._kind} holds {', '.join(self._keys)}")

    def __repr__(self) -> str:
        shapes = [f"{k}={list(v.shape)}" if isinstance(v, Tensor) else f"{k}={v!r}"
                  for k, v in ((k, getattr(self, k)) for k in self._keys)]
        return f"{type(self).__name__}({', '.join(shapes)})"


class NodePart(_Store):
    """One node type's owned rows on a rank: ``global_id`` (id within the
    type), ``num_nodes`` and every node-level attribute of the type (``x``,
    ``y``, masks, ...), a row per owned node.

    Args:
        key (str): The node type.
        attrs (dict[str, Any]): Its attributes by name.
    """

    _kind = "node type"


class EdgePart(_Store):
    """One edge type on a rank: ``edge_index`` (a
    :class:`~pyg_dist.data.hetero_data.DistRelationIndex`) and every edge-level
    attribute, a row per local edge (in the order of ``edge_index.col``).

    Args:
        key (tuple[str, str, str]): The edge type.
        attrs (dict[str, Any]): ``edge_index`` and the edge-level attributes.
    """

    _kind = "edge type"


class TypeDict(dict):
    """``{type: value}`` of one attribute over the types that have it
    (``DistHeteroData.collect``); a missing type raises a
    :class:`KeyError` that says why and what to do, also through
    ``get`` (which :func:`~torch_geometric.nn.to_hetero` models call for
    every type of their metadata: a missing type is an error there).

    Args:
        key (str): The attribute collected (``"x"``, ``"edge_index"``, ...).
        data (DistHeteroData): The graph it was collected from.
        values (dict): ``{type: value}``.
    """

    def __init__(self, key: str, data: DistHeteroData, values: dict[Any, Any]) -> None:
        super().__init__(values)
        self._attr, self._data = key, data

    def get(self, t: Any, default: Any = None) -> Any:  # noqa: D102 - see the class
        return self[t]

    def __missing__(self, t: Any) -> Any:
        data = self._data
        if t in data.node_types or t in data.edge_types:
            fix = (f"give every node type a '{self._attr}' before partitioning (e.g. "
                   f"data[{t!r}].x = torch.randn(num_nodes, F), or learn one with "
                   f"torch.nn.Embedding and pass it in x_dict)"
                   if t in data.node_types else "partition a HeteroData that has it")
            raise KeyError(f"'DistHeteroData[{t!r}]' has no '{self._attr}'; {fix}")
        raise KeyError(
            f"'DistHeteroData' has no type {t!r}; the model was built for other metadata "
            f"than this folder's (node types {data.node_types}, edge types "
            f"{data.edge_types}): build it with to_hetero(model, data.metadata())")


class DistHeteroData:
    r"""One rank's part of a partitioned heterogeneous graph, loaded by
    :meth:`pyg_dist.DistHeteroData.load`; read it as a :class:`~torch_geometric.data.HeteroData`:
    ``data["paper"].x`` (owned ``paper`` rows), ``data["paper"].global_id``
    (their ids within ``paper`` in the partitioned graph),
    ``data["author", "writes", "paper"].edge_index`` (a
    :class:`~pyg_dist.data.hetero_data.DistRelationIndex`), ``metadata()``, ``x_dict``,
    ``edge_index_dict``.

    Every node type has one halo plan: the union over the edge types that
    read the type of their remote sources, so that the relations of one layer
    that read the same source type share one exchange of its rows.

    Args:
        nodes (dict[str, NodePart]): The node types' parts.
        edges (dict[tuple[str, str, str], EdgePart]): The edge types' parts.
        meta (PartitionMeta): The folder's metadata.
        rank (int): This rank.
        folder (str or os.PathLike, optional): The partition folder.
            (default: :obj:`None`)
        channels (dict[str, HaloChannel], optional): Each node type's halo
            channel. (default: :obj:`None`)
        node_plans (dict[str, dict[str, torch.Tensor]], optional): Each node
            type's halo plan as stored. (default: :obj:`None`)
        registry (HaloRegistry, optional): Halo policies and state of every
            relation. (default: :obj:`None`, a new one)
        group (torch.distributed.ProcessGroup, optional): The process group.
            (default: :obj:`None`, the default group)
    """

    def __init__(self, nodes: dict[str, NodePart], edges: dict[EdgeType, EdgePart],
                 meta: PartitionMeta, rank: int, folder: str | os.PathLike | None = None,
                 channels: dict[str, HaloChannel] | None = None,
                 node_plans: dict[str, dict[str, Tensor]] | None = None,
                 registry: HaloRegistry | None = None, group: Any = None) -> None:
        self._nodes, self._edges = nodes, edges
        self.meta, self.rank, self.world_size = meta, rank, meta.num_parts
        self.folder = None if folder is None else Path(folder)
        self._channels = channels or {}
        self._node_plans = node_plans or {}
        self.registry = registry if registry is not None else HaloRegistry()
        self.group = group

    def channel(self, node_type: str) -> HaloChannel:
        """The halo channel of ``node_type`` (its plan, shared by every edge
        type that reads the type)."""
        return self._channels[node_type]

    def node_plan(self, node_type: str) -> dict[str, Tensor]:
        """``node_type``'s halo plan as stored (``global_id``, ``halo_global_id``,
        ``halo_ptr``, ``send_idx``, ``send_ptr``, ``halo_in_degree`` and
        ``halo_self_loops`` over every edge type)."""
        return self._node_plans[node_type]

    def to_homogeneous(self) -> DistData:
        """This part as one homogeneous :class:`~pyg_dist.DistData`, as
        :meth:`torch_geometric.data.HeteroData.to_homogeneous` makes the whole graph (see
        ``pyg_dist.data.hetero_view.homogeneous_view``): for models over all
        types at once, such as :class:`~torch_geometric.nn.RGCNConv`."""
        return homogeneous_view(self)

    @property
    def node_types(self) -> list[str]:
        return list(self._nodes)

    @property
    def edge_types(self) -> list[EdgeType]:
        return list(self._edges)

    def metadata(self) -> tuple[list[str], list[EdgeType]]:
        """``(node_types, edge_types)``, as
        :meth:`torch_geometric.data.HeteroData.metadata` gives them."""
        return self.node_types, self.edge_types

    def __getitem__(self, key: str | tuple) -> NodePart | EdgePart:
        if isinstance(key, str) and key in self._nodes:
            return self._nodes[key]
        if isinstance(key, tuple) and tuple(key) in self._edges:
            return self._edges[tuple(key)]  # type: ignore[index]
        matches = [e for e in self._edges if isinstance(key, tuple) and len(key) == 2
                   and (e[0], e[2]) == key]
        if len(matches) == 1:
            return self._edges[matches[0]]
        raise KeyError(f"'DistHeteroData' has no type {key!r}; node types "
                       f"{self.node_types}, edge types {self.edge_types}")

    def collect(self, key: str) -> TypeDict:
        """``{type: data[type].key}`` over the node and edge types that have
        ``key``; asking it for a type without ``key`` raises an error that
        names the fix."""
        stores: list[tuple[Any, _Store]] = [*self._nodes.items(), *self._edges.items()]
        return TypeDict(key, self, {t: getattr(s, key) for t, s in stores if key in s.keys()})

    def labelled_type(self) -> str:
        """The node type with labels ``y`` (ogbn-mag's ``paper``); raises,
        naming the fix, when no type or several have them."""
        labelled = [t for t in self.node_types if "y" in self._nodes[t].keys()]
        if len(labelled) != 1:
            raise ValueError(
                f"'DistHeteroData' needs one node type with labels y to train on (found "
                f"{labelled or 'none'} among {self.node_types}); set data[node_type].y on "
                f"exactly one type of the HeteroData and partition it again")
        return labelled[0]

    @property
    def x_dict(self) -> TypeDict:
        return self.collect("x")

    @property
    def y_dict(self) -> TypeDict:
        return self.collect("y")

    @property
    def edge_index_dict(self) -> TypeDict:
        return self.collect("edge_index")

    @property
    def ledger(self) -> Ledger:
        """The ledger every node type's exchanges are booked in."""
        return next(iter(self._edges.values())).edge_index.ledger if self._edges else Ledger()

    def __repr__(self) -> str:
        lines = [f"DistHeteroData(rank={self.rank}/{self.world_size},"]
        lines += [f"  {t}={s}," for t, s in self._nodes.items()]
        lines += [f"  {t}={s}," for t, s in self._edges.items()]
        return "\n".join(lines) + "\n)"

    @classmethod
    def load(cls, out_dir: str | os.PathLike, rank: int | None = None, group: Any = None,
             halo: HaloPolicy | None = None) -> DistHeteroData:
        r"""Loads this rank's part of the heterogeneous partition folder
        ``out_dir`` (written by :func:`pyg_dist.partition` from a
        :class:`~torch_geometric.data.HeteroData`), and only it.

        Args:
            out_dir (str or os.PathLike): The partition folder.
            rank (int, optional): The part to load; defaults to this process's
                rank. (default: :obj:`None`)
            group (torch.distributed.ProcessGroup, optional): The group whose
                ranks hold the parts. (default: the default group)
            halo (HaloPolicy, optional): Default halo policy of the layers
                that set none. (default: :obj:`None`, exact)
        """
        meta, rank, content = _read(out_dir, rank, group)
        if meta.types is None:
            raise ValueError(f"'{out_dir}' holds a homogeneous graph; load it with "
                             f"pyg_dist.DistData.load('{out_dir}')")
        _check_same_partitioning(meta, group)
        ledger, registry = Ledger(), HaloRegistry(halo)
        tags: dict[str, int] = {}
        channels, nodes, plans = {}, {}, {}
        for t in meta.types.node_types:
            part = content["node_types"][t]
            graph = plans[t] = part["graph"]
            plan = HaloPlan.from_pointers(rank, graph["send_idx"], graph["send_ptr"],
                                          graph["halo_ptr"], graph["halo_global_id"],
                                          graph["global_id"])
            relations = [edge_key(e) for e in meta.types.edge_types if e[0] == t]
            channels[t] = HaloChannel(plan, ledger, group, _tags=tags,
                                      shared=SharedExchange(t, relations))
            nodes[t] = NodePart(t, {**part["attrs"], "global_id": graph["global_id"],
                                    "num_nodes": graph["global_id"].numel()})
        edges = {}
        for src, rel, dst in meta.types.edge_types:
            e = (src, rel, dst)
            part = content["edge_types"][edge_key(e)]
            g = part["graph"]
            index = DistRelationIndex(g["rowptr"], g["col"], g["edge_id"], g["halo_in_degree"],
                                      g["halo_self_loops"], channels[src],
                                      nodes[dst].global_id, nodes[src].global_id, e, registry)
            edges[e] = EdgePart(e, {"edge_index": index, **part["attrs"]})
        return cls(nodes, edges, meta, rank, out_dir, channels, plans, registry, group)

    def to(self, device: torch.device | str) -> DistHeteroData:
        """Moves every tensor to ``device`` (in place) and returns ``self``."""
        for store in [*self._nodes.values(), *self._edges.values()]:
            for key in store.keys():
                value = getattr(store, key)
                if hasattr(value, "to"):
                    setattr(store, key, value.to(device))
        return self
