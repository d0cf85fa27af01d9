"""The exact halo exchange as an autograd Function.

Forward sends every peer the owned rows it needs and returns this rank's halo
rows; backward sends the halo rows' gradients back to their owners, which add
them to the gradients of the rows they sent.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from pyg_dist.halo.comm import PendingRows, exchange_rows
from pyg_dist.halo.ledger import Ledger
from pyg_dist.halo.plan import HaloPlan

__all__ = ["HaloChannel", "exchange_halo"]


@dataclass
class HaloChannel:
    """Everything a rank needs to exchange halo rows of one graph: its plan,
    the process group, the transport and the ledger that counts the traffic."""

    plan: HaloPlan
    ledger: Ledger
    group: dist.ProcessGroup | None = None
    transport: str | None = None

    @property
    def active(self) -> bool:
        """Whether this rank sends or receives anything at all."""
        return self.plan.num_send > 0 or self.plan.num_halo > 0

    def gather_send(self, x: Tensor) -> Tensor:
        """The rows of ``x`` this rank sends, peer after peer: ``[S, *]``."""
        return x.index_select(0, self.plan.send_idx)

    def send_forward(self, rows: Tensor, async_op: bool = False) -> Tensor | PendingRows:
        """Sends ``rows`` (``[S, *]``, from :meth:`gather_send`), receives ``[H, *]`` halo rows."""
        return exchange_rows(
            rows, self.plan.send_counts, self.plan.recv_counts, self.group, self.transport,
            async_op,
        )

    def send_backward(self, grad_halo: Tensor, async_op: bool = False) -> Tensor | PendingRows:
        """Returns halo gradients (``[H, *]``) to their owners, receives ``[S, *]``."""
        return exchange_rows(
            grad_halo, self.plan.recv_counts, self.plan.send_counts, self.group, self.transport,
            async_op,
        )

    def scatter_back(self, grad_rows: Tensor, num_owned: int) -> Tensor:
        """Adds the received gradients ``[S, *]`` onto owned rows: ``[num_owned, *]``."""
        out = grad_rows.new_zeros((num_owned, *grad_rows.shape[1:]))
        return out.index_add_(0, self.plan.send_idx, grad_rows)


def exchange_halo(x: Tensor, channel: HaloChannel, layer: str) -> Tensor:
    r"""Returns this rank's halo rows of ``x`` (exact, every call), differentiable:
    gradients of the returned rows flow back to the ranks that own them.

    Shapes:
        - **input:** ``x`` :obj:`[num_owned, *]`
        - **output:** :obj:`[num_halo, *]`, the dtype of ``x``
    """
    return _ExactExchange.apply(x, channel, layer)


class _ExactExchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, channel: HaloChannel, layer: str) -> Tensor:  # type: ignore[override]
        ctx.channel, ctx.layer, ctx.num_owned = channel, layer, x.size(0)
        start = time.perf_counter()
        send = channel.gather_send(x)
        halo = channel.send_forward(send)
        assert isinstance(halo, Tensor), "a synchronous exchange returns a tensor"
        _record(channel, layer, "fwd", send, halo, start)
        return halo

    @staticmethod
    def backward(ctx: Any, grad_halo: Tensor) -> tuple[Tensor | None, None, None]:  # type: ignore[override]
        channel: HaloChannel = ctx.channel
        start = time.perf_counter()
        grad_halo = grad_halo.contiguous()
        grad_rows = channel.send_backward(grad_halo)
        assert isinstance(grad_rows, Tensor), "a synchronous exchange returns a tensor"
        _record(channel, ctx.layer, "bwd", grad_halo, grad_rows, start)
        return channel.scatter_back(grad_rows, ctx.num_owned), None, None


def _record(
    channel: HaloChannel, layer: str, direction: str, sent: Tensor, received: Tensor, start: float
) -> None:
    if not channel.active:
        return
    channel.ledger.record(
        layer,
        direction,
        bytes_sent=sent.numel() * sent.element_size(),
        bytes_recv=received.numel() * received.element_size(),
        exchanges=1,
        seconds=time.perf_counter() - start,
    )
