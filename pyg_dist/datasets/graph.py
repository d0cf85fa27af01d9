"""A PyG graph given as input, checked: its ``edge_index`` and node count,
its node- and edge-level attributes, their values finite. Shared by
:func:`pyg_dist.partition` and the graph folders' writer."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["check_graph", "attributes", "check_finite", "num_classes", "is_hetero", "is_mask",
           "edge_key", "type_sizes", "check_relation"]

#: Entries per block of a finiteness check (8 MB of float64).
CHUNK = 1 << 20


def is_hetero(data: Any) -> bool:
    """Whether ``data`` is a heterogeneous graph (has ``node_types`` and ``edge_types``)."""
    return hasattr(data, "node_types") and hasattr(data, "edge_types")


def is_mask(value: Any) -> bool:
    """Whether ``value`` is a 1-d boolean tensor (a node mask such as ``train_mask``)."""
    return isinstance(value, Tensor) and value.dtype == torch.bool and value.dim() == 1


def edge_key(edge_type: tuple[str, str, str] | list[str]) -> str:
    """The name of an edge type in a folder: ``"src__rel__dst"`` (as PyG spells it)."""
    return "__".join(edge_type)


def type_sizes(data: Any, caller: str = "partition") -> dict[str, int]:
    """The node count of every node type of the ``HeteroData`` ``data``;
    errors name ``caller`` and the fix."""
    sizes = {}
    for t in data.node_types:
        num = data[t].num_nodes
        if num is None:
            raise ValueError(f"'{caller}' cannot tell how many '{t}' nodes there are; set "
                             f"data['{t}'].num_nodes or give the type a node-level tensor "
                             f"such as x")
        sizes[t] = int(num)
    return sizes


def check_relation(data: Any, e: tuple[str, str, str], sizes: dict[str, int],
                   caller: str = "partition") -> Tensor:
    """Relation ``e``'s ``edge_index`` (int32 or int64 as given, on the CPU,
    contiguous) after checking its shape and that its ids lie within their
    node types; errors name ``caller`` and the fix."""
    edge_index = getattr(data[e], "edge_index", None)
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2 \
            or edge_index.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"'{caller}' needs data[{e!r}].edge_index as an int32 or int64 tensor "
                         f"of shape [2, num_edges]; convert a SparseTensor with "
                         f"torch_geometric.utils.to_edge_index")
    edge_index = edge_index.detach().cpu().contiguous()
    for end, t in (("source", e[0]), ("target", e[2])):
        if t not in sizes:
            raise ValueError(f"'{caller}' found relation {e!r} whose {end} type '{t}' is no node "
                             f"type of the graph ({', '.join(sizes)}); give it nodes "
                             f"(data['{t}'].num_nodes = N, or a node-level tensor such as x) "
                             f"or delete the relation (del data[{e!r}])")
    for row, t in ((0, e[0]), (1, e[2])):
        ids = edge_index[row]
        if ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < sizes[t]:
            raise ValueError(f"'{caller}' found {('source', 'target')[row]} ids of relation "
                             f"{e!r} outside [0, {sizes[t]}) of node type '{t}'; set "
                             f"data['{t}'].num_nodes to the true count or fix the edge list")
    return edge_index


def num_classes(y: Tensor | None) -> int | None:
    """``max(y) + 1`` for integer labels of one class per node, else :obj:`None`."""
    if y is None or y.dim() != 1 or y.is_floating_point() or y.dtype == torch.bool:
        return None
    return int(y.max()) + 1 if y.numel() else 0


def check_graph(data: Any, caller: str = "partition") -> tuple[Tensor, int]:
    """``data.edge_index`` (int64, on the CPU, contiguous) and the number of
    nodes, after checking both; errors name ``caller`` and the fix."""
    edge_index = getattr(data, "edge_index", None)
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(
            f"'{caller}' needs 'data.edge_index' as a LongTensor of shape [2, num_edges] "
            f"(got {type(edge_index).__name__}"
            f"{'' if not isinstance(edge_index, Tensor) else tuple(edge_index.shape)}); "
            "convert a SparseTensor with torch_geometric.utils.to_edge_index"
        )
    if edge_index.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"'{caller}' needs an integer 'edge_index' (got {edge_index.dtype})")
    edge_index = edge_index.detach().to("cpu", torch.long).contiguous()
    num_nodes = getattr(data, "num_nodes", None)
    if num_nodes is None:
        num_nodes = int(edge_index.max()) + 1 if edge_index.numel() else 0
    num_nodes = int(num_nodes)
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise ValueError(
            f"'{caller}' found node ids outside [0, {num_nodes}) in 'edge_index'; set "
            f"'data.num_nodes' to the true number of nodes or fix the edge list"
        )
    return edge_index, num_nodes


def attributes(
    data: Any, num_nodes: int, num_edges: int
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Node- and edge-level tensors of ``data`` (PyG's own classification when
    available, else by leading dimension)."""
    node, edge = {}, {}
    keys = data.keys() if callable(getattr(data, "keys", None)) else list(vars(data))
    for key in keys:
        value = getattr(data, key, None)
        if key in ("edge_index", "num_nodes") or not isinstance(value, Tensor) or value.dim() == 0:
            continue
        value = value.detach().cpu()
        is_node = data.is_node_attr(key) if hasattr(data, "is_node_attr") else None
        is_edge = data.is_edge_attr(key) if hasattr(data, "is_edge_attr") else None
        if is_node is None:
            is_node, is_edge = value.size(0) == num_nodes, value.size(0) == num_edges
        if is_node and value.size(0) == num_nodes:
            node[key] = value
        elif is_edge and value.size(0) == num_edges:
            edge[key] = value
    return node, edge


def check_finite(node_attrs: dict[str, Tensor], edge_attrs: dict[str, Tensor],
                 caller: str = "partition") -> None:
    """Raises :class:`ValueError` naming the rows of a floating attribute that
    hold NaN or infinite values."""
    for kind, attrs in (("node", node_attrs), ("edge", edge_attrs)):
        for key, value in attrs.items():
            if value.is_floating_point() and not _all_finite(value):
                bad = (~torch.isfinite(value)).reshape(value.size(0), -1).any(dim=1)
                rows = bad.nonzero().view(-1)
                raise ValueError(
                    f"'{caller}' found NaN or infinite values in {kind} attribute '{key}' "
                    f"({rows.numel()} rows, first {rows[:5].tolist()}); clean or impute them "
                    f"(e.g. torch.nan_to_num) first"
                )


def _all_finite(value: Tensor) -> bool:
    """Whether every entry is finite: a float64 sum is finite exactly then (no
    float32 or narrower sum overflows it); otherwise checked a block at a time."""
    if bool(torch.isfinite(value.sum(dtype=torch.float64))):
        return True
    rows = max(1, CHUNK // max(value[0].numel(), 1)) if value.size(0) else 1
    return all(bool(torch.isfinite(block).all()) for block in value.split(rows))
