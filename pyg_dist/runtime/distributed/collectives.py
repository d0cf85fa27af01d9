"""Collectives and point-to-point messages, each under
``pyg_dist.runtime.peers.guard`` (a peer lost meanwhile raises
``pyg_dist.runtime.peers.PeerLost`` naming it); the reductions, broadcasts,
gathers and barriers are no-ops in a group of one process."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from pyg_dist.runtime import peers
from pyg_dist.runtime.distributed.base import (
    Group,
    collective_device,
    global_rank,
    is_distributed,
    world_size,
)

__all__ = [
    "all_reduce", "all_reduce_with_grad", "all_reduce_values", "all_reduce_future",
    "broadcast", "barrier", "differing_ranks", "all_gather_objects", "sync_tensors",
    "all_reduce_gradients", "all_to_all_single", "send", "recv", "isend", "batch_send_recv",
    "wait_all",
]


def all_reduce(tensor: Tensor, op: str = "sum", group: Group = None) -> Tensor:
    """``tensor`` reduced over the ranks (``"sum"`` or ``"max"``), on its own
    device; the tensor itself in a group of one.

    Args:
        tensor (torch.Tensor): The values of this rank.
        op (str, optional): :obj:`"sum"` or :obj:`"max"`. (default: :obj:`"sum"`)
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    if not is_distributed(group):
        return tensor
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}
    buffer = tensor.to(collective_device(group))
    with peers.guard("all_reduce"):
        dist.all_reduce(buffer, op=ops[op], group=group)
    return buffer.to(tensor.device)


def all_reduce_with_grad(tensor: Tensor, group: Group = None) -> Tensor:
    """``tensor`` summed over the ranks, differentiably: the gradient of each
    rank's input is the sum of the gradients of every rank's output. Every
    rank must call it, in the same order.

    Args:
        tensor (torch.Tensor): The values of this rank.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    if not is_distributed(group):
        return tensor
    return _AllReduceSum.apply(tensor, group)


class _AllReduceSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: Tensor, group: Group) -> Tensor:  # type: ignore[override]
        ctx.group = group
        return all_reduce(tensor.clone(), group=group)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        return all_reduce(grad.contiguous().clone(), group=ctx.group), None


def all_reduce_values(values: Sequence[float], op: str = "sum",
                      group: Group = None) -> list[float]:
    """Numbers reduced over the ranks, in one float64 all-reduce.

    Args:
        values (Sequence[float]): The numbers of this rank.
        op (str, optional): :obj:`"sum"` or :obj:`"max"`. (default: :obj:`"sum"`)
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    reduced = all_reduce(torch.tensor(list(values), dtype=torch.float64), op, group)
    return reduced.tolist()


def all_reduce_future(tensor: Tensor, group: Group = None) -> torch.futures.Future:
    """Starts summing ``tensor`` (on the collective device) over ``group`` in
    place; the future's value is ``[tensor]`` (the form DDP communication
    hooks return).

    Args:
        tensor (torch.Tensor): The values of this rank, reduced in place.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    with peers.guard("all_reduce"):
        return dist.all_reduce(tensor, group=group, async_op=True).get_future()


def broadcast(tensor: Tensor, group: Group = None, src: int = 0) -> Tensor:
    """``tensor`` as rank ``src`` of ``group`` has it, on every rank.

    Args:
        tensor (torch.Tensor): The values to send (on rank ``src``) or of the
            shape to receive (on the others).
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
        src (int, optional): The sending rank, in ``group``. (default: :obj:`0`)
    """
    if not is_distributed(group):
        return tensor
    buffer = tensor.to(collective_device(group))
    with peers.guard("broadcast"):
        dist.broadcast(buffer, src=global_rank(src, group), group=group)
    return buffer.to(tensor.device)


def barrier(group: Group = None) -> None:
    """Waits for every rank of ``group``.

    Args:
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    if is_distributed(group):
        with peers.guard("barrier"):
            dist.barrier(group=group)


def differing_ranks(value: int, group: Group = None) -> list[int]:
    """The ranks whose ``value`` (an int64) differs from this rank's: empty
    when all ranks agree.

    Args:
        value (int): This rank's value.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    if not is_distributed(group):
        return []
    mine = torch.tensor([value], dtype=torch.long, device=collective_device(group))
    gathered = [torch.empty_like(mine) for _ in range(world_size(group))]
    with peers.guard("all_gather"):
        dist.all_gather(gathered, mine, group=group)
    return [r for r, other in enumerate(gathered) if not torch.equal(other, mine)]


def all_gather_objects(obj: Any, group: Group = None) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order; ``[obj]`` in a group of one.

    Args:
        obj (Any): This rank's object.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    if not is_distributed(group):
        return [obj]
    gathered: list[Any] = [None] * world_size(group)
    with peers.guard("all_gather_object"):
        dist.all_gather_object(gathered, obj, group=group)
    return gathered


def sync_tensors(tensors: Iterable[Tensor], group: Group = None) -> None:
    """Copies rank 0's values of ``tensors`` (parameters, buffers) to every rank, in place.

    Args:
        tensors (Iterable[torch.Tensor]): The tensors, in the same order on every rank.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    if not is_distributed(group):
        return
    for tensor in tensors:
        tensor.data.copy_(broadcast(tensor.data, group))


