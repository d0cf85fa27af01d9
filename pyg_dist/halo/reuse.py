"""Reusing halo rows across steps, and what happens to their gradients: the
base of :class:`~pyg_dist.halo.Stale` and :class:`~pyg_dist.halo.Adaptive`.

A policy that reuses a halo row for a few steps decides what to do with the
gradients computed for it meanwhile (``stale_grads``):

* ``"accumulate"`` (default): the receiving rank sums them and sends the sum
  to the owner with the gradients of the next step that refreshes the row, so
  every remote gradient reaches its owner, late but never lost (like PipeGCN's
  stale gradients, at no extra traffic);
* ``"drop"``: the reused rows are constants and their gradients are discarded.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from pyg_dist.halo.cache import HaloCache
from pyg_dist.halo.compress import Codec
from pyg_dist.halo.policy import HaloPolicy, PolicyState

__all__ = ["ReusePolicy", "ReuseState", "STALE_GRADS"]

STALE_GRADS = ("accumulate", "drop")


@dataclass
class ReuseState(PolicyState):
    """The halo rows in use (with the step each arrived), the gradients
    collected for reused rows that were not sent yet (``[H, F]``) and the step
    of the last exchange that refreshed every row (:obj:`None` before the
    first): the same on every rank, also on one that holds no halo rows but
    sends some."""

    halo: HaloCache = field(default_factory=HaloCache)
    grad_acc: Tensor | None = None
    refreshed: int | None = None

    def age(self, step: int, every: int) -> int:
        """Steps since the last refresh of every row (``every`` when the rows
        of this width were never fetched)."""
        return every if self.refreshed is None else step - self.refreshed

    def take_grads(self, grad: Tensor, fresh: Tensor, stale_grads: str) -> Tensor:
        """Of ``grad`` (``[H, F]``, this step's halo gradients), what goes to the
        owners of the ``fresh`` rows; with ``"accumulate"`` that adds what was
        collected for them, and the gradients of the reused rows are collected."""
        sent = grad[fresh]
        if stale_grads == "accumulate":
            if self.grad_acc is None or self.grad_acc.shape != grad.shape:
                self.grad_acc = torch.zeros_like(grad)
            sent = sent + self.grad_acc[fresh]
            self.grad_acc[fresh] = 0.0
            self.grad_acc[~fresh] += grad[~fresh]
        return sent


class ReusePolicy(HaloPolicy):
    """A policy that refreshes some halo rows each step and reuses the others.

    Args:
        stale_grads (str): ``"accumulate"`` or ``"drop"``.
        compress (str, optional): ``"fp16"``, ``"bf16"``, ``"int8"``, ``"int4"``
            or ``"int2"`` messages.
        cache_inputs (bool, optional): Reuse the halo of static inputs.
    """

    def __init__(self, stale_grads: str = "accumulate", compress: str | Codec | None = None,
                 cache_inputs: bool = True) -> None:
        super().__init__(compress, cache_inputs)
        if stale_grads not in STALE_GRADS:
            raise ValueError(f"'{type(self).__name__}' got stale_grads='{stale_grads}'; use one "
                             f"of {', '.join(STALE_GRADS)}")
        self.stale_grads = stale_grads

    def init_state(self) -> ReuseState:
        return ReuseState()

    def assemble(self, x: Tensor, received: Tensor, fresh: Tensor, state: ReuseState,
                 step: int) -> Tensor:
        """The halo rows of this step: ``received`` (``[fresh.sum(), F]``) at the
        ``fresh`` positions (``[H]`` bool), the cached rows elsewhere; stored
        back into ``state.halo``. Backward returns the gradients of the fresh
        rows (see :meth:`ReuseState.take_grads`). ``x``, the layer's input,
        keeps the result in the autograd graph even on steps that receive nothing."""
        cached = state.halo.pull() if state.halo.matches(received) else None
        halo = _Assemble.apply(x, received, cached, fresh, state, self.stale_grads)
        state.halo.push(halo, step, fresh)
        return halo

    def options(self) -> dict[str, Any]:
        out = {} if self.stale_grads == "accumulate" else {"stale_grads": self.stale_grads}
        return {**out, **super().options()}


class _Assemble(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, received: Tensor, cached: Tensor | None,  # type: ignore[override]
                fresh: Tensor, state: ReuseState, stale_grads: str) -> Tensor:
        shape = (fresh.numel(), *received.shape[1:])
        halo = cached.clone() if cached is not None else received.new_zeros(shape)
        halo[fresh] = received
        ctx.fresh, ctx.state, ctx.stale_grads = fresh, state, stale_grads
        return halo

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        sent = ctx.state.take_grads(grad, ctx.fresh, ctx.stale_grads)
        return None, sent, None, None, None, None
