"""What the distributed path of a layer can run, checked when a
:class:`~pyg_dist.DistEdgeIndex` arrives (with a plain ``edge_index`` the Dist
layers are PyG's and take every option PyG takes)."""
from __future__ import annotations

from typing import Any

from torch import Tensor

from pyg_dist.halo import HaloPolicy
from pyg_dist.nn.drift import watch

__all__ = ["check_distributed", "halo_repr"]


def check_distributed(layer: Any, x: Any, reductions: tuple[str, ...] | None = None) -> None:
    """Raises for options of ``layer`` (a MessagePassing layer) that its
    distributed path cannot honour; ``reductions``: the aggregations it runs
    (:obj:`None`: any). A layer that trains is watched for gradients left
    unsummed (:mod:`pyg_dist.nn.drift`)."""
    name = type(layer).__name__
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], Tensor) \
            and (x[1] is None or isinstance(x[1], Tensor)):
        x = x[0]  # bipartite (x_src, x_dst): sources are what the halo holds
    if not isinstance(x, Tensor):
        raise ValueError(
            f"'{name}' takes a feature tensor or a pair (x_src, x_dst) on a DistEdgeIndex "
            f"(got {type(x).__name__})"
        )
    if layer.flow != "source_to_target":
        raise ValueError(
            f"'{name}' runs distributed with flow='source_to_target' only (got "
            f"flow='{layer.flow}'); reverse the edges (edge_index.flip(0)) before partitioning "
            f"instead"
        )
    if layer.node_dim not in (-2, 0) or x.dim() != 2:
        raise ValueError(
            f"'{name}' runs distributed on [num_nodes, features] inputs with node_dim=-2 (or 0) "
            f"(got node_dim={layer.node_dim} and x of shape {tuple(x.shape)}); put nodes in the "
            f"first dimension of x"
        )
    if reductions is not None and (not isinstance(layer.aggr, str)
                                   or layer.aggr not in reductions):
        raise ValueError(
            f"'{name}' runs distributed with aggr in {', '.join(repr(a) for a in reductions)} "
            f"(got {layer.aggr!r}); use one of those on a DistEdgeIndex, or the layer on a plain "
            f"edge_index in one process"
        )
    watch(layer)


def halo_repr(policy: HaloPolicy | None) -> str:
    """``, halo=<policy>`` for a layer's __repr__, or nothing for the default."""
    return "" if policy is None else f", halo={policy!r}"
