"""The model as a program of layout-aware steps, and the layers feature
parallelism runs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch_geometric.nn import GINConv, GraphConv, MessagePassing
from torch_geometric.nn.models.basic_gnn import BasicGNN

from pyg_dist.models.gnn import GNN
from pyg_dist.nn import DistGCNConv, DistLayer, DistMessagePassing, DistSAGEConv
from pyg_dist.nn.norm import NORMS

#: The layers feature-parallel training runs (errors name them).
RUNS = ("GCNConv (DistGCNConv, aggr 'add', with or without edge weights), SAGEConv "
        "(DistSAGEConv, aggr 'mean' or 'sum'), and on the generic path GINConv and GraphConv "
        "(aggr 'add', 'sum' or 'mean'): the layers whose messages are linear in x_j")
#: The CLI's models it trains (:class:`~pyg_dist.models.GNN` kinds).
MODELS = ("gcn", "sage", "gin")
#: :class:`~pyg_dist.models.GNN`'s options it refuses, with their CLI flags.
GNN_REFUSED = (("residual", "--residual"), ("edge_dropout", "--edge-dropout"),
               ("norm", "--norm"), ("skip", "--skip"), ("jk", "--jk"))
#: The layouts of a node matrix: part rows × a column slice, or a row block × every column.
COLUMNS, ROWS = "columns", "rows"
#: The orders of a layer: aggregate the input on columns, then transform on
#: rows; or transform on rows, then aggregate the narrower output on columns.
AGGREGATE_FIRST, TRANSFORM_FIRST = "aggregate", "transform"
#: Generic-path layers whose message is ``x_j`` times an optional per-edge
#: weight (the name of that ``forward`` argument, :obj:`None`: none).
LINEAR_MESSAGES: dict[type, str | None] = {GINConv: None, GraphConv: "edge_weight"}



@dataclass
class Op:
    """One step of a model run on the grid.

    Attributes:
        kind: ``"dropout"``, ``"act"``, ``"norm"`` or ``"conv"``.
        module: The layer, the norm, or the activation (a callable).
        p: Dropout's probability.
        layer: A conv's kind: ``"gcn"``, ``"sage"`` or ``"linear"`` (the
            generic path).
        widths: A conv's input and output widths.
        weighted: Whether a conv takes the graph's edge weights.
    """

    kind: str
    module: Any = None
    p: float = 0.0
    layer: str = ""
    widths: tuple[int, int] = (0, 0)
    weighted: bool = False

    def spec(self) -> list[Any]:
        """The step as plain values (what the planner's arithmetic reads)."""
        if self.kind != "conv":
            return [self.kind]
        conv = self.module
        return ["conv", self.layer, *self.widths, bool(getattr(conv, "root_weight", False)),
                bool(getattr(conv, "project", False))]


def compile_model(model: nn.Module, num_features: int) -> list[Op]:
    """``model`` as :class:`Op` steps: a :class:`~pyg_dist.models.GNN`
    (``gcn``, ``sage``, ``gin``), PyG's ``GCN``, ``GraphSAGE`` or ``GIN``
    converted with :func:`~pyg_dist.nn.to_distributed`, or one layer of
    ``RUNS``; raises :class:`ValueError`, naming what runs, otherwise.

    Args:
        model (torch.nn.Module): The model.
        num_features (int): Its input width.
    """
    plain = [name or type(model).__name__ for name, m in model.named_modules()
             if type(m) in NORMS]
    if plain:
        raise ValueError(f"feature-parallel training normalises over every rank's rows; "
                         f"{', '.join(plain)} normalise(s) one rank's: convert the model "
                         f"with pyg_dist.nn.to_distributed(model)")
    if isinstance(model, GNN):
        ops = _gnn_ops(model)
    elif isinstance(model, BasicGNN):
        ops = _basic_ops(model)
    elif isinstance(model, MessagePassing):
        ops = [Op("conv", model, weighted=True)]
    else:
        raise ValueError(f"feature-parallel training runs pyg_dist.models.GNN, PyG's GCN, "
                         f"GraphSAGE and GIN (converted with to_distributed) or one layer of "
                         f"{RUNS}; got {type(model).__name__}")
    width = num_features
    for op in ops:
        if op.kind == "conv":
            op.layer, op.widths = _conv_kind(op.module, width)
            width = op.widths[1]
    return ops


def _gnn_ops(model: GNN) -> list[Op]:
    if model.kind not in MODELS:
        raise ValueError(f"feature-parallel training runs GNN kinds {', '.join(MODELS)} "
                         f"({RUNS}); got GNN('{model.kind}')")
    extras = [name for name, attribute in (("norm", "norms"), ("skip", "skips"), ("jk", "jk"))
              if hasattr(model, attribute)]
    if model.residual or model.edge_dropout or extras:
        raise ValueError("feature-parallel training runs GNN without residual connections, "
                         "edge dropout, norms, linear skips and a jumping-knowledge head; set "
                         "residual=False, edge_dropout=0, norm=None, skip=False, jk=None")
    ops: list[Op] = []
    for k, conv in enumerate(model.convs):
        p = float(model.input_dropout if k == 0 else model.dropout)
        if p > 0:  # GNN's dropout of p = 0 draws no mask
            ops.append(Op("dropout", p=p))
        ops.append(Op("conv", conv, weighted=model.kind in ("gcn", "sage")))
        if k < len(model.convs) - 1:
            ops.append(Op("act", torch.relu))
    return ops


def _basic_ops(model: BasicGNN) -> list[Op]:
    if model.jk_mode is not None:
        raise ValueError(f"feature-parallel training runs {type(model).__name__} without "
                         f"jumping knowledge; set jk=None")
    ops: list[Op] = []
    p = float(model.dropout.p)
    for i, (conv, norm) in enumerate(zip(model.convs, model.norms)):
        ops.append(Op("conv", conv, weighted=bool(model.supports_edge_weight)))
        if i == model.num_layers - 1:
            break
        if model.act is not None and model.act_first:
            ops.append(Op("act", model.act))
        if not isinstance(norm, nn.Identity):
            ops.append(Op("norm", norm))
        if model.act is not None and not model.act_first:
            ops.append(Op("act", model.act))
        if p > 0:
            ops.append(Op("dropout", p=p))
    return ops


def _conv_kind(conv: Any, width: int) -> tuple[str, tuple[int, int]]:
    """The kind of ``conv`` and its widths on input width ``width``; raises,
    naming what runs, for a layer this strategy cannot run."""
    name = type(conv).__name__
    if getattr(conv, "flow", "source_to_target") != "source_to_target":
        raise ValueError(f"'{name}' runs feature parallel with flow='source_to_target' only; "
                         f"reverse the edges before partitioning instead")
    if isinstance(conv, DistGCNConv):
        if conv.aggr not in ("add", "sum"):
            raise ValueError(f"'{name}' with aggr={conv.aggr!r} does not run feature parallel; "
                             f"it runs {RUNS}")
        _check_width(conv, conv.in_channels, width)
        return "gcn", (width, int(conv.out_channels))
    if isinstance(conv, DistSAGEConv):
        if not (isinstance(conv.aggr, str) and conv.aggr in ("mean", "sum", "add")):
            raise ValueError(f"'{name}' with aggr={conv.aggr!r} does not run feature parallel "
                             f"(its aggregation is not linear in x_j); it runs {RUNS}")
        _check_width(conv, conv.in_channels, width)
        return "sage", (width, int(conv.out_channels))
    if isinstance(conv, DistMessagePassing) and conv.pyg_class in LINEAR_MESSAGES:
        if not (isinstance(conv.aggr, str) and conv.aggr in ("add", "sum", "mean")):
            raise ValueError(f"'{name}' with aggr={conv.aggr!r} does not run feature parallel; "
                             f"it runs {RUNS}")
        return "linear", (width, _out_width(conv))
    if isinstance(conv, MessagePassing) and not isinstance(conv, DistLayer):
        raise ValueError(f"'{name}' is a PyG layer; convert the model with "
                         f"pyg_dist.nn.to_distributed(model) first")
    raise ValueError(f"'{name}' does not run feature parallel; it runs {RUNS}")


def _check_width(conv: Any, declared: Any, width: int) -> None:
    if declared != width:
        raise ValueError(f"'{type(conv).__name__}' takes {declared} input features but gets "
                         f"{width}; build the model for the data's width")


def _out_width(conv: Any) -> int:
    """Output width of a generic layer (GraphConv's ``out_channels``, the last
    linear layer of GINConv's ``nn``)."""
    if isinstance(getattr(conv, "out_channels", None), int):
        return int(conv.out_channels)
    inner = conv.nn
    if isinstance(getattr(inner, "out_channels", None), int):
        return int(inner.out_channels)
    for module in reversed(list(inner.modules())):
        for attribute in ("out_features", "out_channels"):
            if isinstance(getattr(module, attribute, None), int):
                return int(getattr(module, attribute))
    raise ValueError(f"cannot tell the output width of '{type(conv).__name__}'s nn; give it "
                     f"a linear output layer")
