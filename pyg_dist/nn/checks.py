"""Argument checks shared by the Dist layers: what the distributed path supports."""
from __future__ import annotations

from typing import Any

__all__ = ["check_message_passing_kwargs", "halo_repr"]


def check_message_passing_kwargs(
    layer: str, kwargs: dict[str, Any], aggrs: tuple[str, ...]
) -> None:
    """Raises for MessagePassing options the distributed path cannot honour."""
    flow = kwargs.get("flow", "source_to_target")
    if flow != "source_to_target":
        raise ValueError(
            f"'{layer}' supports flow='source_to_target' only (got flow='{flow}'); reverse "
            f"the edges (edge_index.flip(0)) before partitioning instead"
        )
    aggr = kwargs.get("aggr", aggrs[0])
    if not isinstance(aggr, str) or aggr not in aggrs:
        raise ValueError(
            f"'{layer}' supports aggr in {', '.join(repr(a) for a in aggrs)} (got {aggr!r}); "
            f"use torch_geometric.nn's layer on a single process for other aggregations"
        )
    node_dim = kwargs.get("node_dim", -2)
    if node_dim not in (-2, 0):
        raise ValueError(
            f"'{layer}' supports node_dim=-2 (or 0) only (got node_dim={node_dim}); put nodes "
            f"in the first dimension of x"
        )
    if kwargs.get("decomposed_layers", 1) != 1:
        raise ValueError(f"'{layer}' supports decomposed_layers=1 only")


def halo_repr(policy: Any) -> str:
    """``, halo=<policy>`` for a layer's __repr__, or nothing for the default."""
    return "" if policy is None else f", halo={policy!r}"
