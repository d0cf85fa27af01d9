"""Reusing halo rows across steps: what happens to their gradients.

A policy that reuses a halo row for a few steps (``Stale``, ``Adaptive``)
decides what to do with the gradients computed for it meanwhile:

* ``"accumulate"`` (default): the receiving rank sums them and sends the sum
  to the owner with the gradients of the next step that refreshes the row, so
  every remote gradient reaches its owner, up to ``every - 1`` steps late
  (like PipeGCN's stale gradients, at no extra traffic);
* ``"drop"``: the reused rows are constants and their gradients are discarded.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["assemble", "STALE_GRADS", "check_stale_grads", "stale_grads_arguments"]

STALE_GRADS = ("accumulate", "drop")


def check_stale_grads(policy: str, stale_grads: str) -> str:
    """``stale_grads``, or an error naming the choices."""
    if stale_grads not in STALE_GRADS:
        raise ValueError(f"'{policy}' got stale_grads='{stale_grads}'; use one of "
                         f"{', '.join(STALE_GRADS)}")
    return stale_grads


def stale_grads_arguments(stale_grads: str) -> list[str]:
    """The ``stale_grads`` part of a policy's repr (empty for the default)."""
    return [] if stale_grads == "accumulate" else [f"stale_grads='{stale_grads}'"]


def assemble(x: Tensor, received: Tensor, cached: Tensor | None, fresh: Tensor,
             state: dict[str, Any], stale_grads: str) -> Tensor:
    """The halo rows: ``received`` (``[fresh.sum(), F]``) at the ``fresh``
    positions, ``cached`` (``[H, F]``, or zeros) elsewhere. Backward returns
    the gradients of the fresh rows, plus the ones accumulated for them while
    they were reused (``stale_grads="accumulate"``, kept in ``state``).
    ``x`` is the layer's input: it makes the result part of the graph even on
    steps that receive nothing."""
    return _Assemble.apply(x, received, cached, fresh, state, stale_grads)


class _Assemble(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, received: Tensor, cached: Tensor | None,  # type: ignore[override]
                fresh: Tensor, state: dict[str, Any], stale_grads: str) -> Tensor:
        shape = (fresh.numel(), *received.shape[1:])
        halo = cached.clone() if cached is not None else received.new_zeros(shape)
        halo[fresh] = received
        ctx.fresh, ctx.state, ctx.stale_grads = fresh, state, stale_grads
        return halo

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        fresh, state = ctx.fresh, ctx.state
        grad_received = grad[fresh]
        if ctx.stale_grads == "accumulate":
            acc = state.get("grad_acc")
            if acc is None or acc.shape != grad.shape:
                acc = torch.zeros_like(grad)
            grad_received = grad_received + acc[fresh]
            acc[fresh] = 0.0
            acc[~fresh] += grad[~fresh]
            state["grad_acc"] = acc
        return None, grad_received, None, None, None, None
