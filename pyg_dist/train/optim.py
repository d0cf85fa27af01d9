"""The optimizer :func:`~pyg_dist.train.train` steps: the one it is given,
an (optimizer, scheduler) pair, checked, or :class:`~pyg_dist.config.Adam`
with its :class:`~pyg_dist.config.LRSchedule`."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.optim import lr_scheduler

from pyg_dist.config import Adam, LRSchedule

__all__ = ["make_optimizer"]


def make_optimizer(model: nn.Module, given: Any,
                   epochs: int) -> tuple[torch.optim.Optimizer, Any]:
    """The optimizer ``train`` was given (or makes) and its scheduler (or
    :obj:`None`); raises, naming the fix, on anything else.

    Args:
        model (torch.nn.Module): The model whose parameters it steps.
        given (torch.optim.Optimizer or tuple or Adam, optional): What
            ``train`` was given as ``optimizer``.
        epochs (int): The planned epochs (a schedule's length).
    """
    if not isinstance(given, (torch.optim.Optimizer, tuple, Adam, type(None))):
        raise TypeError(f"'train' got optimizer={given!r}; pass a torch.optim.Optimizer, "
                        f"(optimizer, scheduler) or Adam(lr=..., ...) from pyg_dist.config")
    if isinstance(given, torch.optim.Optimizer):
        return given, None
    if isinstance(given, tuple):
        return _pair(model, given)
    adam = given or Adam()
    optimizer = torch.optim.Adam(model.parameters(), lr=adam.lr, weight_decay=adam.weight_decay)
    schedule: LRSchedule | None = adam.schedule  # type: ignore[assignment]
    return optimizer, None if schedule is None else schedule.build(optimizer, epochs)


def _pair(model: nn.Module, pair: tuple[Any, ...]) -> tuple[torch.optim.Optimizer, Any]:
    """An (optimizer, scheduler) pair, checked: the scheduler steps that
    optimizer, which steps ``model``'s parameters."""
    fix = "pass optimizer=(opt, scheduler) with scheduler = e.g. CosineAnnealingLR(opt, T_max)"
    if len(pair) != 2 or not isinstance(pair[0], torch.optim.Optimizer) \
            or not isinstance(pair[1], (lr_scheduler.LRScheduler,
                                        lr_scheduler.ReduceLROnPlateau)):
        raise TypeError(f"'train' got optimizer={pair!r}; {fix}")
    optimizer, scheduler = pair
    if scheduler.optimizer is not optimizer:
        raise ValueError("'train' got a scheduler made for a different optimizer than the one "
                         "paired with it; make the scheduler with that optimizer: " + fix)
    owned = {id(p) for p in model.parameters()}
    if not any(id(p) in owned for group in optimizer.param_groups for p in group["params"]):
        raise ValueError("'train' got an optimizer of none of the model's parameters; make "
                         "it with model.parameters()")
    if isinstance(scheduler, lr_scheduler.ReduceLROnPlateau) and scheduler.mode != "max":
        raise ValueError("'train' steps ReduceLROnPlateau on validation accuracy (higher is "
                         "better); make it with mode='max'")
    return optimizer, scheduler
