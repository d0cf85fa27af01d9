r"""Post-processing after training: Correct & Smooth (`"Combining Label
Propagation And Simple Models Out-performs Graph Neural Networks"
<https://arxiv.org/abs/2010.13993>`_) of a trained model's predictions,
across the ranks.

The model's soft predictions :math:`\mathbf{Z}` (a softmax of its
evaluation forward) are corrected by the propagated error on the training
nodes and smoothed by propagating the training labels
(:class:`~pyg_dist.nn.DistCorrectAndSmooth`): each propagation step is one
exact halo exchange of :math:`C` columns, so the result equals PyG's
:class:`~torch_geometric.nn.models.CorrectAndSmooth` on the whole graph.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from pyg_dist.metrics import accuracies
from pyg_dist.nn import DistCorrectAndSmooth
from pyg_dist.runtime import distributed
from pyg_dist.strategies.options import Options, check_int, is_number
from pyg_dist.strategies.task import task_of

__all__ = ["CorrectSmooth", "PostResult", "correct_and_smooth", "POSTS"]


@dataclass(frozen=True)
class CorrectSmooth(Options):
    r"""Correct & Smooth after training (``pyg-dist train --post cs``):
    :math:`L_1` propagations of the training error at :math:`\alpha_1`,
    scaled (autoscale: by the mean training error), then :math:`L_2`
    propagations of the corrected predictions with the training labels in
    place at :math:`\alpha_2`. The arguments of PyG's
    :class:`~torch_geometric.nn.models.CorrectAndSmooth`; spelled
    ``cs[,KEY=VALUE...]`` on the command line
    (``"cs,correction_layers=20,smoothing_alpha=0.6"``).

    Args:
        correction_layers (int, optional): :math:`L_1`. (default: :obj:`50`)
        correction_alpha (float, optional): :math:`\alpha_1`. (default: :obj:`0.8`)
        smoothing_layers (int, optional): :math:`L_2`. (default: :obj:`50`)
        smoothing_alpha (float, optional): :math:`\alpha_2`. (default: :obj:`0.8`)
        autoscale (bool, optional): Scale the correction by the training
            error (else by ``scale``). (default: :obj:`True`)
        scale (float, optional): The correction's scale without autoscale.
            (default: :obj:`1.0`)
    """

    #: The step's name (``--post NAME``, ``{"name": ...}`` in configs).
    name: ClassVar[str] = "cs"
    correction_layers: int = 50
    correction_alpha: float = 0.8
    smoothing_layers: int = 50
    smoothing_alpha: float = 0.8
    autoscale: bool = True
    scale: float = 1.0

    def check(self) -> None:
        for name in ("correction_layers", "smoothing_layers"):
            check_int(type(self), name, getattr(self, name), 0, "it counts propagations")
        for name in ("correction_alpha", "smoothing_alpha"):
            value = getattr(self, name)
            if not is_number(value) or not 0.0 <= value <= 1.0:
                raise ValueError(f"CorrectSmooth({name}={value!r}): use a number in [0, 1]")
        if not is_number(self.scale):
            raise ValueError(f"CorrectSmooth(scale={self.scale!r}): use a number")

    @classmethod
    def parse(cls, spec: str) -> CorrectSmooth:
        """The step ``"cs[,KEY=VALUE...]"`` spells (:meth:`spec` reversed);
        ``autoscale`` takes ``true`` or ``false``."""
        name, *pairs = [p.strip() for p in spec.split(",")]
        fields = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        if name != cls.name:
            raise ValueError(f"bad post-processing step '{spec}': use '{cls.name}[,KEY=VALUE"
                             f"...]' (Correct & Smooth) or 'none'")
        values: dict[str, Any] = {}
        for pair in pairs:
            key, eq, text = pair.partition("=")
            if not eq or key not in fields:
                raise ValueError(f"bad post-processing step '{spec}': '{pair}' is not "
                                 f"KEY=VALUE with KEY one of {', '.join(fields)}")
            values[key] = _value(spec, key, fields[key], text)
        return cls(**values)

    def spec(self) -> str:
        """``"cs[,KEY=VALUE...]"`` with the fields that differ from the defaults."""
        base = type(self)()
        return ",".join([self.name, *(f"{f.name}={str(getattr(self, f.name)).lower()}"
                                      for f in dataclasses.fields(self)
                                      if getattr(self, f.name) != getattr(base, f.name))])

    def describe(self) -> dict[str, Any]:
        """The step as configs write it: ``{"name": ..., **fields}``."""
        return {"name": self.name, **self.to_dict()}


def _value(spec: str, key: str, kind: str, text: str) -> Any:
    """Field ``key``'s value of type ``kind`` (its annotation) from ``text``."""
    if kind == "bool":
        if text.lower() not in ("true", "false"):
            raise ValueError(f"bad post-processing step '{spec}': {key} takes true or false, "
                             f"got '{text}'")
        return text.lower() == "true"
    try:
        return int(text) if kind == "int" else float(text)
    except ValueError:
        raise ValueError(f"bad post-processing step '{spec}': {key} takes a number, got "
                         f"'{text}'") from None


