"""``Adaptive(tol, max_staleness)``: re-send a block only when it drifted (Sancus)."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pyg_dist.halo.exchange import Route, as_rows, exchange_route
from pyg_dist.halo.policy import FetchContext, HaloPolicy, HaloRows
from pyg_dist.halo.reuse import assemble, check_stale_grads, stale_grads_arguments

__all__ = ["Adaptive"]


class Adaptive(HaloPolicy):
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
        compress (str, optional): ``"fp16"``, ``"bf16"`` or ``"int8"`` messages.
            (default: :obj:`None`)
        cache_inputs (bool, optional): Reuse the halo of static inputs.
            (default: :obj:`True`)
    """

    name = "adaptive"

    def __init__(self, tol: float, max_staleness: int | None = 8,
                 stale_grads: str = "accumulate", compress: str | None = None,
                 cache_inputs: bool = True) -> None:
        super().__init__(compress, cache_inputs)
        self.stale_grads = check_stale_grads("Adaptive", stale_grads)
        if float(tol) < 0:
            raise ValueError(f"'Adaptive' needs tol >= 0 (got {tol})")
        if max_staleness is not None and max_staleness < 1:
            raise ValueError(f"'Adaptive' needs max_staleness >= 1 or None (got {max_staleness})")
        self.tol, self.max_staleness = float(tol), max_staleness

    def fetch(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        plan, state = ctx.channel.plan, ctx.state
        world = plan.world_size
        rows = as_rows(x.detach().index_select(0, plan.send_idx))
        if state.get("last_sent") is None or state["last_sent"].shape != rows.shape:
            state.update(last_sent=None, sent_at=[None] * world, halo=None, recv_at=[None] * world)
        send = self._blocks_to_send(rows, plan.send_counts, state, ctx.step)
        recv = self._announce(send, ctx)

        route = Route(
            plan.send_idx[torch.tensor(send, device=rows.device)[plan.send_peer]],
            [n if s else 0 for n, s in zip(plan.send_counts, send)],
            [n if r else 0 for n, r in zip(plan.recv_counts, recv)],
        )
        received = exchange_route(x, ctx.channel, ctx.layer, route, self.codec, ctx.direction)
        fresh = torch.tensor(recv, dtype=torch.bool, device=rows.device)[plan.halo_peer]
        halo = assemble(x, received, state["halo"], fresh, state, self.stale_grads)

        self._remember(rows, plan.send_counts, send, recv, halo, state, ctx.step)
        ages = [ctx.step - t for t, n in zip(state["recv_at"], plan.recv_counts) if n]
        staleness = max(ages, default=0)
        if not any(recv) and plan.num_halo:
            ctx.skip(staleness)
        else:
            ctx.used(staleness)
        return HaloRows(halo)

    def _blocks_to_send(self, rows: Tensor, counts: list[int], state: dict[str, Any],
                        step: int) -> list[bool]:
        """Which peers get their block this step (drifted, too old, or never sent)."""
        last = state["last_sent"]
        send = []
        offset = 0
        for q, n in enumerate(counts):
            block = rows[offset : offset + n]
            if n == 0:
                send.append(False)
            elif last is None or state["sent_at"][q] is None:
                send.append(True)
            else:
                ref = last[offset : offset + n]
                drift = (block - ref).float().norm() / ref.float().norm().clamp(min=1e-12)
                too_old = (self.max_staleness is not None
                           and step - state["sent_at"][q] >= self.max_staleness)
                send.append(bool(drift > self.tol) or too_old)
            offset += n
        return send

    def _announce(self, send: list[bool], ctx: FetchContext) -> list[bool]:
        """Tells each peer whether its block comes; returns which blocks will arrive."""
        plan = ctx.channel.plan
        flags = torch.tensor([[int(s)] for s, n in zip(send, plan.send_counts) if n],
                             dtype=torch.uint8, device=plan.send_idx.device).view(-1, 1)
        got = ctx.channel.move(flags, [int(n > 0) for n in plan.send_counts],
                               [int(n > 0) for n in plan.recv_counts], f"{ctx.layer}/flags",
                               ctx.direction)
        assert isinstance(got, Tensor), "a synchronous move returns a tensor"
        arriving, it = [], iter(got.view(-1).tolist())
        for n in plan.recv_counts:
            arriving.append(bool(next(it)) if n else False)
        return arriving

    def _remember(self, rows: Tensor, counts: list[int], send: list[bool], recv: list[bool],
                  halo: Tensor, state: dict[str, Any], step: int) -> None:
        """What each peer now holds (as decoded there) and when it got it."""
        last = state["last_sent"]
        if last is None or any(send):  # else no block changes: skip the codec round trip
            sent_rows = rows if self.codec is None else self.codec.decode(
                self.codec.encode(rows), rows.size(1), rows.dtype)
            last = sent_rows.clone() if last is None else last
            offset = 0
            for q, n in enumerate(counts):
                if send[q]:
                    last[offset : offset + n] = sent_rows[offset : offset + n]
                    state["sent_at"][q] = step
                offset += n
        for q, arrived in enumerate(recv):
            if arrived:
                state["recv_at"][q] = step
        state.update(last_sent=last, halo=halo.detach())

    def arguments(self) -> list[str]:
        return [f"tol={self.tol}", f"max_staleness={self.max_staleness}",
                *stale_grads_arguments(self.stale_grads), *super().arguments()]

    def spec(self) -> str:
        return f"adaptive:{self.tol}"

