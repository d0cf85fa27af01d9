r"""Which layer calls run pre-aggregated, and the graphs they run on.

A layer whose aggregation is linear with fixed coefficients
(:math:`\mathbf{h}_t = \sum_s c_{s,t}\,\mathbf{x}_s`) can exchange partial
sums on a minimum vertex cover instead of halo rows
(:meth:`~pyg_dist.DistEdgeIndex.pre_aggregated`, :mod:`pyg_dist.halo.cover`).
A layer's ``pre_aggregate`` (:obj:`None`: the graph's, from
``DistData.load(..., pre_aggregate=True)``) switches it on. Where it cannot
apply (attention, max or min, weights that require grad, message functions
of the inputs, the ``sampled`` policy) a layer that asks for it itself
raises, naming the fix; the graph's default falls back to rows there. Under
``isolated`` nothing crosses, and the layer runs as without pre-aggregation.
An input that :func:`~pyg_dist.nn.dropout` made from a grad-free input
(layer 0's features) keeps exchanging rows: their halo is fetched once and
the shared mask applied to it, which partial sums of the dropped rows cannot
do, so rows cost nothing after the first step there.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from pyg_dist.data.dist_data import DistEdgeIndex
from pyg_dist.halo import Exact, HaloRows, Isolated, Sampled
from pyg_dist.ops.csr import csr_row
from pyg_dist.utils.dropout import dropped_input

__all__ = ["pre_aggregates", "pre_aggregated", "sum_pre_aggregated", "owned_only",
           "weights_reason"]


def pre_aggregates(layer: Any, edge_index: DistEdgeIndex, reason: str | None,
                   x: Any = None) -> bool:
    """Whether this call of ``layer`` runs on the pre-aggregated graph: its
    own ``pre_aggregate``, else the graph's.

    Args:
        layer (Any): The Dist layer (its ``pre_aggregate``, ``halo`` and
            ``training``).
        edge_index (DistEdgeIndex): The graph.
        reason (str, optional): Why this call's aggregation cannot be
            pre-aggregated; :obj:`None` when it can.
        x (Any, optional): The input whose halo the call exchanges; one
            dropped out from a grad-free input keeps its cached rows.
            (default: :obj:`None`)

    Raises:
        ValueError: If the layer asks for pre-aggregation itself and
            ``reason`` is set, or its policy samples the halo.
    """
    own = getattr(layer, "pre_aggregate", None)
    if not (edge_index.pre_aggregate if own is None else own):
        return False
    name = type(layer).__name__
    registry = edge_index.registry
    policy = (registry.policy(layer.halo) if layer.training
              else registry.eval_default or Exact())
    if reason is None and isinstance(policy, Sampled):
        reason = "the 'sampled' policy samples halo nodes, and partial sums are not nodes"
    if reason is not None:
        if own:
            raise ValueError(f"'{name}' cannot pre-aggregate: {reason}; pass "
                             f"pre_aggregate=False (or None) to '{name}' to exchange rows")
        return False  # the graph's default: rows where it cannot apply
    if isinstance(policy, Isolated):  # nothing crosses anyway
        return False
    dropped = dropped_input(x, edge_index) if isinstance(x, Tensor) else None
    return dropped is None or dropped.source.requires_grad


def weights_reason(edge_weight: Tensor | None) -> str | None:
    """Why edge weights prevent pre-aggregation (they require grad), or
    :obj:`None`.

    Args:
        edge_weight (torch.Tensor, optional): The layer call's edge weights.
    """
    if edge_weight is not None and edge_weight.requires_grad:
        return ("its edge weights require grad, and partial sums are made from fixed "
                "coefficients (detach them)")
    return None


def pre_aggregated(edge_index: DistEdgeIndex, key: tuple[Any, ...], edge_weight: Tensor | None,
                   adjacency: Callable[[], tuple[Tensor, Tensor, Tensor]]
                   ) -> tuple[DistEdgeIndex, Tensor]:
    """The pre-aggregated graph of ``edge_index`` for the coefficients named
    by ``key`` and ``adjacency()`` (``(rowptr, col, value)`` over ``[owned ;
    halo]``, reduce ``"sum"``), and its coefficients; built once per graph
    and key, again when ``edge_weight``'s values change (collective then).

    Args:
        edge_index (DistEdgeIndex): The plain graph.
        key (tuple): Names the aggregation and its options.
        edge_weight (torch.Tensor, optional): The weights the coefficients
            were made from (their values are compared each call).
        adjacency (Callable): Makes the coefficients' adjacency.
    """
    store = edge_index.cached(("pre_aggregate_weights", key), dict)
    known = store.get("weights")
    if edge_weight is not None and (known is None or known.shape != edge_weight.shape
                                    or not torch.equal(known, edge_weight)):
        store["weights"] = edge_weight.detach().clone()
        store["version"] = store.get("version", -1) + 1
    return edge_index.pre_aggregated((*key, store.get("version", 0)), *adjacency())


def sum_pre_aggregated(edge_index: DistEdgeIndex, reduce: str = "sum",
                       edge_weight: Tensor | None = None) -> tuple[DistEdgeIndex, Tensor]:
    """The pre-aggregated graph of the sum or (weighted) mean over
    ``edge_index`` and its coefficients (cached per graph and weights).

    Args:
        edge_index (DistEdgeIndex): The plain graph.
        reduce (str, optional): ``"sum"`` or ``"mean"``. (default: :obj:`"sum"`)
        edge_weight (torch.Tensor, optional): Fixed edge weights.
            (default: :obj:`None`)
    """
    def adjacency() -> tuple[Tensor, Tensor, Tensor]:
        rowptr, col = edge_index.rowptr, edge_index.col
        value = (edge_weight.detach().double() if edge_weight is not None
                 else torch.ones(col.numel(), dtype=torch.float64, device=col.device))
        if reduce == "mean":
            row = csr_row(rowptr, col)
            total = value.new_zeros(edge_index.num_owned).index_add_(0, row, value)
            value = value / total.clamp(min=torch.finfo(value.dtype).tiny)[row]
        return rowptr, col, value

    key = (reduce, edge_weight is None)
    return pre_aggregated(edge_index, key, edge_weight, adjacency)


def owned_only(fetched: HaloRows, edge_index: DistEdgeIndex) -> HaloRows:
    """The halo of the plain graph that a policy which isolated a
    pre-aggregated layer (mask all :obj:`False`, as :class:`~pyg_dist.halo.Auto`
    does on graphs with few remote neighbours) stands for: no rows at all.

    Args:
        fetched (HaloRows): What the policy returned on the pre-aggregated graph.
        edge_index (DistEdgeIndex): The plain graph.
    """
    assert fetched.mask is not None and not bool(fetched.mask.any()), (
        "a pre-aggregated layer's policy either keeps every halo row or none")
    rows = fetched.rows.new_zeros(edge_index.num_halo, *fetched.rows.shape[1:])
    mask = torch.zeros(edge_index.num_halo, dtype=torch.bool, device=rows.device)
    return HaloRows(rows, mask, remote=False)
