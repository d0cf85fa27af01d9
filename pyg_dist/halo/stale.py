"""``Stale(every=k)``: bounded staleness (Sancus, DistGNN cd-r)."""
from __future__ import annotations

import torch
from torch import Tensor

from pyg_dist.halo.exchange import exchange_halo
from pyg_dist.halo.policy import FetchContext, HaloPolicy, HaloRows
from pyg_dist.halo.reuse import assemble, check_stale_grads, stale_grads_arguments

__all__ = ["Stale"]


class Stale(HaloPolicy):
    r"""Refreshes the halo every ``every`` steps and reuses it in between, so
    halo rows are at most ``every - 1`` steps old.

    A refresh step exchanges rows forward and gradients backward. Gradients of
    the reused rows on the steps in between are, with
    ``stale_grads="accumulate"`` (default), summed on the receiving rank and
    sent with the next refresh's gradients (delivered late, never lost, no
    extra traffic); with ``"drop"`` they are discarded (the reused rows are
    constants). ``Stale(every=1)`` is :class:`Exact`.

    Args:
        every (int): Steps between refreshes (:math:`\ge 1`).
        stale_grads (str, optional): ``"accumulate"`` or ``"drop"``.
            (default: :obj:`"accumulate"`)
        compress (str, optional): ``"fp16"``, ``"bf16"`` or ``"int8"`` messages.
            (default: :obj:`None`)
        cache_inputs (bool, optional): Reuse the halo of static inputs.
            (default: :obj:`True`)
    """

    name = "stale"

    def __init__(self, every: int, stale_grads: str = "accumulate", compress: str | None = None,
                 cache_inputs: bool = True) -> None:
        super().__init__(compress, cache_inputs)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"'Stale' needs every >= 1 (got {every!r}); every=1 is Exact()")
        self.every, self.stale_grads = every, check_stale_grads("Stale", stale_grads)

    def fetch(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        state = ctx.state
        cached: Tensor | None = state.get("halo")
        if cached is not None and cached.shape[1:] != x.shape[1:]:
            cached = None
        num_halo = ctx.channel.plan.num_halo
        age = ctx.step - state["refreshed_at"] if cached is not None else self.every
        if age < self.every:
            ctx.skip(staleness=age)
            received = x.new_zeros(0, *x.shape[1:])
            fresh = torch.zeros(num_halo, dtype=torch.bool, device=x.device)
        else:
            received = exchange_halo(x, ctx.channel, ctx.layer, self.codec, ctx.direction)
            fresh = torch.ones(num_halo, dtype=torch.bool, device=x.device)
            state.update(halo=received.detach(), refreshed_at=ctx.step)
        return HaloRows(assemble(x, received, cached, fresh, state, self.stale_grads))

    def arguments(self) -> list[str]:
        return [f"every={self.every}", *stale_grads_arguments(self.stale_grads),
                *super().arguments()]

    def spec(self) -> str:
        return f"stale:{self.every}"
