"""``Pipelined``: use last step's halo while this step's travels (PipeGCN)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from pyg_dist.halo.cache import HaloCache
from pyg_dist.halo.exchange import Transfer, as_rows
from pyg_dist.halo.policy import FetchContext, HaloPolicy, HaloRows, PolicyState, transient

__all__ = ["Pipelined", "PipelinedState"]


@dataclass
class PipelinedState(PolicyState):
    """The (smoothed) halo rows and halo gradients of the previous step, and
    the exchanges of this step still in flight (never checkpointed: flushed first)."""

    halo: HaloCache = field(default_factory=HaloCache)
    grads: HaloCache = field(default_factory=HaloCache)
    pending_rows: Transfer | None = transient()
    pending_grads: Transfer | None = transient()
    pending_step: int = transient(0)

    def land(self, which: str, smooth: Any) -> None:
        """Waits for the rows (``which="rows"``) or gradients (``"grads"``) in
        flight and stores them, passed through ``smooth(cache, new)``, in their cache."""
        cache = self.halo if which == "rows" else self.grads
        transfer: Transfer | None = getattr(self, f"pending_{which}")
        if transfer is not None:
            setattr(self, f"pending_{which}", None)
            cache.push(smooth(cache, transfer.wait()), self.pending_step)


class Pipelined(HaloPolicy):
    r"""Pipelined exchange from `"PipeGCN: Efficient Full-Graph Training of
    Graph Convolutional Networks with Pipelined Feature Communication"
    <https://arxiv.org/abs/2203.10428>`_.

    Step :math:`t \ge 1` aggregates with the halo rows exchanged during step
    :math:`t-1` while step :math:`t`'s rows travel in the background,
    overlapping the rest of the step; likewise backward applies the halo
    gradients sent back during step :math:`t-1` and sends step :math:`t`'s in
    the background. Step 0 exchanges exactly, forward and backward, so step 1
    has no late gradients to apply. With ``smoothing`` :math:`\gamma`, stale
    values and gradients are smoothed exponentially (PipeGCN-GF):
    :math:`\tilde{\mathbf{h}}_t = \gamma \tilde{\mathbf{h}}_{t-1} + (1 - \gamma)\mathbf{h}_{t-1}`,
    starting from :math:`\tilde{\mathbf{h}}_1 = \mathbf{h}_0`.

    Args:
        smoothing (float, optional): :math:`\gamma \in [0, 1)`; :obj:`None` for
            none. (default: :obj:`None`)
        compress (str, optional): ``"fp16"``, ``"bf16"``, ``"int8"``, ``"int4"``
            or ``"int2"`` messages.
            (default: :obj:`None`)
        cache_inputs (bool, optional): Reuse the halo of static inputs.
            (default: :obj:`True`)
    """

    name = "pipelined"
    primary = "smoothing"
    usage = "pipelined[:SMOOTHING]"

    def __init__(self, smoothing: float | None = None, compress: str | None = None,
                 cache_inputs: bool = True) -> None:
        super().__init__(compress, cache_inputs)
        if smoothing is not None and not 0.0 <= smoothing < 1.0:
            raise ValueError(f"'Pipelined' needs 0 <= smoothing < 1 (got {smoothing})")
        self.smoothing = smoothing

    def init_state(self) -> PipelinedState:
        return PipelinedState()

    def fetch(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        state: PipelinedState = ctx.state
        state.land("rows", self.smooth)
        if not state.halo.matches(x):
            rows = ctx.exchange(x, self.codec)
            state.halo.push(rows, ctx.step)
            return HaloRows(rows)
        ctx.used(staleness=1)
        return HaloRows(_Pipelined.apply(x, state.halo.pull(), self, ctx))

    def smooth(self, old: HaloCache, new: Tensor) -> Tensor:
        """``new`` smoothed with what ``old`` holds (``new`` itself without smoothing)."""
        if self.smoothing is None or old.rows is None or old.rows.shape != new.shape:
            return new
        return self.smoothing * old.rows + (1.0 - self.smoothing) * new

    def flush(self, state: PolicyState) -> None:
        """Lands the rows and gradients in flight in the caches."""
        assert isinstance(state, PipelinedState), "Pipelined keeps a PipelinedState"
        state.land("rows", self.smooth)
        state.land("grads", self.smooth)

    def options(self) -> dict[str, Any]:
        smoothing = {} if self.smoothing is None else {"smoothing": self.smoothing}
        return {**smoothing, **super().options()}


class _Pipelined(torch.autograd.Function):
    """Returns last step's halo; sends this step's rows (forward) and halo
    gradients (backward) in the background."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, halo: Tensor, policy: Pipelined,  # type: ignore[override]
                fetch: FetchContext) -> Tensor:
        channel, plan = fetch.channel, fetch.channel.plan
        rows = as_rows(plan.gather(x.detach()))
        fetch.state.pending_step = fetch.step
        fetch.state.pending_rows = channel.move(
            rows, plan.send_counts, plan.recv_counts, fetch.layer, fetch.direction,
            policy.codec, async_op=True, partial=plan.partial_counts(),
        )
        ctx.policy, ctx.fetch, ctx.num_owned = policy, fetch, x.size(0)
        return halo.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        fetch: FetchContext = ctx.fetch
        channel, plan, state = fetch.channel, fetch.channel.plan, fetch.state
        state.land("grads", ctx.policy.smooth)
        stale = state.grads.rows
        state.pending_grads = channel.move(
            as_rows(grad.contiguous()), plan.recv_counts, plan.send_counts,
            fetch.layer, "bwd", ctx.policy.codec, async_op=True,
            partial=plan.partial_counts()[::-1],
        )
        if stale is None:
            grad_x = grad.new_zeros(ctx.num_owned, *grad.shape[1:])
        else:
            grad_x = plan.scatter_back(stale.view(-1, *grad.shape[1:]), ctx.num_owned)
        return grad_x, None, None, None
