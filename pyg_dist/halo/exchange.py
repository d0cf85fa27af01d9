"""Moving halo rows: the channel of one graph on one rank, and the exchange as
an autograd Function.

Forward sends every peer the owned rows it needs and returns this rank's halo
rows; backward sends the halo rows' gradients back to their owners, which add
them to the gradients of the rows they sent. A :class:`Route` can restrict an
exchange to some peers or rows (policies that refresh only part of the halo).
"""
from __future__ import annotations

import math
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from pyg_dist.halo.comm import MAX_TAG, PendingRows, exchange_rows
from pyg_dist.halo.compress import Codec
from pyg_dist.halo.ledger import DIRECTIONS, Ledger
from pyg_dist.halo.plan import HaloPlan

__all__ = ["HaloChannel", "Route", "Transfer", "exchange_halo", "exchange_route", "as_rows"]


@dataclass
class Route:
    """Which rows move in one exchange, seen from this rank.

    Attributes:
        send_idx: ``[S]`` owned rows to send, peer after peer (a selection;
            ignored when ``plan`` is set).
        send_counts: rows sent to each peer.
        recv_counts: rows received from each peer (concatenated in peer order).
        plan: The plan whose sent rows (:meth:`HaloPlan.gather`) move, those
            in ``rows`` only; :obj:`None`: the selection ``send_idx``.
        rows: ``[plan.num_send]`` bool, the plan's sent rows that move;
            :obj:`None` for all.
        partial: Partial sums among the rows sent and received (the ledger
            books them apart from rows).
    """

    send_idx: Tensor
    send_counts: list[int]
    recv_counts: list[int]
    plan: HaloPlan | None = None
    rows: Tensor | None = None
    partial: tuple[int, int] = (0, 0)

    @staticmethod
    def of_plan(plan: HaloPlan, send: list[bool] | None = None,
                recv: list[bool] | None = None) -> Route:
        """The route of ``plan``'s blocks to the peers in ``send`` and from
        those in ``recv`` (per peer; :obj:`None`: every block).

        Args:
            plan (HaloPlan): The plan.
            send (list[bool], optional): Whether each peer's block is sent.
                (default: :obj:`None`)
            recv (list[bool], optional): Whether each peer's block is
                received. (default: :obj:`None`)
        """
        rows = None
        if send is not None:
            rows = torch.tensor(send, dtype=torch.bool, device=plan.device)[plan.send_peer]
        send_counts = plan.send_counts if send is None else [
            n if s else 0 for n, s in zip(plan.send_counts, send)]
        recv_counts = plan.recv_counts if recv is None else [
            n if r else 0 for n, r in zip(plan.recv_counts, recv)]
        return Route(plan.send_idx, send_counts, recv_counts, plan, rows,
                     plan.partial_counts(send, recv))

    def gather(self, x: Tensor) -> Tensor:
        """The rows this route sends, made from ``x`` (``[num_owned, *]``)."""
        if self.plan is None:
            return x.index_select(0, self.send_idx)
        return self.plan.gather(x, self.rows)

    def scatter_back(self, grad: Tensor, num_owned: int) -> Tensor:
        """The owned rows' gradient from that of the rows sent (adjoint of
        :meth:`gather`)."""
        if self.plan is None:
            out = grad.new_zeros((num_owned, *grad.shape[1:]))
            return out.index_add_(0, self.send_idx, grad)
        return self.plan.scatter_back(grad, num_owned, self.rows)

    def reversed_counts(self) -> tuple[list[int], list[int]]:
        """Counts of the backward exchange: halo gradients go back to their owners."""
        return self.recv_counts, self.send_counts


