"""One halo exchange per node type and input, shared by the relations of a
heterogeneous layer that read the same source type.

Under :func:`torch_geometric.nn.to_hetero` (or a
:class:`~torch_geometric.nn.HeteroConv`) a layer runs one convolution per
edge type; every edge type with source type ``s`` reads the same
``x_dict[s]`` and, on a :class:`~pyg_dist.DistHeteroData`, the same halo of
``s`` (the union over those edge types). ``SharedExchange`` makes the
first relation's exchange serve the others: keyed by the input tensor (its
identity and version), it hands a relation the rows fetched for the same
input unless that relation already took them (then a new forward has
begun). Autograd sums the relations' gradients of the shared rows, so
backward is one exchange too.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

__all__ = ["SharedExchange", "shared_key"]


@dataclass
class _Entry:
    source: weakref.ref
    version: int
    rows: Tensor
    users: set[str] = field(default_factory=set)


class SharedExchange:
    """The exchanges of one node type's halo, shared by the relations that
    read it. Holds the rows fetched for an input while the input lives (it
    is held by weak reference; its entry goes when it does), so relations
    whose layers keep nothing of the rows for backward still share them.

    Args:
        node_type (str): The node type whose halo the channel moves.
        relations (list[str]): The ledger-name suffixes of the relations
            reading it (``"src__rel__dst"``): a relation layer named
            ``"conv1.src__rel__dst"`` books the shared exchange as
            ``"conv1[src]"``.
    """

    def __init__(self, node_type: str, relations: list[str]) -> None:
        self.node_type = node_type
        self.relations = list(relations)
        self._entries: dict[tuple[int, str], _Entry] = {}

    def ledger_name(self, layer: str) -> str:
        """The ledger name of the exchange a relation layer named ``layer``
        starts: its module path without the relation, then the node type."""
        for relation in self.relations:
            if layer.endswith("." + relation):
                layer = layer[: -len(relation) - 1]
                break
        return f"{layer}[{self.node_type}]"

    def lookup(self, x: Tensor, layer: str, key: str) -> Tensor | None:
        """The rows fetched for ``x`` (under ``key``: direction and codec) in
        this forward, if another relation fetched them; :obj:`None` if not."""
        entry = self._entries.get((id(x), key))
        if entry is None or entry.source() is not x or entry.version != x._version \
                or layer in entry.users:
            return None
        entry.users.add(layer)
        return entry.rows

    def remember(self, x: Tensor, layer: str, key: str, rows: Tensor) -> None:
        """Records ``rows``, fetched for ``x`` by ``layer``, for the other relations."""
        entries, slot = self._entries, (id(x), key)

        def forget(_: weakref.ref) -> None:
            entry = entries.get(slot)
            if entry is not None and entry.source() is None:
                del entries[slot]

        entries[slot] = _Entry(weakref.ref(x, forget), x._version, rows, {layer})

    def __repr__(self) -> str:
        return f"SharedExchange({self.node_type!r}, relations={self.relations})"


def shared_key(direction: str, codec: Any) -> str:
    """What besides the input decides the rows: the direction and the codec."""
    return f"{direction}|{getattr(codec, 'name', None)}"
