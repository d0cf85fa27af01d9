"""``Stale(every=k)``: bounded staleness (Sancus, DistGNN cd-r)."""
from __future__ import annotations

from torch import Tensor

from pyg_dist.halo.exchange import exchange_halo
from pyg_dist.halo.policy import FetchContext, HaloPolicy, HaloRows

__all__ = ["Stale"]


class Stale(HaloPolicy):
    r"""Refreshes the halo every ``every`` steps and reuses it in between, so
    halo rows are at most ``every - 1`` steps old.

    A refresh step is an exact exchange, forward and backward. On the steps in
    between the reused rows are constants: their gradients are *dropped*, not
    sent (owners receive no gradient from remote uses of their rows on those
    steps, and nothing is accumulated for later). ``Stale(every=1)`` is
    :class:`Exact`.

    Args:
        every (int): Steps between refreshes (:math:`\ge 1`).
        compress (str, optional): ``"fp16"``, ``"bf16"`` or ``"int8"`` messages.
            (default: :obj:`None`)
        cache_inputs (bool, optional): Reuse the halo of static inputs.
            (default: :obj:`True`)
    """

    name = "stale"

    def __init__(self, every: int, compress: str | None = None, cache_inputs: bool = True):
        super().__init__(compress, cache_inputs)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"'Stale' needs every >= 1 (got {every!r}); every=1 is Exact()")
        self.every = every

    def fetch(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        state = ctx.state
        cached: Tensor | None = state.get("halo")
        if cached is not None and cached.shape[1:] == x.shape[1:]:
            age = ctx.step - state["refreshed_at"]
            if age < self.every:
                ctx.skip(staleness=age)
                return HaloRows(cached)
        rows = exchange_halo(x, ctx.channel, ctx.layer, self.codec, ctx.direction)
        state.update(halo=rows.detach(), refreshed_at=ctx.step)
        return HaloRows(rows)

    def arguments(self) -> list[str]:
        return [f"every={self.every}", *super().arguments()]

    def spec(self) -> str:
        return f"stale:{self.every}"
