"""GCN normalisation on a rank's local graph, equal to PyG's ``gcn_norm`` on the
whole graph.

PyG normalises edge ``j -> i`` by :math:`\\hat{d}_j^{-1/2} e_{j,i} \\hat{d}_i^{-1/2}`
where :math:`\\hat{d}` is the in-degree after self-loops were replaced by one
loop per node (``add_remaining_self_loops``). Every in-edge of an owned node is
local, so owned degrees are computed here; a halo node's degree comes from the
partition (unweighted graphs) or from its owner: through one exchange per graph
for fixed edge weights, every call (differentiably) for weights that require grad.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pyg_dist.data.dist_data import DistEdgeIndex
from pyg_dist.halo import HaloRows, LayerHalo
from pyg_dist.halo.exchange import exchange_halo
from pyg_dist.ops.csr import csr_row, ptr_from_sorted

__all__ = [
    "gcn_adjacency",
    "dist_gcn_norm",
    "owned_degree",
    "halo_degree",
    "self_loop_structure",
]


def self_loop_structure(edge_index: DistEdgeIndex) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The local CSR with existing self-loops removed and one loop appended to
    every row, cached per graph.

    Returns ``(rowptr, col, source, last_loop)``: ``source[e]`` is the original
    local edge of entry ``e`` or ``-1`` for an added loop; ``last_loop[i]`` is the
    last original self-loop edge of row ``i`` or ``-1``.
    """

    def build() -> tuple[Tensor, Tensor, Tensor, Tensor]:
        row, col = edge_index.row(), edge_index.col
        num_owned, device = edge_index.num_owned, col.device
        loop = col == row
        position = torch.arange(col.numel(), device=device)
        last_loop = torch.full((num_owned,), -1, dtype=torch.long, device=device)
        last_loop.scatter_reduce_(0, row[loop], position[loop], reduce="amax")
        nodes = torch.arange(num_owned, device=device)
        new_row = torch.cat([row[~loop], nodes])
        new_col = torch.cat([col[~loop], nodes])
        source = torch.cat([position[~loop], torch.full_like(nodes, -1)])
        order = torch.sort(new_row, stable=True).indices  # loop last in its row
        return ptr_from_sorted(new_row[order], num_owned), new_col[order], source[order], last_loop

    return edge_index.cached("self_loops", build)