def all_reduce_gradients(params: Iterable[torch.nn.Parameter], group: Group = None) -> None:
    """Sums the gradients of ``params`` over the ranks, in one flat buffer (a
    missing gradient counts as zeros).

    Args:
        params (Iterable[torch.nn.Parameter]): The parameters, in the same order
            on every rank; those that do not require a gradient are skipped.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    if not is_distributed(group):
        return
    params = [p for p in params if p.requires_grad]
    if not params:  # nothing to sum (the same on every rank: the models are alike)
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = all_reduce(torch.cat([g.reshape(-1) for g in grads]), group=group)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).clone()
        offset += n


def all_to_all_single(recv: Tensor, send: Tensor, recv_counts: Sequence[int],
                      send_counts: Sequence[int], group: Group = None,
                      what: str = "all_to_all") -> list[Any]:
    """Starts sending ``send_counts[q]`` rows of ``send`` to every rank ``q``
    of ``group`` and receiving ``recv_counts[q]`` rows from each into ``recv``
    (in rank order); returns the pending works (see :func:`wait_all`).

    Args:
        recv (torch.Tensor): The buffer the received rows fill, ``sum(recv_counts)`` rows.
        send (torch.Tensor): The rows to send, ``sum(send_counts)`` of them, grouped
            by destination rank.
        recv_counts (Sequence[int]): Rows received from each rank.
        send_counts (Sequence[int]): Rows sent to each rank.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
        what (str, optional): The operation named in the error raised when a
            peer is lost meanwhile. (default: :obj:`"all_to_all"`)
    """
    with peers.guard(what):
        return [dist.all_to_all_single(recv, send, list(recv_counts), list(send_counts),
                                       group=group, async_op=True)]


def send(tensor: Tensor, dst: int, group: Group = None, tag: int = 0,
         what: str = "send") -> None:
    """Sends ``tensor`` to rank ``dst`` of ``group`` and waits until it is taken.

    Args:
        tensor (torch.Tensor): The values to send.
        dst (int): The receiving rank, in ``group``.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
        tag (int, optional): The message tag, matched with the peer's.
            (default: :obj:`0`)
        what (str, optional): The operation named in the error raised when a
            peer is lost meanwhile. (default: :obj:`"send"`)
    """
    with peers.guard(what):
        dist.send(tensor, global_rank(dst, group), group=group, tag=tag)


def recv(tensor: Tensor, src: int, group: Group = None, tag: int = 0,
         what: str = "recv") -> Tensor:
    """Receives into ``tensor`` what rank ``src`` of ``group`` sends; returns it.

    Args:
        tensor (torch.Tensor): The buffer to fill, of the shape and dtype sent.
        src (int): The sending rank, in ``group``.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
        tag (int, optional): The message tag, matched with the peer's.
            (default: :obj:`0`)
        what (str, optional): The operation named in the error raised when a
            peer is lost meanwhile. (default: :obj:`"recv"`)
    """
    with peers.guard(what):
        dist.recv(tensor, global_rank(src, group), group=group, tag=tag)
    return tensor


def isend(tensor: Tensor, dst: int, group: Group = None, tag: int = 0,
          what: str = "send") -> Any:
    """Starts sending ``tensor`` to rank ``dst`` of ``group``; returns the
    pending work (see :func:`wait_all`). Keep ``tensor`` alive until then.

    Args:
        tensor (torch.Tensor): The values to send.
        dst (int): The receiving rank, in ``group``.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
        tag (int, optional): The message tag, matched with the peer's.
            (default: :obj:`0`)
        what (str, optional): The operation named in the error raised when a
            peer is lost meanwhile. (default: :obj:`"send"`)
    """
    with peers.guard(what):
        return dist.isend(tensor, global_rank(dst, group), group=group, tag=tag)


def batch_send_recv(sends: dict[int, Tensor], recvs: dict[int, Tensor], group: Group = None,
                    tag: int = 0, what: str = "point-to-point") -> list[Any]:
    """Starts one batch of point-to-point messages: ``sends[q]`` to rank ``q``
    of ``group`` and ``recvs[q]`` filled from rank ``q``, posted peer by peer
    in rank order. Returns the pending works (see :func:`wait_all`); every
    peer must post the matching batch.

    Args:
        sends (dict[int, torch.Tensor]): The tensor to send to each peer rank.
        recvs (dict[int, torch.Tensor]): The buffer to fill from each peer rank.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
        tag (int, optional): The message tag, matched with the peer's.
            (default: :obj:`0`)
        what (str, optional): The operation named in the error raised when a
            peer is lost meanwhile. (default: :obj:`"point-to-point"`)
    """
    ops = []
    for q in sorted(set(sends) | set(recvs)):
        if q in recvs:
            ops.append(dist.P2POp(dist.irecv, recvs[q], global_rank(q, group), group, tag))
        if q in sends:
            ops.append(dist.P2POp(dist.isend, sends[q], global_rank(q, group), group, tag))
    if not ops:
        return []
    with peers.guard(what):
        return list(dist.batch_isend_irecv(ops))


def wait_all(works: Iterable[Any], what: str = "point-to-point") -> None:
    """Waits for pending works (of :func:`isend`, :func:`batch_send_recv`,
    :func:`all_to_all_single`).

    Args:
        works (Iterable): The pending works.
        what (str, optional): The operation named in the error raised when a
            peer is lost meanwhile. (default: :obj:`"point-to-point"`)
    """
    with peers.guard(what):
        for work in works:
            work.wait()
