"""The layers a pipeline can split: each as an aggregation over a fixed
adjacency (a sum with edge values) followed by a per-row update, so that a
chunk's rows can be computed from any mix of current and historical rows."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import GCN2Conv, GCNConv, SAGEConv

from pyg_dist.data.dist_data import DistEdgeIndex
from pyg_dist.halo import HaloRows
from pyg_dist.nn.gcn2_conv import initial_residual
from pyg_dist.nn.gcn_norm import gcn_adjacency
from pyg_dist.ops.csr import csr_row

__all__ = ["SPLITTABLE", "check_splittable", "adjacency", "update"]

#: Layer types a pipeline splits (their Dist twins are subclasses).
SPLITTABLE = (GCNConv, SAGEConv, GCN2Conv)


def check_splittable(conv: Any, where: str) -> None:
    """Raises, naming the alternatives, if ``conv`` cannot be split into chunks."""
    if not isinstance(conv, SPLITTABLE):
        raise ValueError(
            f"the layer pipeline cannot split {where} ({type(conv).__name__}); it splits "
            f"GCNConv, SAGEConv and GCN2Conv layers (pyg_dist.models.DeepGNN); train other "
            f"models graph parallel (stages=1, chunks=1)")
    problem = None
    if isinstance(conv, GCN2Conv | GCNConv) and getattr(conv, "aggr", "add") != "add":
        problem = f"aggr='{conv.aggr}' (it aggregates with 'add')"
    elif isinstance(conv, GCNConv) and not conv.normalize:
        problem = "normalize=False"
    elif isinstance(conv, SAGEConv) and (conv.aggr not in ("mean", "sum", "add") or conv.project):
        problem = f"aggr='{conv.aggr}', project={conv.project} (it needs mean or sum, no project)"
    if problem is not None:
        raise ValueError(f"the layer pipeline cannot split {where} with {problem}; "
                         f"use the layer's defaults or train graph parallel (stages=1, chunks=1)")


def adjacency(conv: Any, graph: DistEdgeIndex,
              dtype: torch.dtype) -> tuple[Any, tuple[Tensor, ...]]:
    """``(key, (rowptr, col, value))``: the adjacency ``conv`` sums over on
    this rank's rows (columns over ``[owned ; halo]``), and a key shared by
    layers with the same one."""
    if isinstance(conv, GCN2Conv | GCNConv):
        options = (bool(conv.normalize), bool(getattr(conv, "improved", False)),
                   bool(conv.add_self_loops))
        every_row = HaloRows(graph.col.new_empty(0))  # all halo rows present
        rowptr, col, value = gcn_adjacency(graph, None, every_row, None,  # type: ignore[arg-type]
                                           dtype, *options)
        return ("gcn", *options), (rowptr, col, _ones(graph, dtype) if value is None else value)
    if conv.aggr == "mean":
        row = csr_row(graph.rowptr, graph.col)
        degree = (graph.rowptr[1:] - graph.rowptr[:-1]).clamp(min=1).to(dtype)
        return ("mean",), (graph.rowptr, graph.col, degree.reciprocal()[row])
    return ("sum",), (graph.rowptr, graph.col, _ones(graph, dtype))


def update(conv: Any, agg: Tensor, h_in: Tensor, x0: Tensor | None) -> Tensor:
    """The layer's output rows from their aggregated neighbourhood ``agg``,
    their own (dropped-out) input ``h_in`` and the initial rows ``x0``
    (GCN2Conv), as the PyG layer computes them."""
    if isinstance(conv, GCN2Conv):
        assert x0 is not None, "GCN2Conv needs the initial rows"
        return initial_residual(conv, agg, x0)
    if isinstance(conv, GCNConv):
        out = conv.lin(agg)
        return out if conv.bias is None else out + conv.bias
    out = conv.lin_l(agg)
    if conv.root_weight:
        out = out + conv.lin_r(h_in)
    return F.normalize(out, p=2.0, dim=-1) if conv.normalize else out


def _ones(graph: DistEdgeIndex, dtype: torch.dtype) -> Tensor:
    return torch.ones(graph.col.numel(), dtype=dtype, device=graph.col.device)
