"""``Stale(every=k)``: bounded staleness (Sancus, DistGNN cd-r)."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pyg_dist.halo.policy import FetchContext, HaloRows
from pyg_dist.halo.reuse import ReusePolicy, ReuseState

__all__ = ["Stale"]


class Stale(ReusePolicy):
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
        compress (str, optional): ``"fp16"``, ``"bf16"``, ``"int8"``, ``"int4"``
            or ``"int2"`` messages.
            (default: :obj:`None`)
        cache_inputs (bool, optional): Reuse the halo of static inputs.
            (default: :obj:`True`)
    """

    name = "stale"
    primary = "every"
    usage = "stale:K"

    def __init__(self, every: int, stale_grads: str = "accumulate", compress: str | None = None,
                 cache_inputs: bool = True) -> None:
        super().__init__(stale_grads, compress, cache_inputs)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"'Stale' needs every >= 1 (got {every!r}); every=1 is Exact()")
        self.every = every

    def fetch(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        state: ReuseState = ctx.state
        num_halo = ctx.channel.plan.num_halo
        # the schedule, not the rows' ages: a rank without halo rows still sends
        age = state.age(ctx.step, self.every) if state.halo.matches(x) else self.every
        refresh = age >= self.every
        if refresh:
            received = ctx.exchange(x, self.codec)
            state.refreshed = ctx.step
        else:
            ctx.skip(staleness=age)
            received = x.new_zeros(0, *x.shape[1:])
        fresh = torch.full((num_halo,), refresh, dtype=torch.bool, device=x.device)
        return HaloRows(self.assemble(x, received, fresh, state, ctx.step))

    def options(self) -> dict[str, Any]:
        return {"every": self.every, **super().options()}