#: Post-processing steps by name (``pyg-dist train --post NAME``).
POSTS: dict[str, type[CorrectSmooth]] = {CorrectSmooth.name: CorrectSmooth}


@dataclass
class PostResult:
    """What a post-processing step gave: global accuracies of its
    predictions, its wall time on the slowest rank (the model's forward
    included) and the halo bytes all ranks sent for it.

    Attributes:
        name (str): The step.
        train_acc (float): Accuracy on the training nodes.
        val_acc (float): Accuracy on the validation nodes.
        test_acc (float): Accuracy on the test nodes.
        seconds (float): Wall time of the slowest rank.
        bytes (int): Halo bytes sent by all ranks.
    """

    name: str
    train_acc: float
    val_acc: float
    test_acc: float
    seconds: float
    bytes: int

    def summary(self) -> dict[str, Any]:
        """The result as the CLI's JSON line writes it (seconds rounded)."""
        out = asdict(self)
        out["seconds"] = round(self.seconds, 4)
        return out


@torch.no_grad()
def correct_and_smooth(model: nn.Module, data: Any, options: CorrectSmooth | None = None
                       ) -> PostResult:
    """Corrects and smooths the predictions of ``model`` on ``data`` (a
    :class:`~pyg_dist.DistData`, or a PyG ``Data`` in one process) with the
    labels of ``data.train_mask``, and measures them. Collective.

    The model is called as :func:`~pyg_dist.train.train` evaluates it (with
    every training label as input if it reads labels), in evaluation mode.

    Args:
        model (torch.nn.Module): The trained model.
        data (DistData or torch_geometric.data.Data): The graph.
        options (CorrectSmooth, optional): The step's settings; :obj:`None`
            for the defaults. (default: :obj:`None`)
    """
    options = options or CorrectSmooth()
    task = task_of(data, model)
    if task.hetero:
        raise ValueError("'correct_and_smooth' propagates over a homogeneous graph; train "
                         "a heterogeneous one without --post")
    ledger = task.ledger
    before = ledger.totals()["bytes_eval"] if ledger is not None else 0.0
    start = time.perf_counter()
    model.eval()
    y_soft = task.logits(model(*task.inputs)).softmax(dim=-1)
    step = DistCorrectAndSmooth(options.correction_layers, options.correction_alpha,
                                options.smoothing_layers, options.smoothing_alpha,
                                options.autoscale, options.scale)
    mask, graph = task.train_mask, task.graph
    y_true = task.y[mask]
    out = step.smooth(step.correct(y_soft, y_true, mask, graph), y_true, mask, graph)
    accs = accuracies(out.argmax(dim=-1), task)
    seconds = time.perf_counter() - start
    sent = (ledger.totals()["bytes_eval"] if ledger is not None else 0.0) - before
    if ledger is not None:
        seconds, _ = distributed.all_reduce_values([seconds, 0.0], op="max")
        sent = distributed.all_reduce_values([sent])[0]
    return PostResult(options.name, *accs, seconds=seconds, bytes=int(sent))
