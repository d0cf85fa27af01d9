"""``Cached``: fetch once, reuse forever."""
from __future__ import annotations

from torch import Tensor

from pyg_dist.halo.exchange import exchange_halo
from pyg_dist.halo.policy import FetchContext, HaloPolicy, HaloRows

__all__ = ["Cached"]


class Cached(HaloPolicy):
    r"""Fetches a layer's halo at its first call and reuses it at every later
    call, whatever the input: meant for static inputs (e.g. precomputed
    features), where it is exact. The cached rows are constants: no gradient
    flows back to their owners.

    Args:
        compress (str, optional): ``"fp16"``, ``"bf16"`` or ``"int8"`` for the one
            exchange. (default: :obj:`None`)
    """

    name = "cached"

    def fetch(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        cached = ctx.state.get("halo")
        if cached is not None and cached.shape[1:] == x.shape[1:]:
            ctx.skip(staleness=ctx.step - ctx.state["fetched_at"])
            return HaloRows(cached)
        rows = exchange_halo(x.detach(), ctx.channel, ctx.layer, self.codec, ctx.direction)
        ctx.state.update(halo=rows, fetched_at=ctx.step)
        return HaloRows(rows)
