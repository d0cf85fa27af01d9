"""What :func:`pyg_dist.train.train` reads of a heterogeneous graph: the
labelled node type's labels and masks, the model's inputs (the type
dictionaries, or the homogeneous view), and its logits of that type; and the
strategies that cannot train one, refused up front."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing

from pyg_dist.config import GradientOnly, GraphParallel, LayerPipeline, Planned
from pyg_dist.data.hetero_data import DistHeteroData
from pyg_dist.metrics import MASKS, accuracies
from pyg_dist.models.hetero import READS
from pyg_dist.nn.twin import DistLayer

__all__ = ["HeteroTask", "is_hetero", "labelled_type", "check_hetero_strategy"]


def is_hetero(data: Any) -> bool:
    """Whether ``data`` is heterogeneous (a ``HeteroData`` or a
    :class:`~pyg_dist.DistHeteroData`): it has ``metadata()``.

    Args:
        data: The graph.
    """
    return callable(getattr(data, "metadata", None))


def labelled_type(data: Any) -> str:
    """The one node type of ``data`` with labels ``y`` and a ``train_mask``;
    raises, naming the fix, when none or several have labels, or the
    labelled type has no ``train_mask``.

    Args:
        data (torch_geometric.data.HeteroData or DistHeteroData): The graph.
    """
    types = list(data.node_types)
    labelled = [t for t in types if "y" in data[t]]
    if len(labelled) != 1:
        raise ValueError(
            f"'train' trains on one node type with labels y (found "
            f"{', '.join(labelled) if labelled else 'none'} among {', '.join(types)}); set "
            f"data[node_type].y and data[node_type].train_mask on exactly one type of the "
            f"HeteroData (and partition it again)")
    if "train_mask" not in data[labelled[0]]:
        raise ValueError(f"'train' needs data['{labelled[0]}'].train_mask (a boolean mask of "
                         f"its training nodes) beside its labels y; set it on the HeteroData "
                         f"(and partition it again)")
    return labelled[0]


def check_hetero_strategy(strategy: Any, grad_sync: Any = None) -> None:
    """Raises, naming what to use instead, on options that cannot train a
    heterogeneous graph: gradient-only regrouping, a layer pipeline, the
    planner's ``strategy="auto"``, pre-aggregation and gradient compression.

    Args:
        strategy (GraphParallel or GradientOnly or LayerPipeline or Planned):
            The strategy.
        grad_sync (GradSync, optional): How gradients are summed.
            (default: :obj:`None`)
    """
    instead = ("train it with strategy=GraphParallel(halo=...) (CLI: --strategy "
               "graph-parallel --halo exact|stale:K|auto|...)")
    if isinstance(strategy, GradientOnly):
        raise ValueError(f"'train' on a heterogeneous graph: gradient-only regrouping "
                         f"clusters a homogeneous graph; {instead}")
    if isinstance(strategy, LayerPipeline):
        raise ValueError(f"'train' on a heterogeneous graph: a layer pipeline splits a deep "
                         f"homogeneous model into stages; {instead}")
    if isinstance(strategy, Planned) or strategy == "auto":
        raise ValueError("'train' on a heterogeneous graph: strategy='auto' ranks homogeneous "
                         "strategies; let each layer choose its halo with "
                         "strategy=GraphParallel(halo='auto') (CLI: --halo auto)")
    if isinstance(strategy, GraphParallel) and strategy.pre_aggregate:
        raise ValueError(f"'train' on a heterogeneous graph: pre-aggregation exchanges partial "
                         f"sums, which relations do not; leave pre_aggregate off and {instead}")
    if grad_sync is not None and grad_sync.compress not in (None, "none"):
        raise ValueError(f"'train' on a heterogeneous graph sums plain gradients (got "
                         f"grad_sync={grad_sync}); leave grad_sync out (CLI: drop "
                         f"--grad-compress)")


class HeteroTask:
    r"""A heterogeneous graph as :func:`~pyg_dist.train.train` reads it: the
    labelled node type's ``y`` and masks, the inputs of ``model`` and its
    logits of that type. A model reads the type dictionaries
    ``(x_dict, edge_index_dict)`` unless its ``reads`` attribute is
    :obj:`"homogeneous"`: then ``(x, edge_index, edge_type, node_type)`` of
    ``data.to_homogeneous()``, whose halo policies are the graph's own. It
    returns the labelled type's logits, or a dictionary holding them.

    Args:
        data (torch_geometric.data.HeteroData or DistHeteroData): The graph
            (a ``HeteroData`` in one process, a :class:`~pyg_dist.DistHeteroData`
            on the ranks).
        model (torch.nn.Module): The model.

    Attributes:
        node_type (str): The labelled node type.
        inputs (tuple): The model's arguments.
        ledger (pyg_dist.halo.Ledger, optional): The graph's ledger
            (:obj:`None` in one process).
        registry (pyg_dist.halo.HaloRegistry, optional): Its halo policies
            and state (:obj:`None` in one process).
    """

    def __init__(self, data: Any, model: nn.Module) -> None:
        reads = getattr(model, "reads", "dicts")
        if reads not in READS:
            raise ValueError(f"'train' got a model with reads={reads!r}; use one of "
                             f"{', '.join(map(repr, READS))}")
        distributed = isinstance(data, DistHeteroData)
        plain = [name for name, m in model.named_modules()
                 if isinstance(m, MessagePassing) and not isinstance(m, DistLayer)]
        if distributed and plain:
            raise ValueError(f"'train' got PyG layers ({', '.join(plain)}) for a "
                             f"DistHeteroData; make the model distributed first with "
                             f"pyg_dist.nn.to_distributed(model)")
        self.data = data
        self.node_type = labelled_type(data)
        store = data[self.node_type]
        self._keys = ["x", "edge_index", "y", *(m for m in MASKS if m in store)]
        self.y = store.y
        for mask in MASKS:
            setattr(self, mask, getattr(store, mask) if mask in store else None)
        self.ledger = data.ledger if distributed else None
        self.registry = data.registry if distributed else None
        if reads == "homogeneous":
            view = data.to_homogeneous()
            if distributed:
                view.edge_index.registry = data.registry  # one set of policies
            self.inputs: tuple[Any, ...] = (view.x, view.edge_index, view.edge_type,
                                            view.node_type)
        else:
            self.inputs = (data.x_dict, data.edge_index_dict)
        self.num_rows = int(self.y.size(0))

    def keys(self) -> list[str]:
        """The attributes the trainer reads (``y`` and the masks the labelled type has)."""
        return list(self._keys)

    def logits(self, out: Tensor | dict[str, Tensor]) -> Tensor:
        """The labelled type's rows of the model's output ``out``."""
        if isinstance(out, dict):
            if self.node_type not in out:
                raise ValueError(f"the model's output has no '{self.node_type}' entry (it has "
                                 f"{', '.join(out)}); return the labelled type's logits")
            out = out[self.node_type]
        if out.size(0) != self.num_rows:
            raise ValueError(f"the model returned {out.size(0)} rows for the "
                             f"{self.num_rows} '{self.node_type}' nodes of this rank; return "
                             f"the logits of the labelled type '{self.node_type}' only")
        return out

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> tuple[float, float, float]:
        """Global accuracy of ``model`` on the labelled type's ``train_mask``,
        ``val_mask`` and ``test_mask``. Collective.

        Args:
            model (torch.nn.Module): The model, switched to evaluation mode.
        """
        model.eval()
        return accuracies(self.logits(model(*self.inputs)).argmax(dim=-1), self)