def dist_gcn_norm(
    edge_index: DistEdgeIndex,
    edge_weight: Tensor | None,
    improved: bool,
    add_self_loops: bool,
    dtype: torch.dtype,
    deg_halo: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(rowptr, col, value)`` of the normalised local adjacency :math:`\\hat{D}^{-1/2}
    \\hat{A} \\hat{D}^{-1/2}` restricted to this rank's rows, given the degrees
    of the halo nodes ``deg_halo`` (``[num_halo]``, see :func:`halo_degree`)."""
    rowptr, col, weight, deg_owned = owned_degree(edge_index, edge_weight, improved,
                                                  add_self_loops, dtype)
    deg_inv_sqrt = torch.cat([deg_owned, deg_halo.to(deg_owned.dtype)]).pow(-0.5)
    deg_inv_sqrt = deg_inv_sqrt.masked_fill(torch.isinf(deg_inv_sqrt), 0.0)
    value = deg_inv_sqrt[csr_row(rowptr, col)] * weight * deg_inv_sqrt[col]
    return rowptr, col, value


def owned_degree(
    edge_index: DistEdgeIndex,
    edge_weight: Tensor | None,
    improved: bool,
    add_self_loops: bool,
    dtype: torch.dtype,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The adjacency GCN aggregates over (with self-loops replaced, if asked)
    and the degree of every owned node: ``(rowptr, col, weight, deg_owned)``."""
    fill = 2.0 if improved else 1.0
    device = edge_index.col.device
    if add_self_loops:
        rowptr, col, source, last_loop = self_loop_structure(edge_index)
        weight = torch.full((col.numel(),), fill, dtype=dtype, device=device)
        if edge_weight is not None:
            # Original weights, with the fill value appended for "no edge" (-1).
            padded = torch.cat([edge_weight, edge_weight.new_full((1,), fill)])
            loop_weight = padded[last_loop]  # existing loop's weight, else fill
            weight = torch.where(source >= 0, padded[source], loop_weight[csr_row(rowptr, col)])
    else:
        rowptr, col = edge_index.rowptr, edge_index.col
        weight = (
            edge_weight
            if edge_weight is not None
            else torch.ones(col.numel(), dtype=dtype, device=device)
        )
    deg_owned = torch.zeros(edge_index.num_owned, dtype=weight.dtype, device=device)
    deg_owned = deg_owned.index_add(0, csr_row(rowptr, col), weight)
    return rowptr, col, weight, deg_owned


def halo_degree(
    edge_index: DistEdgeIndex,
    edge_weight: Tensor | None,
    improved: bool,
    add_self_loops: bool,
    dtype: torch.dtype,
    halo: LayerHalo | None,
) -> Tensor:
    """Whole-graph degrees of the halo nodes (``[num_halo]``): from the
    partition for unweighted graphs; for weighted ones from their owners, in
    one exchange per graph booked as ``degree`` in the ledger (weights that
    require grad: every call, differentiably, as ``<layer>/degree``).
    ``halo`` :obj:`None` (weights without grad only): books it forward."""
    if edge_weight is None:
        deg = edge_index.halo_in_degree.to(dtype)
        if add_self_loops:
            deg = deg - edge_index.halo_self_loops.to(dtype) + (2.0 if improved else 1.0)
        return deg

    def exchange(name: str) -> Tensor:
        deg_owned = owned_degree(edge_index, edge_weight, improved, add_self_loops, dtype)[3]
        return exchange_halo(deg_owned.view(-1, 1), edge_index.channel, name,
                             direction="fwd" if halo is None else halo.direction).view(-1)

    if edge_weight.requires_grad:
        assert halo is not None, "weights that require grad exchange degrees per layer call"
        return exchange(f"{halo.name}/degree")
    # Fixed weights: degrees are static; recomputed only if the weights change.
    cache = edge_index.cached(("halo_degree", improved, add_self_loops, dtype), dict)
    known = cache.get("weights")
    if known is None or known.shape != edge_weight.shape or not torch.equal(known, edge_weight):
        cache["degree"], cache["weights"] = exchange("degree"), edge_weight.detach().clone()
    return cache["degree"]


def gcn_adjacency(
    edge_index: DistEdgeIndex,
    edge_weight: Tensor | None,
    fetched: HaloRows,
    halo: LayerHalo | None,
    dtype: torch.dtype,
    normalize: bool,
    improved: bool,
    add_self_loops: bool,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """``(rowptr, col, value)`` of the local adjacency a GCN-style layer
    aggregates over: :func:`dist_gcn_norm` when ``normalize`` (halo sources
    keep their whole-graph degree), else the graph and ``edge_weight`` as they
    are; over the halo rows present only when the policy left some out."""
    graph, weight, deg_halo = edge_index, edge_weight, None
    if normalize and fetched.remote:
        deg_halo = halo_degree(edge_index, edge_weight, improved, add_self_loops, dtype, halo)
    elif normalize:  # no halo edges are left: their degrees are never read
        deg_halo = torch.zeros(edge_index.num_halo, dtype=dtype, device=edge_index.device)
    if fetched.mask is not None:
        graph, keep = edge_index.restrict(fetched.mask)
        weight = None if edge_weight is None else edge_weight[keep]
    if not normalize:
        return graph.rowptr, graph.col, weight
    assert deg_halo is not None, "normalisation needs the halo degrees"
    return dist_gcn_norm(graph, weight, improved, add_self_loops, dtype, deg_halo)
