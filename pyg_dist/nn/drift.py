r"""A warning for the training loop whose ranks each train a copy of the model.

A Dist layer computes this rank's rows only, so the loss of one rank and its
gradients cover this rank's nodes only: unless the gradients are summed over
the ranks before the optimizer steps, every rank takes a different step and
the copies drift apart. Three loops sum them: :func:`pyg_dist.train.train`,
:class:`pyg_dist.DistributedModel` and :class:`~torch.nn.parallel.DistributedDataParallel`.

Any other loop is checked once: when a Dist layer runs distributed, in
training mode with gradients on, and its model was not handed to one of the
first two (:func:`mark_summed`), the first optimizer step that holds its
parameters compares a checksum of their gradients over the ranks (one
all-reduce of four numbers, :math:`\max` of :math:`\pm\sum g` and
:math:`\pm\sum g^2`). Summed gradients are equal on every rank; when they
differ, :class:`GradientsNotSummedWarning` names the fix. The check runs
before the first step only (the gradients are not changed), so a loop under
DDP pays one small all-reduce once. A forward compiled by :func:`torch.compile`
is not watched (the check would break its graph).
"""
from __future__ import annotations

import warnings
import weakref
from typing import Any

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from pyg_dist.runtime import distributed

__all__ = ["GradientsNotSummedWarning", "mark_summed", "watch", "RELATIVE_SPREAD"]

#: Checksums of summed gradients agree to rounding; those of a rank's own
#: gradients differ in their leading digits.
RELATIVE_SPREAD = 1e-4

#: Modules whose gradients a pyg_dist loop sums (see :func:`mark_summed`).
_SUMMED: weakref.WeakSet[nn.Module] = weakref.WeakSet()
#: Layers checked already (each is checked at one step only).
_CHECKED: weakref.WeakSet[nn.Module] = weakref.WeakSet()
#: Layers that trained distributed since the last check, waiting for a step.
_PENDING: list[weakref.ref[nn.Module]] = []
_HOOK: list[Any] = []


class GradientsNotSummedWarning(UserWarning):
    """A Dist layer trained on several ranks but its parameters' gradients
    differed between the ranks at an optimizer step: each rank trains its own
    copy of the model."""


def mark_summed(model: nn.Module) -> None:
    """Marks every module of ``model`` as trained by a loop that sums its
    gradients over the ranks (:func:`pyg_dist.train.train`,
    :class:`pyg_dist.DistributedModel`): its layers are not checked.

    Args:
        model (torch.nn.Module): The model.
    """
    for module in model.modules():
        _SUMMED.add(module)


def watch(layer: nn.Module) -> None:
    """Called by a Dist layer running distributed: when it trains (training
    mode, gradients on) on several ranks in a loop not marked by
    :func:`mark_summed`, its gradients are compared over the ranks at the
    next optimizer step (once).

    Args:
        layer (torch.nn.Module): The layer.
    """
    if torch.compiler.is_compiling():  # no graph break: a compiled forward is not watched
        return
    if not (layer.training and torch.is_grad_enabled()) or layer in _SUMMED \
            or layer in _CHECKED or not distributed.is_distributed():
        return
    if any(ref() is layer for ref in _PENDING):
        return
    _PENDING.append(weakref.ref(layer))
    if not _HOOK:
        _HOOK.append(register_optimizer_step_pre_hook(_before_step))


def _before_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    """The global optimizer hook: checks the pending layers whose parameters
    ``optimizer`` steps (collective on every rank, which all step alike)."""
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    layers = [layer for ref in _PENDING if (layer := ref()) is not None
              and layer not in _SUMMED]
    mine = [layer for layer in layers if any(id(p) in held for p in layer.parameters())]
    if not mine:
        return
    _PENDING[:] = [weakref.ref(layer) for layer in layers if layer not in mine]
    for layer in mine:
        _CHECKED.add(layer)
    first, second = 0.0, 0.0
    for layer in mine:
        for p in layer.parameters():
            if p.grad is not None:
                grad = p.grad.detach().double()
                first += float(grad.sum())
                second += float(grad.square().sum())
    high = distributed.all_reduce_values([first, second, -first, -second], "max")
    spread = max(high[0] + high[2], high[1] + high[3])
    scale = max(abs(high[0]), abs(high[2]), high[1], 1e-30)
    if spread > RELATIVE_SPREAD * scale:
        names = ", ".join(sorted({type(layer).__name__ for layer in mine}))
        warnings.warn(
            f"{names} trained on {distributed.world_size()} ranks, but the gradients of its "
            f"parameters differ between the ranks at this optimizer step: each rank trains a "
            f"copy of the model of its own, and the copies drift apart. Sum the gradients over "
            f"the ranks: wrap the model, model = pyg_dist.DistributedModel(model), and take the "
            f"loss over the nodes of all ranks, pyg_dist.cross_entropy(out, data.y, "
            f"data.train_mask) (or train with pyg_dist.train.train)",
            GradientsNotSummedWarning, stacklevel=3)
