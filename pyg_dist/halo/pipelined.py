"""``Pipelined``: use last step's halo while this step's travels (PipeGCN)."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pyg_dist.halo.exchange import Transfer, as_rows, exchange_halo
from pyg_dist.halo.policy import FetchContext, HaloPolicy, HaloRows

__all__ = ["Pipelined"]


class Pipelined(HaloPolicy):
    r"""Pipelined exchange from `"PipeGCN: Efficient Full-Graph Training of
    Graph Convolutional Networks with Pipelined Feature Communication"
    <https://arxiv.org/abs/2203.10428>`_.

    Step :math:`t` aggregates with the halo rows exchanged during step
    :math:`t-1` while step :math:`t`'s rows travel in the background,
    overlapping the rest of the step; likewise backward applies the halo
    gradients sent back during step :math:`t-1` and sends step :math:`t`'s in
    the background. The first step is an exact exchange. With
    ``smoothing`` :math:`\gamma`, stale values and gradients are smoothed
    exponentially (PipeGCN-GF):
    :math:`\tilde{\mathbf{h}}_t = \gamma \tilde{\mathbf{h}}_{t-1} + (1 - \gamma)\mathbf{h}_{t-1}`.

    Args:
        smoothing (float, optional): :math:`\gamma \in [0, 1)`; :obj:`None` for
            none. (default: :obj:`None`)
        compress (str, optional): ``"fp16"``, ``"bf16"`` or ``"int8"`` messages.
            (default: :obj:`None`)
        cache_inputs (bool, optional): Reuse the halo of static inputs.
            (default: :obj:`True`)
    """

    name = "pipelined"

    def __init__(self, smoothing: float | None = None, compress: str | None = None,
                 cache_inputs: bool = True) -> None:
        super().__init__(compress, cache_inputs)
        if smoothing is not None and not 0.0 <= smoothing < 1.0:
            raise ValueError(f"'Pipelined' needs 0 <= smoothing < 1 (got {smoothing})")
        self.smoothing = smoothing

    def fetch(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        state = ctx.state
        self._land_rows(state)
        if state.get("halo") is None or state["halo"].shape[1:] != x.shape[1:]:
            rows = exchange_halo(x, ctx.channel, ctx.layer, self.codec, ctx.direction)
            state["halo"] = rows.detach()
            return HaloRows(rows)
        ctx.used(staleness=1)
        return HaloRows(_Pipelined.apply(x, state["halo"], self, ctx))

    def smooth(self, old: Tensor | None, new: Tensor) -> Tensor:
        if self.smoothing is None or old is None or old.shape != new.shape:
            return new
        return self.smoothing * old + (1.0 - self.smoothing) * new

    def _land_rows(self, state: dict[str, Any]) -> None:
        pending: Transfer | None = state.pop("pending_rows", None)
        if pending is not None:
            state["halo"] = self.smooth(state.get("halo"), pending.wait())

    def _land_grads(self, state: dict[str, Any]) -> None:
        pending: Transfer | None = state.pop("pending_grads", None)
        if pending is not None:
            state["grads"] = self.smooth(state.get("grads"), pending.wait())

    def flush(self, state: dict[str, Any]) -> None:
        self._land_rows(state)
        self._land_grads(state)

    def arguments(self) -> list[str]:
        smoothing = [] if self.smoothing is None else [f"smoothing={self.smoothing}"]
        return [*smoothing, *super().arguments()]


class _Pipelined(torch.autograd.Function):
    """Returns last step's halo; sends this step's rows (forward) and halo
    gradients (backward) in the background."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, halo: Tensor, policy: Pipelined,  # type: ignore[override]
                fetch: FetchContext) -> Tensor:
        channel, plan = fetch.channel, fetch.channel.plan
        rows = as_rows(x.detach().index_select(0, plan.send_idx))
        fetch.state["pending_rows"] = channel.move(
            rows, plan.send_counts, plan.recv_counts, fetch.layer, fetch.direction,
            policy.codec, async_op=True,
        )
        ctx.policy, ctx.fetch, ctx.num_owned = policy, fetch, x.size(0)
        return halo.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        fetch: FetchContext = ctx.fetch
        channel, plan, state = fetch.channel, fetch.channel.plan, fetch.state
        ctx.policy._land_grads(state)
        stale = state.get("grads")
        state["pending_grads"] = channel.move(
            as_rows(grad.contiguous()), plan.recv_counts, plan.send_counts,
            fetch.layer, "bwd", ctx.policy.codec, async_op=True,
        )
        if stale is None:
            grad_x = grad.new_zeros(ctx.num_owned, *grad.shape[1:])
        else:
            grad_x = channel.scatter_back(stale.view(-1, *grad.shape[1:]), plan.send_idx,
                                          ctx.num_owned)
        return grad_x, None, None, None
