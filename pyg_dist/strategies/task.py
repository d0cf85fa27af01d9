"""What :func:`pyg_dist.train.train` and the strategies read of a graph: a
:class:`Task` holds the labels and masks, the model's inputs, its logits of
the model's output, the ledger and the halo registry; :class:`HeteroTask`
reads a heterogeneous graph's labelled node type, and the model's inputs as
the type dictionaries or the homogeneous view; :class:`LabelTask` gives a
model that reads labels as input its label columns and each epoch's loss
mask."""
from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing

from pyg_dist.data.hetero_data import DistHeteroData
from pyg_dist.halo.layer import registry_of
from pyg_dist.metrics import MASKS, accuracies, data_keys, global_loss
from pyg_dist.models.hetero import READS
from pyg_dist.nn.twin import DistLayer
from pyg_dist.utils.labels import LabelInput

__all__ = ["Task", "HeteroTask", "LabelTask", "task_of", "is_hetero", "labelled_type"]


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


class Task:
    """A graph as :func:`~pyg_dist.train.train` reads it: the model is called
    on ``inputs`` (``data.x, data.edge_index`` unless given) and its output is
    the logits of this rank's rows; the loss reads ``y`` and ``train_mask``,
    the accuracies the masks the graph has.

    Args:
        data (DistData or torch_geometric.data.Data): The graph, with ``x``,
            ``y`` and ``train_mask`` (and ``edge_index`` unless ``inputs`` are
            given).
        inputs (tuple, optional): The model's arguments. (default: :obj:`None`)

    Attributes:
        hetero (bool): Whether the graph is heterogeneous.
        ledger (pyg_dist.halo.Ledger, optional): The graph's ledger
            (:obj:`None` in one process).
        registry (pyg_dist.halo.HaloRegistry, optional): Its halo policies
            and state (:obj:`None` in one process).
    """

    hetero = False
    #: Whether the model reads labels as input (:class:`~pyg_dist.strategies.task.LabelTask`).
    labels_as_input = False
    #: Whether the task scores edges (:class:`~pyg_dist.strategies.link_task.LinkTask`).
    links = False
    train_mask: Tensor
    val_mask: Tensor | None
    test_mask: Tensor | None

    def __init__(self, data: Any, inputs: tuple[Any, ...] | None = None) -> None:
        keys = data_keys(data)
        needed = ("x", "y", "train_mask") + (("edge_index",) if inputs is None else ())
        missing = [k for k in needed if k not in keys]
        if missing:
            raise ValueError(
                f"'train' needs data.{', data.'.join(missing)}; partition a graph that has "
                f"them (node features 'x', labels 'y' and a boolean 'train_mask')")
        self.data = data
        self.inputs: tuple[Any, ...] = inputs or (data.x, data.edge_index)
        self.y = data.y
        self._keys = [k for k in keys if k == "y" or k in MASKS]
        for mask in MASKS:
            setattr(self, mask, getattr(data, mask) if mask in keys else None)
        self.ledger = getattr(data, "ledger", None)
        self.registry = registry_of(data)

    @property
    def graph(self) -> Any:
        """The model's graph argument (a :class:`~pyg_dist.DistEdgeIndex` on the ranks)."""
        return self.inputs[1]

    def keys(self) -> list[str]:
        """The attributes the trainer reads (``y`` and the masks the graph has)."""
        return list(self._keys)

    def logits(self, out: Tensor) -> Tensor:
        """The logits the loss reads of the model's output ``out``: all of it."""
        return out

    def loss(self, out: Tensor, model: nn.Module) -> tuple[Tensor, float]:
        """The training loss of the model's output ``out``: cross entropy
        averaged over the training nodes of all ranks (this rank's share and
        the global value; :func:`~pyg_dist.train.global_loss`). Collective.

        Args:
            out (torch.Tensor): The model's output.
            model (torch.nn.Module): The model.
        """
        return global_loss(out, self.y, self.train_mask)

    def for_epoch(self, epoch: int) -> Task:
        """What training epoch ``epoch`` (from 1) reads: the model's inputs
        and the loss's ``train_mask``; the task itself, unless labels enter
        as input (:class:`~pyg_dist.strategies.task.LabelTask`).

        Args:
            epoch (int): The epoch.
        """
        return self

    def gather_bytes(self, epochs: range, row_bytes: int) -> list[int]:
        """Bytes the training steps of ``epochs`` book gathering rows by
        global id (all ranks, one entry per epoch): none for node labels.
        Collective where a task gathers.

        Args:
            epochs (range): The epochs.
            row_bytes (int): Bytes of one row of the model's output.
        """
        return [0 for _ in epochs]

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> tuple[float, float, float]:
        """Global accuracy of ``model`` on ``train_mask``, ``val_mask`` and
        ``test_mask``. Collective.

        Args:
            model (torch.nn.Module): The model, switched to evaluation mode.
        """
        model.eval()
        return accuracies(self.logits(model(*self.inputs)).argmax(dim=-1), self)


