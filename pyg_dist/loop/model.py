r"""``DistributedModel``: a model whose gradients are summed over the ranks
after every backward, for a PyG training loop kept as it is."""
from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor, nn

from pyg_dist.grads import GradientSync
from pyg_dist.metrics import global_means
from pyg_dist.nn.convert import to_distributed
from pyg_dist.runtime import distributed

__all__ = ["DistributedModel", "LocalLossWarning"]


class LocalLossWarning(UserWarning):
    """A backward through a :class:`~pyg_dist.DistributedModel` came from a
    loss not averaged over the nodes of all ranks (see
    :func:`~pyg_dist.cross_entropy`)."""


class DistributedModel(nn.Module):
    r"""Wraps ``module`` so that a PyG training loop trains it on every rank
    exactly as one process trains it on the whole graph:

    * its message-passing layers run distributed (:func:`~pyg_dist.nn.to_distributed`,
      in place, weights kept: ``GCNConv`` becomes
      :class:`~pyg_dist.nn.DistGCNConv`; Dist layers stay as they are);
    * its parameters and buffers start as rank 0's;
    * after every backward through its output, each parameter's gradient is
      the sum over the ranks of what that backward produced (an autograd
      hook: nothing to call; gradients accumulated before the backward are
      kept, not summed again).

    With the loss over all ranks' nodes, :func:`pyg_dist.cross_entropy` (or
    :func:`pyg_dist.global_mean`, or :mod:`pyg_dist.metrics`' losses), a step
    equals the single-process step. A backward after a forward with no such
    loss in between warns once
    (:class:`~pyg_dist.loop.LocalLossWarning`): a mean over this rank's nodes weighs the
    ranks' nodes unequally. Like
    :class:`~torch.nn.parallel.DistributedDataParallel`, it holds the model
    as ``.module`` (save ``model.module.state_dict()``; its keys are those of
    the PyG model) and every rank must run the same forwards and backwards.
    In a process group of one it is the model.

    .. code-block:: python

        model = pyg_dist.DistributedModel(GCN(...))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        out = model(data.x, data.edge_index)
        loss = pyg_dist.cross_entropy(out, data.y, data.train_mask)
        loss.backward()                  # gradients summed over the ranks here
        optimizer.step()

    Args:
        module (torch.nn.Module): The model, built alike on every rank.
        grad_compress (str, optional): How gradients travel:
            :obj:`None`/``"none"`` (one exact all-reduce after backward),
            ``"fp16"``, ``"powersgd:R"``, ``"covap:K"`` or ``"covap:auto"``
            (under DDP, overlapping backward; see
            :class:`~pyg_dist.grads.GradientSync`). (default: :obj:`None`)
        planned_steps (int, optional): Steps planned (PowerSGD's plain
            start). (default: :obj:`200`)
    """

    def __init__(self, module: nn.Module, grad_compress: str | None = None,
                 planned_steps: int = 200) -> None:
        super().__init__()
        if not isinstance(module, nn.Module) or isinstance(module, DistributedModel):
            raise TypeError(
                f"'DistributedModel' wraps a torch.nn.Module once (got "
                f"{type(module).__name__}); pass the model itself, e.g. "
                f"pyg_dist.DistributedModel(GCN(...))")
        to_distributed(module)
        distributed.sync_tensors([*module.parameters(), *module.buffers()])
        self.module = module
        self._sync = GradientSync(module, grad_compress, planned_steps=planned_steps)
        self._queued = False
        self._before: list[Tensor | None] = []
        self._losses = -1
        self._warned = False

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = self._sync(*args, **kwargs)
        if torch.is_grad_enabled() and distributed.is_distributed():
            self._losses = global_means()
            for tensor in _tensors(out):
                if tensor.requires_grad:
                    tensor.register_hook(self._output_grad)
        return out

    def _output_grad(self, grad: Tensor) -> Tensor | None:
        """The first gradient of this backward arrives: the sum is queued for
        its end; under DDP (whose hooks average) the gradient is scaled by
        the world size, so the average is the sum."""
        if not self._queued:
            self._queued = True
            self._before = [None if p.grad is None else p.grad.detach().clone()
                            for p in self._params()] if not self._sync.hooked else []
            torch.autograd.Variable._execution_engine.queue_callback(self._after_backward)
        return grad * self._sync.scale if self._sync.hooked else None

    def _after_backward(self) -> None:
        self._queued = False
        if not self._warned and global_means() == self._losses:
            self._warned = True
            warnings.warn(
                "a backward through pyg_dist.DistributedModel followed its forward without a "
                "loss over the nodes of all ranks: a mean over this rank's nodes "
                "(F.cross_entropy(out[mask], y[mask])) weighs each rank's nodes by its own "
                "count, and the summed step is not the single-process one. Use "
                "pyg_dist.cross_entropy(out, data.y, data.train_mask), or "
                "pyg_dist.global_mean(loss_sum, count) for another loss",
                LocalLossWarning, stacklevel=2)
        if self._sync.hooked:
            return
        params, before = self._params(), self._before
        for p, old in zip(params, before):
            if old is not None and p.grad is not None:
                p.grad.sub_(old)  # this backward's part alone is summed
        distributed.all_reduce_gradients(params)
        for p, old in zip(params, before):
            if old is not None:
                assert p.grad is not None, "all_reduce_gradients leaves every gradient set"
                p.grad.add_(old)
        self._before = []

    def _params(self) -> list[nn.Parameter]:
        return [p for p in self.module.parameters() if p.requires_grad]


def _tensors(out: Any) -> list[Tensor]:
    """The tensors of a model's output (a tensor, or tuples, lists and dicts of them)."""
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _tensors(item)]
    if isinstance(out, dict):
        return [t for item in out.values() for t in _tensors(item)]
    return []
