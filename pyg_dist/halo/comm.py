"""Moving rows between ranks: the only place that sends halo traffic.

Two transports, chosen per process group: batched point-to-point messages to
the peers that need something (``"p2p"``, the default on gloo), or one
``all_to_all_single`` (``"all_to_all"``, the default on NCCL).
``benchmarks/exchange.py`` compares them: on gloo they are on par on an idle
machine and p2p is faster when other processes share the cores. Rows travel
as raw bytes, so every dtype (float16, bfloat16, int8 payloads) crosses every
backend bit for bit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from pyg_dist.runtime import distributed, env
from pyg_dist.runtime.distributed import Group

__all__ = ["exchange_rows", "PendingRows", "TRANSPORTS", "default_transport", "MAX_TAG"]

TRANSPORTS = env.TRANSPORTS
#: Largest point-to-point message tag (tags are 32-bit signed on every backend).
MAX_TAG = 2**31 - 1


def default_transport(group: Group = None) -> str:
    """``PYG_DIST_TRANSPORT`` if set, else all_to_all on NCCL and p2p otherwise."""
    return env.transport() or ("all_to_all" if distributed.backend(group) == "nccl" else "p2p")


@dataclass
class PendingRows:
    """Rows on their way; :meth:`wait` returns them (shape ``[sum(recv_counts), ...]``)."""

    recv: Tensor
    works: list
    send: Tensor | None = None  # kept alive until the exchange completes

    def wait(self) -> Tensor:
        distributed.wait_all(self.works, "halo exchange")
        self.works = []
        return self.recv


def exchange_rows(
    send: Tensor,
    send_counts: list[int],
    recv_counts: list[int],
    group: Group = None,
    transport: str | None = None,
    async_op: bool = False,
    tag: int = 0,
) -> Tensor | PendingRows:
    """Sends ``send[rows of peer q]`` to every peer ``q`` and receives
    ``recv_counts[q]`` rows from each, concatenated in peer order.

    Args:
        send: ``[sum(send_counts), *row_shape]``, rows for peer 0 first.
        send_counts / recv_counts: rows per peer (``world_size`` ints).
        group: process group (default group if :obj:`None`).
        transport: ``"p2p"`` or ``"all_to_all"``; :func:`default_transport` if :obj:`None`.
        async_op: return a :class:`PendingRows` instead of waiting.
        tag: message tag (point-to-point), so concurrent exchanges never mix.

    Returns:
        ``[sum(recv_counts), *row_shape]`` rows in ``send``'s dtype (or the pending exchange).
    """
    row_shape = send.shape[1:]
    recv = send.new_empty((sum(recv_counts), *row_shape))
    if not distributed.is_distributed(group):
        assert recv.numel() == 0, "a single rank has no halo to receive"
        return PendingRows(recv, []) if async_op else recv
    transport = transport or default_transport(group)
    send = send.contiguous()
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown transport '{transport}'; use one of {', '.join(TRANSPORTS)}")
    if transport == "p2p":
        works = _p2p(send, recv, send_counts, recv_counts, group, tag)
    else:
        works = distributed.all_to_all_single(_as_bytes(recv), _as_bytes(send), recv_counts,
                                              send_counts, group, "halo exchange")
    pending = PendingRows(recv, works, send)
    return pending if async_op else pending.wait()


def _as_bytes(t: Tensor) -> Tensor:
    """A ``[rows, bytes_per_row]`` uint8 view of a contiguous tensor."""
    flat = t.reshape(t.size(0), math.prod(t.shape[1:]))
    return flat.view(torch.uint8)


def _p2p(send: Tensor, recv: Tensor, send_counts, recv_counts, group, tag: int) -> list:
    rank = distributed.rank(group)
    send_b, recv_b = _as_bytes(send), _as_bytes(recv)
    sends, recvs, s_off, r_off = {}, {}, 0, 0
    for q, (n_send, n_recv) in enumerate(zip(send_counts, recv_counts)):
        if q != rank and n_recv > 0:
            recvs[q] = recv_b[r_off : r_off + n_recv]
        if q != rank and n_send > 0:
            sends[q] = send_b[s_off : s_off + n_send]
        s_off, r_off = s_off + n_send, r_off + n_recv
    return distributed.batch_send_recv(sends, recvs, group, tag, "halo exchange")
