"""The model as steps the grid runs, the layers it runs, and the layout each
step starts in."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch_geometric.nn import GINConv, MessagePassing
from torch_geometric.nn.models.basic_gnn import BasicGNN

from pyg_dist.models.gnn import GNN
from pyg_dist.nn import DistGCNConv, DistSAGEConv
from pyg_dist.strategies.grid_3d.grid import INPUT, Layout

__all__ = ["RUNS", "MODELS", "Step", "compile_model", "layouts"]

#: The layers the 3D grid runs (errors name them).
RUNS = ("GCNConv (DistGCNConv, normalize=True, add_self_loops=True, with or without edge "
        "weights), SAGEConv (DistSAGEConv, aggr 'mean' or 'sum', without project and "
        "normalize) and GINConv (an nn of Linear layers and activations)")
#: The CLI's models it trains (:class:`~pyg_dist.models.GNN` kinds).
MODELS = ("gcn", "sage", "gin")
#: Elementwise modules a GIN's nn may hold between its Linear layers.
_ACTIVATIONS = (nn.ReLU, nn.ELU, nn.LeakyReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.Identity)


@dataclass
class Step:
    """One step of the model on the grid.

    Attributes:
        kind: ``"dropout"``, ``"act"``, ``"linear"`` or ``"conv"``.
        module: The layer, the linear layer or the activation (a callable).
        p: Dropout's probability.
        layer: A conv's kind: ``"gcn"``, ``"sage"`` or ``"gin"``.
        name: What the ledger books its exchanges under.
        inner: A GIN's nn, as steps.
    """

    kind: str
    module: Any = None
    p: float = 0.0
    layer: str = ""
    name: str = ""
    inner: list[Step] = field(default_factory=list)


def layouts(steps: list[Step], start: Layout = INPUT) -> list[Layout]:
    """The layout each step starts in, then the output's: an aggregation
    turns ``(rows, cols)`` into ``(spare, cols)``, a transform into
    ``(rows, spare)``; elementwise steps keep it.

    Args:
        steps (list[Step]): The steps.
        start (Layout, optional): The input's layout. (default: ``INPUT``)
    """
    out, layout = [], start
    for step in steps:
        out.append(layout)
        layout = _after(step, layout)
    return [*out, layout]


def _after(step: Step, layout: Layout) -> Layout:
    if step.kind == "linear":
        return layout.transformed()
    if step.kind != "conv":
        return layout
    layout = layout.aggregated()
    if step.layer == "gin":
        for inner in step.inner:
            layout = _after(inner, layout)
        return layout
    return layout.transformed()


def compile_model(model: nn.Module, num_features: int) -> list[Step]:
    """``model`` as :class:`Step` s: a :class:`~pyg_dist.models.GNN`
    (``gcn``, ``sage``, ``gin``), PyG's ``GCN``, ``GraphSAGE`` or ``GIN``
    converted with :func:`~pyg_dist.nn.to_distributed`, or one layer of
    ``RUNS``; raises :class:`ValueError`, naming what runs, otherwise.

    Args:
        model (torch.nn.Module): The model.
        num_features (int): Its input width.
    """
    if isinstance(model, GNN):
        steps = _gnn_steps(model)
    elif isinstance(model, BasicGNN):
        steps = _basic_steps(model)
    elif isinstance(model, MessagePassing):
        steps = [Step("conv", model)]
    else:
        raise ValueError(f"grid-3d training runs pyg_dist.models.GNN, PyG's GCN, GraphSAGE "
                         f"and GIN (converted with to_distributed) or one layer of {RUNS}; "
                         f"got {type(model).__name__}")
    for k, step in enumerate(s for s in steps if s.kind == "conv"):
        step.layer, step.name = _conv_kind(step.module), f"conv{k}"
        if step.layer == "gin":
            step.inner = _mlp_steps(step.module.nn, step.name)
    return steps


def _gnn_steps(model: GNN) -> list[Step]:
    if model.kind not in MODELS:
        raise ValueError(f"grid-3d training runs GNN kinds {', '.join(MODELS)} ({RUNS}); got "
                         f"GNN('{model.kind}')")
    extras = [name for name, attribute in (("norm", "norms"), ("skip", "skips"), ("jk", "jk"))
              if hasattr(model, attribute)]
    if model.residual or model.edge_dropout or extras:
        raise ValueError("grid-3d training runs GNN without residual connections, edge "
                         "dropout, norms, linear skips and a jumping-knowledge head; set "
                         "residual=False, edge_dropout=0, norm=None, skip=False, jk=None")
    steps: list[Step] = []
    for k, conv in enumerate(model.convs):
        p = float(model.input_dropout if k == 0 else model.dropout)
        if p > 0:
            steps.append(Step("dropout", p=p))
        steps.append(Step("conv", conv))
        if k < len(model.convs) - 1:
            steps.append(Step("act", torch.relu))
    return steps


def _basic_steps(model: BasicGNN) -> list[Step]:
    if model.jk_mode is not None:
        raise ValueError(f"grid-3d training runs {type(model).__name__} without jumping "
                         f"knowledge; set jk=None")
    if any(not isinstance(norm, nn.Identity) for norm in model.norms):
        raise ValueError(f"grid-3d training runs {type(model).__name__} without norms; set "
                         f"norm=None")
    steps: list[Step] = []
    p = float(model.dropout.p)
    for i, conv in enumerate(model.convs):
        steps.append(Step("conv", conv))
        if i == model.num_layers - 1:
            break
        if model.act is not None:
            steps.append(Step("act", model.act))
        if p > 0:
            steps.append(Step("dropout", p=p))
    return steps


def _conv_kind(conv: Any) -> str:
    """The kind of ``conv``; raises, naming what runs, for a layer the grid
    cannot run."""
    name = type(conv).__name__
    if getattr(conv, "flow", "source_to_target") != "source_to_target":
        raise ValueError(f"'{name}' runs on the 3D grid with flow='source_to_target' only; "
                         f"reverse the edges instead")
    if isinstance(conv, DistGCNConv):
        if conv.aggr not in ("add", "sum") or not conv.normalize or not conv.add_self_loops:
            raise ValueError(f"'{name}' with aggr={conv.aggr!r}, normalize={conv.normalize}, "
                             f"add_self_loops={conv.add_self_loops} does not run on the 3D "
                             f"grid; it runs {RUNS}")
        return "gcn"
    if isinstance(conv, DistSAGEConv):
        if conv.aggr not in ("mean", "sum", "add") or conv.project or conv.normalize:
            raise ValueError(f"'{name}' with aggr={conv.aggr!r}, project={conv.project}, "
                             f"normalize={conv.normalize} does not run on the 3D grid; it "
                             f"runs {RUNS}")
        return "sage"
    if isinstance(conv, GINConv):
        return "gin"
    if isinstance(conv, MessagePassing) and type(conv).__module__.startswith("torch_geometric"):
        raise ValueError(f"'{name}' does not run on the 3D grid (a PyG layer: convert the "
                         f"model with pyg_dist.nn.to_distributed(model) if it is one of "
                         f"these); it runs {RUNS}")
    raise ValueError(f"'{name}' does not run on the 3D grid; it runs {RUNS}")


def _mlp_steps(mlp: Any, name: str) -> list[Step]:
    """A GIN's nn as linear and elementwise steps."""
    modules = list(mlp) if isinstance(mlp, nn.Sequential) else [mlp]
    steps = []
    for module in modules:
        if isinstance(module, nn.Linear):
            steps.append(Step("linear", module, name=name))
        elif isinstance(module, _ACTIVATIONS):
            steps.append(Step("act", module))
        else:
            raise ValueError(f"GINConv's nn holds {type(module).__name__}, which does not run "
                             f"on the 3D grid; give it Linear layers and activations only "
                             f"(it runs {RUNS})")
    return steps