def task_of(data: Any, model: nn.Module, inputs: tuple[Any, ...] | None = None) -> Task:
    """The :class:`Task` of ``data`` (a :class:`HeteroTask` for a
    heterogeneous graph); ``data`` itself when it is one.

    Args:
        data: The graph (a :class:`~pyg_dist.DistData`,
            :class:`~pyg_dist.DistHeteroData` or PyG graph).
        model (torch.nn.Module): The model that trains on it.
        inputs (tuple, optional): The model's arguments, for a homogeneous
            graph; :obj:`None` for ``data.x, data.edge_index``.
            (default: :obj:`None`)
    """
    if isinstance(data, Task):
        return data
    if is_hetero(data):
        return HeteroTask(data, model)
    labels = getattr(model, "label_input", None)
    return Task(data, inputs) if labels is None else LabelTask(data, labels, inputs)


class LabelTask(Task):
    r"""A graph whose model reads labels as input (the label trick; see
    :mod:`pyg_dist.utils.labels`): the model's first argument is the
    features followed by ``labels.num_classes`` one-hot label columns. In
    training epoch :math:`e` the training nodes that
    :meth:`~pyg_dist.utils.labels.LabelInput.shown` picks fill their columns
    and the loss reads the other training nodes; in evaluation every training
    node fills its columns. The split is a hash of the global node ids and
    the epoch: one process and every cut draw the same. The label columns
    cross the halo with the features.

    Args:
        data (DistData or torch_geometric.data.Data): The graph, with ``x``,
            ``y``, ``train_mask`` and ``edge_index`` (a ``DistData``'s
            ``global_id``; in one process row :math:`i` is node :math:`i`).
        labels (LabelInput): How the model reads labels.
        inputs (tuple, optional): The model's arguments after the first.
            (default: :obj:`None`, ``(data.edge_index,)``)

    Attributes:
        global_id (torch.Tensor): ``[N]`` global id of each row.
    """

    labels_as_input = True

    def __init__(self, data: Any, labels: LabelInput, inputs: tuple[Any, ...] | None = None
                 ) -> None:
        super().__init__(data, inputs)
        self.labels = labels
        self.x, self.rest = self.inputs[0], self.inputs[1:]
        classes = int(self.y.max()) + 1 if self.y.numel() else 0
        if classes > labels.num_classes:
            raise ValueError(f"'train' got labels up to {classes - 1} for a model that reads "
                             f"{labels.num_classes} label columns; build the model with "
                             f"out_channels = the number of classes")
        gid = getattr(data, "global_id", None)
        self.global_id = (gid if gid is not None
                          else torch.arange(self.y.numel(), device=self.y.device))
        self.inputs = (labels.inputs(self.x, self.y, self.train_mask), *self.rest)

    def for_epoch(self, epoch: int) -> Task:
        shown = self.labels.shown(self.global_id, self.train_mask, epoch)
        view = copy.copy(self)
        view.inputs = (self.labels.inputs(self.x, self.y, shown), *self.rest)
        view.train_mask = self.train_mask & ~shown
        return view


class HeteroTask(Task):
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
    """

    hetero = True

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
        self._keys = ["y", *(m for m in MASKS if m in store)]
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