@dataclass
class Transfer:
    """An exchange in flight; :meth:`wait` returns the decoded rows and books
    the time this rank was blocked waiting and the time the transfer travelled
    while the rank did other work (between issuing and waiting)."""

    pending: PendingRows
    channel: HaloChannel
    layer: str
    direction: str
    num_feats: int
    dtype: torch.dtype
    codec: Codec | None
    issued: float

    def wait(self) -> Tensor:
        start = time.perf_counter()
        received = self.pending.wait()
        blocked = time.perf_counter() - start
        self.channel.ledger.record(self.layer, self.direction, seconds=blocked,
                                   overlapped=max(0.0, start - self.issued))
        return self.channel.decode(received, self.num_feats, self.dtype, self.codec)


@dataclass
class HaloChannel:
    """Everything a rank needs to exchange halo rows of one graph: its plan,
    the process group (a ``torch.distributed.ProcessGroup``, :obj:`None` for
    the default one), the transport and the ledger that counts the traffic.

    Args:
        plan (HaloPlan): Which rows go to and come from each peer.
        ledger (Ledger): Counts the traffic.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default one. (default: :obj:`None`)
        transport (str, optional): :obj:`"p2p"` or :obj:`"all_to_all"`;
            :obj:`None` for ``PYG_DIST_TRANSPORT`` if set, else
            :obj:`"all_to_all"` on NCCL and :obj:`"p2p"` otherwise.
            (default: :obj:`None`)
        shared (object, optional): A ``SharedExchange``
            (``pyg_dist.halo.shared``) that shares one exchange of an input
            among the relations of a heterogeneous layer that read this
            channel's node type; :obj:`None` for none. (default: :obj:`None`)
    """

    plan: HaloPlan
    ledger: Ledger
    group: Any = None
    transport: str | None = None
    _tags: dict[str, int] = field(default_factory=dict, repr=False)
    shared: Any = field(default=None, repr=False)

    @contextmanager
    def trial(self) -> Iterator[Ledger]:
        """A block whose traffic is booked in a ledger of its own (yielded),
        the channel's own ledger untouched."""
        kept, self.ledger = self.ledger, Ledger()
        try:
            yield self.ledger
        finally:
            self.ledger = kept

    def tag(self, name: str, direction: str) -> int:
        """The message tag of exchange ``name`` (a layer, ``<layer>/flags``, ...)
        in ``direction``: from the exchange's index in order of first use,
        which is the same on every rank (all ranks run the same layers in the
        same order), so exchanges in flight at the same time never pair up
        wrongly. Raises instead of reusing a tag."""
        index = self._tags.setdefault(name, len(self._tags))
        tag = 1 + index * len(DIRECTIONS) + DIRECTIONS.index(direction)
        if tag > MAX_TAG:
            raise RuntimeError(
                f"halo exchange '{name}' would need message tag {tag} > {MAX_TAG}: this graph "
                f"has {len(self._tags)} distinct exchanges; load a fresh DistData per model"
            )
        return tag

    def full_route(self) -> Route:
        return Route.of_plan(self.plan)

    def move(
        self,
        rows: Tensor,
        send_counts: list[int],
        recv_counts: list[int],
        layer: str,
        direction: str,
        codec: Codec | None = None,
        async_op: bool = False,
        partial: tuple[int, int] | None = None,
    ) -> Tensor | Transfer:
        """Sends ``rows`` (``[sum(send_counts), F]``) and receives
        ``[sum(recv_counts), F]`` rows, compressed on the wire by ``codec``;
        books payload bytes and time in the ledger under ``layer``/``direction``,
        and, for halo rows (``partial``: how many of the rows sent and
        received are partial sums), the rows and partial sums sent."""
        start = time.perf_counter()
        num_feats, dtype = rows.size(1), rows.dtype
        payload = (rows.contiguous() if codec is None
                   else codec.encode(rows, self.codec_key(layer, direction)))
        pending = exchange_rows(payload, send_counts, recv_counts, self.group, self.transport,
                                async_op=True, tag=self.tag(layer, direction))
        assert isinstance(pending, PendingRows), "an async exchange returns PendingRows"
        if sum(send_counts) or sum(recv_counts):
            row_bytes = (num_feats * rows.element_size() if codec is None
                         else codec.row_bytes(num_feats))
            self.ledger.record(layer, direction, bytes_sent=sum(send_counts) * row_bytes,
                               bytes_recv=sum(recv_counts) * row_bytes, exchanges=1)
        if partial is not None:
            self.ledger.record(layer, direction, rows_sent=sum(send_counts) - partial[0],
                               partial_sums_sent=partial[0])
        issued = time.perf_counter()
        self.ledger.record(layer, direction, seconds=issued - start)  # encoding and issuing
        transfer = Transfer(pending, self, layer, direction, num_feats, dtype, codec, issued)
        return transfer if async_op else transfer.wait()

    def codec_key(self, layer: str, direction: str) -> int:
        """The key of the next exchange of ``layer`` in ``direction``, which
        keys a stochastic codec's draws: a CRC-32 of this rank, the ledger's
        step, the layer, the direction and the exchanges booked for them in
        this step. The ledger is checkpointed, so a resumed run keys its
        exchanges as the uninterrupted run did.

        Args:
            layer (str): The exchange's name in the ledger.
            direction (str): Its direction.
        """
        count = self.ledger.exchanges(layer, direction)
        return zlib.crc32(
            f"{self.plan.rank}|{self.ledger.step}|{layer}|{direction}|{count}".encode())

    def decode(self, received: Tensor, num_feats: int, dtype: torch.dtype,
               codec: Codec | None) -> Tensor:
        if codec is None:
            return received
        return codec.decode(received, num_feats, dtype)


