"""``Adaptive(tol, max_staleness)``: re-send a block only when it drifted (Sancus)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from pyg_dist.halo.cache import HaloCache
from pyg_dist.halo.exchange import Route, as_rows, exchange_route
from pyg_dist.halo.policy import FetchContext, HaloRows
from pyg_dist.halo.reuse import ReusePolicy, ReuseState

__all__ = ["Adaptive", "AdaptiveState"]


@dataclass
class AdaptiveState(ReuseState):
    """:class:`ReuseState` plus, on the sending side, the rows each peer holds
    (``[S, F]``, as decoded there) and the step each block was sent."""

    sent: HaloCache = field(default_factory=HaloCache)


class Adaptive(ReusePolicy):
    r"""Staleness-aware skipping from `"Sancus: Staleness-Aware
    Communication-Avoiding Full-Graph Decentralized Training in Large-Scale
    Graph Neural Networks" <https://doi.org/10.14778/3538598.3538614>`_.

    Each step a rank compares the block of rows it owes each peer with the
    block it last sent that peer and re-sends it only if it drifted:

    .. math::
        \frac{\lVert \mathbf{H}_q^{(t)} - \mathbf{H}_q^{(sent)} \rVert_F}
        {\lVert \mathbf{H}_q^{(sent)} \rVert_F} > \mathrm{tol}

    or if it is ``max_staleness`` steps old. Receivers keep the last block
    from each peer. One byte per peer announces which blocks come (booked in
    the ledger under ``<layer>/flags``). Re-sent blocks are exchanged exactly,
    forward and backward; gradients of reused blocks are accumulated and sent
    with the block's next refresh, or dropped (``stale_grads``, as in
    :class:`Stale`).

    Args:
        tol (float): Relative drift that triggers a re-send (:math:`\ge 0`).
        max_staleness (int, optional): Re-send after this many steps regardless;
            :obj:`None` never forces one. (default: :obj:`8`)
        stale_grads (str, optional): ``"accumulate"`` or ``"drop"``.
            (default: :obj:`"accumulate"`)
        compress (str, optional): ``"fp16"``, ``"bf16"``, ``"int8"``, ``"int4"``
            or ``"int2"`` messages.
            (default: :obj:`None`)
        cache_inputs (bool, optional): Reuse the halo of static inputs.
            (default: :obj:`True`)
    """

    name = "adaptive"
    primary = "tol"

    def __init__(self, tol: float, max_staleness: int | None = 8,
                 stale_grads: str = "accumulate", compress: str | None = None,
                 cache_inputs: bool = True) -> None:
        super().__init__(stale_grads, compress, cache_inputs)
        if float(tol) < 0:
            raise ValueError(f"'Adaptive' needs tol >= 0 (got {tol})")
        if max_staleness is not None and max_staleness < 1:
            raise ValueError(f"'Adaptive' needs max_staleness >= 1 or None (got {max_staleness})")
        self.tol, self.max_staleness = float(tol), max_staleness

    def init_state(self) -> AdaptiveState:
        return AdaptiveState()

    def fetch(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        plan, state = ctx.channel.plan, ctx.state
        rows = as_rows(plan.gather(x.detach()))
        if not state.sent.matches(rows):  # first call, or the input's width changed
            state.sent.reset()
            state.halo.reset()
        send = self.blocks_to_send(rows, plan.send_counts, state.sent, ctx.step)
        recv = self._announce(send, ctx)

        route = Route.of_plan(plan, send, recv)
        key = ctx.channel.codec_key(ctx.layer, ctx.direction)  # the exchange's, next
        received = exchange_route(x, ctx.channel, ctx.layer, route, self.codec, ctx.direction)
        fresh = torch.tensor(recv, dtype=torch.bool, device=rows.device)[plan.halo_peer]
        halo = self.assemble(x, received, fresh, state, ctx.step)
        if any(send) or state.sent.rows is None:  # else no block changes: no codec round trip
            sent = torch.tensor(send, dtype=torch.bool, device=rows.device)[plan.send_peer]
            held = rows.clone() if state.sent.rows is None else state.sent.pull().clone()
            held[sent] = self._as_received(rows[sent], key)
            state.sent.push(held, ctx.step, sent)
        staleness = state.halo.age(ctx.step)
        if not any(recv) and plan.num_halo:
            ctx.skip(staleness)
        else:
            ctx.used(staleness)
        return HaloRows(halo)

    def _as_received(self, rows: Tensor, key: int) -> Tensor:
        """The rows sent (``[S', F]``, the route's) as their peers decode them:
        the same payload under the exchange's ``key``, so a stochastic codec's
        draws match too."""
        if self.codec is None:
            return rows
        return self.codec.decode(self.codec.encode(rows, key), rows.size(1), rows.dtype)

    def blocks_to_send(self, rows: Tensor, counts: list[int], sent: HaloCache,
                       step: int) -> list[bool]:
        """Which peers get their block this step: never sent, drifted past
        ``tol`` from what the peer holds, or ``max_staleness`` steps old."""
        decisions, offset = [], 0
        for n in counts:
            if n == 0:
                decisions.append(False)
            elif sent.rows is None:
                decisions.append(True)
            else:
                held = sent.pull()[offset : offset + n].float()
                drift = (rows[offset : offset + n].float() - held).norm() / held.norm().clamp(
                    min=1e-12)
                age = int(sent.ages(step)[offset])
                too_old = self.max_staleness is not None and age >= self.max_staleness
                decisions.append(bool(drift > self.tol) or too_old)
            offset += n
        return decisions

    def _announce(self, send: list[bool], ctx: FetchContext) -> list[bool]:
        """Tells each peer whether its block comes; returns which blocks will arrive."""
        plan = ctx.channel.plan
        flags = torch.tensor([[int(s)] for s, n in zip(send, plan.send_counts) if n],
                             dtype=torch.uint8, device=plan.device).view(-1, 1)
        got = ctx.channel.move(flags, [int(n > 0) for n in plan.send_counts],
                               [int(n > 0) for n in plan.recv_counts], f"{ctx.layer}/flags",
                               ctx.direction)
        assert isinstance(got, Tensor), "a synchronous move returns a tensor"
        arriving, it = [], iter(got.view(-1).tolist())
        for n in plan.recv_counts:
            arriving.append(bool(next(it)) if n else False)
        return arriving

    def options(self) -> dict[str, Any]:
        max_staleness = {} if self.max_staleness == 8 else {"max_staleness": self.max_staleness}
        return {"tol": self.tol, **max_staleness, **super().options()}