def exchange_halo(x: Tensor, channel: HaloChannel, layer: str,
                  codec: Codec | None = None, direction: str = "fwd") -> Tensor:
    r"""This rank's halo rows of ``x``, exchanged exactly and differentiably:
    gradients of the returned rows flow back to the ranks that own them.

    Shapes:
        - **input:** ``x`` :obj:`[num_owned, *]`
        - **output:** :obj:`[num_halo, *]`, the dtype of ``x``
    """
    return exchange_route(x, channel, layer, channel.full_route(), codec, direction)


def exchange_route(x: Tensor, channel: HaloChannel, layer: str, route: Route,
                   codec: Codec | None = None, direction: str = "fwd") -> Tensor:
    """Like :func:`exchange_halo` for the rows of ``route`` only: returns the
    ``[sum(route.recv_counts), F]`` received rows. ``direction`` labels the
    forward traffic in the ledger (``"eval"`` for evaluation)."""
    return _Exchange.apply(x, channel, layer, route, codec, direction)


class _Exchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, channel: HaloChannel, layer: str, route: Route,  # type: ignore[override]
                codec: Codec | None, direction: str) -> Tensor:
        ctx.channel, ctx.layer, ctx.route, ctx.codec = channel, layer, route, codec
        ctx.num_owned = x.size(0)
        rows = route.gather(x)
        out = channel.move(as_rows(rows), route.send_counts, route.recv_counts,
                           layer, direction, codec, partial=route.partial)
        assert isinstance(out, Tensor), "a synchronous move returns a tensor"
        return out.view(-1, *x.shape[1:])

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        channel: HaloChannel = ctx.channel
        send_counts, recv_counts = ctx.route.reversed_counts()
        flat = as_rows(grad.contiguous())
        partial = ctx.route.partial[::-1]
        rows = channel.move(flat, send_counts, recv_counts, ctx.layer, "bwd", ctx.codec,
                            partial=partial)
        assert isinstance(rows, Tensor), "a synchronous move returns a tensor"
        rows = rows.view(-1, *grad.shape[1:])
        grad_x = ctx.route.scatter_back(rows, ctx.num_owned)
        return grad_x, None, None, None, None, None


def as_rows(t: Tensor) -> Tensor:
    """``t`` as a 2-D ``[rows, features]`` tensor (also when it has no rows)."""
    return t.reshape(t.size(0), math.prod(t.shape[1:]))
