"""The one home of :mod:`torch.distributed`: the process group
(``pyg_dist.init()``), groups, collectives and point-to-point messages.

No other module of the package calls a collective or sends a message itself;
what is used of :mod:`torch.distributed` elsewhere runs its own communication:
DDP with torch's communication hooks (``pyg_dist.grads.sync``) and
torchrun's error records (``pyg_dist.cli``). Every collective and
point-to-point helper here runs under ``pyg_dist.runtime.peers.guard``, so a peer
lost meanwhile raises ``pyg_dist.runtime.peers.PeerLost`` naming it. The
reductions, broadcasts, gathers and barriers are no-ops in a group of one
process. Point-to-point helpers take the peer's rank in ``group`` (the global
rank for the default group)."""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from pyg_dist.runtime import env, peers

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "world_size", "is_distributed", "default_device",
    "collective_device", "all_reduce", "all_reduce_with_grad", "all_reduce_values", "broadcast",
    "barrier", "differing_ranks", "all_gather_objects", "raise_together",
    "failing_together", "announcing_failures", "announce_failure", "forget_failure", "Phase",
    "raised_together", "sync_tensors",
    "all_reduce_gradients", "new_group", "host_store", "DEFAULT_TIMEOUT", "Group", "GradBucket",
    "backend", "group_id", "all_reduce_future", "all_to_all_single", "send", "recv", "isend",
    "batch_send_recv", "wait_all", "row_piece", "reduce_scatter_rows", "all_gather_rows",
    "reduce_row_range", "gather_row_range",
]

#: Collectives that wait longer than this raise instead of hanging (seconds).
DEFAULT_TIMEOUT = env.DEFAULT_TIMEOUT

Group = Any  # a torch.distributed.ProcessGroup, or None for the default group
#: The bucket of gradients a DDP communication hook is handed.
GradBucket = dist.GradBucket


def init(backend: str | None = None, timeout: float | timedelta | None = None) -> None:
    r"""Initialises the default process group from the environment.

    * Under ``torchrun`` (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
      ``MASTER_PORT`` set): joins that group.
    * Under :func:`pyg_dist.launch`: joins the group the launcher hosts.
    * Otherwise: a group of one process, so single-process code runs unchanged.

    Does nothing if a group is already initialised.

    Args:
        backend (str, optional): :obj:`"nccl"` or :obj:`"gloo"`; :obj:`None` picks
            NCCL when CUDA is available and gloo otherwise. (default: :obj:`None`)
        timeout (float or datetime.timedelta, optional): How long a collective may
            wait for the other ranks before raising, in seconds; defaults to the
            ``PYG_DIST_TIMEOUT`` variable or :obj:`600`. (default: :obj:`None`)
    """
    if dist.is_initialized():
        return
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if timeout is None:
        timeout = env.timeout()
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    environ = os.environ
    if backend == "nccl":
        torch.cuda.set_device(int(environ.get("LOCAL_RANK", 0)))
    store = _store(timeout)
    if store is not None:
        dist.init_process_group(
            backend, store=store, rank=int(environ["RANK"]),
            world_size=int(environ["WORLD_SIZE"]), timeout=timeout,
        )
    elif env.under_torchrun():
        dist.init_process_group(backend, init_method="env://", timeout=timeout)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1,
                                timeout=timeout)
    if is_distributed():
        peers.publish(all_gather_objects, rank(), timeout.total_seconds(), _default_store())


def _default_store() -> Any:
    """The default group's key-value store (where ranks that give up leave
    their error), or :obj:`None` where torch does not say."""
    try:
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):
        return None


def _store(timeout: timedelta) -> Any:
    """The store of :func:`pyg_dist.launch`'s ranks, or the store of torchrun's
    agent with a prefix per restart (so that the workers of a restart never
    read the addresses of the ones they replace), else :obj:`None`."""
    launch_store = env.launch_store()
    if launch_store is not None:
        host, port = launch_store.rsplit(":", 1)
        return dist.TCPStore(host, int(port), is_master=False, timeout=timeout)
    environ = os.environ
    if environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and "MASTER_ADDR" in environ:
        agent = dist.TCPStore(environ["MASTER_ADDR"], int(environ["MASTER_PORT"]),
                              is_master=False, timeout=timeout)
        restart = environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        return dist.PrefixStore(f"pyg_dist/restart_{restart}", agent)
    return None


def shutdown() -> None:
    """Destroys the default process group if there is one."""
    peers.close()
    if dist.is_initialized():
        dist.destroy_process_group()


def is_initialized() -> bool:
    """Whether a process group exists (of any size)."""
    return dist.is_initialized()


def rank(group: Group = None) -> int:
    """This process's rank in ``group`` (0 without a process group).

    Args:
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    return dist.get_rank(group) if dist.is_initialized() else 0


def world_size(group: Group = None) -> int:
    """Number of ranks in ``group`` (1 without a process group).

    Args:
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    return dist.get_world_size(group) if dist.is_initialized() else 1


def is_distributed(group: Group = None) -> bool:
    """Whether collectives over ``group`` involve other processes.

    Args:
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    return world_size(group) > 1


def default_device() -> torch.device:
    """The device this rank computes on: its GPU under NCCL, else the CPU."""
    return collective_device()


def collective_device(group: Group = None) -> torch.device:
    """Where tensors of a collective over ``group`` must live: this rank's GPU
    under NCCL, else the CPU.

    Args:
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    if dist.is_initialized() and dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


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


def row_piece(rows: int, pieces: int, index: int) -> tuple[int, int]:
    """``[lo, hi)`` of piece ``index`` of ``rows`` rows cut into ``pieces``
    near-equal runs: the pieces :func:`reduce_scatter_rows` leaves and
    :func:`all_gather_rows` joins.

    Args:
        rows (int): The rows.
        pieces (int): The pieces (the ranks of a group).
        index (int): The piece (a rank of the group).
    """
    return rows * index // pieces, rows * (index + 1) // pieces


def reduce_scatter_rows(tensor: Tensor, group: Group = None, inplace: bool = False) -> Tensor:
    """This rank's piece (:func:`row_piece`, by its rank in ``group``) of the
    rows of ``tensor`` summed over the ranks, a new tensor on ``tensor``'s
    device; ``tensor`` itself in a group of one.

    With ``inplace``, ``tensor`` is the buffer (its rows hold partial sums
    afterwards): one reduce a piece into its rank and no other memory than
    the piece returned; otherwise a reduce-scatter, which copies the rows
    (gloo: about half of them again beside the piece).

    Args:
        tensor (torch.Tensor): The values of this rank, ``[rows, ...]``
            (the same shape on every rank).
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
        inplace (bool, optional): Whether ``tensor`` may be overwritten.
            (default: :obj:`False`)
    """
    if not is_distributed(group):
        return tensor
    buffer = tensor.to(collective_device(group)).contiguous()
    if inplace or buffer.data_ptr() != tensor.data_ptr():  # a copy already: the buffer
        out = reduce_row_range(buffer, buffer.size(0), 0, group)[1].clone()
    else:
        size, me = world_size(group), rank(group)
        pieces = [buffer.narrow(0, lo, hi - lo)
                  for lo, hi in (row_piece(buffer.size(0), size, q) for q in range(size))]
        out = torch.empty_like(pieces[me])
        with peers.guard("reduce_scatter"):
            dist.reduce_scatter(out, pieces, group=group)
    return out.to(tensor.device)


def reduce_row_range(tensor: Tensor, rows: int, lo: int,
                     group: Group = None) -> tuple[int, Tensor]:
    """Rows ``[lo, lo + len(tensor))`` of ``rows`` rows summed over the
    ranks, each into the rank whose piece (:func:`row_piece`) holds it: one
    reduce per piece the range meets, ``tensor`` the buffer (its rows hold
    partial sums afterwards). Returns where this rank's summed rows start in
    its piece and those rows (a view of ``tensor``; none when the range
    misses its piece); ``(lo, tensor)`` in a group of one.

    Args:
        tensor (torch.Tensor): The values of this rank, ``[hi - lo, ...]``,
            contiguous, on the collective device (the same shape on every rank).
        rows (int): The rows of all pieces together.
        lo (int): The range's first row.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    if not is_distributed(group):
        return lo, tensor
    size, me = world_size(group), rank(group)
    hi = lo + tensor.size(0)
    at, mine = 0, tensor.narrow(0, 0, 0)
    with peers.guard("reduce"):
        for q, first, start, end in _pieces_meeting(rows, size, lo, hi):
            part = tensor.narrow(0, start - lo, end - start)
            dist.reduce(part, dst=_global(q, group), group=group)
            if q == me:
                at, mine = start - first, part
    return at, mine


def all_gather_rows(piece: Tensor, rows: int, group: Group = None) -> Tensor:
    """``[rows, ...]`` every rank's piece (:func:`row_piece` of ``rows``, by
    rank in ``group``) in rank order: the rows :func:`reduce_scatter_rows`
    scattered, joined; ``piece`` itself in a group of one. Each piece is
    broadcast into its rows of the result: no memory beside it (gloo's
    all-gather copies the whole result once more).

    Args:
        piece (torch.Tensor): This rank's piece, ``[hi - lo, ...]``.
        rows (int): The rows of all pieces together.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    if not is_distributed(group):
        return piece
    size, me = world_size(group), rank(group)
    bounds = [row_piece(rows, size, q) for q in range(size)]
    lo, hi = bounds[me]
    if piece.size(0) != hi - lo:
        raise ValueError(f"'all_gather_rows' was given {piece.size(0)} rows on rank {me} of "
                         f"{size}; piece {me} of {rows} rows holds {hi - lo} (row_piece)")
    return gather_row_range(piece, rows, 0, rows, group)


def gather_row_range(piece: Tensor, rows: int, lo: int, hi: int, group: Group = None) -> Tensor:
    """``[hi - lo, ...]`` rows ``[lo, hi)`` of the rows :func:`all_gather_rows`
    joins: each piece the range meets is broadcast into its rows of the result
    (no memory beside it); ``piece[lo:hi]`` in a group of one.

    Args:
        piece (torch.Tensor): This rank's piece (:func:`row_piece` of ``rows``).
        rows (int): The rows of all pieces together.
        lo (int): The range's first row.
        hi (int): The row after its last.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    if not is_distributed(group):
        return piece[lo:hi]
    size, me = world_size(group), rank(group)
    out = piece.new_empty((hi - lo, *piece.shape[1:]), device=collective_device(group))
    with peers.guard("broadcast"):
        for q, first, start, end in _pieces_meeting(rows, size, lo, hi):
            if q == me:
                out[start - lo : end - lo] = piece[start - first : end - first]
            dist.broadcast(out[start - lo : end - lo], src=_global(q, group), group=group)
    return out.to(piece.device)


def _pieces_meeting(rows: int, size: int, lo: int,
                    hi: int) -> Iterator[tuple[int, int, int, int]]:
    """``(q, first, start, end)`` for each piece ``q`` of ``rows`` cut into
    ``size`` that meets ``[lo, hi)``: its first row and the run ``[start,
    end)`` it shares with the range."""
    for q in range(size):
        first, last = row_piece(rows, size, q)
        start, end = max(first, lo), min(last, hi)
        if end > start:
            yield q, first, start, end


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
        dist.broadcast(buffer, src=_global(src, group), group=group)
    return buffer.to(tensor.device)


def new_group(ranks: Sequence[int] | None = None) -> Any:
    """A new process group of ``ranks`` (global ranks; :obj:`None`: every
    rank) on the default group's backend, so its collectives run beside the
    default group's. Collective: every rank creates its groups in the same
    order, including those it is not part of.

    Args:
        ranks (Sequence[int], optional): The global ranks of the group;
            :obj:`None` for every rank. (default: :obj:`None`)
    """
    with peers.guard("new_group"):
        return dist.new_group(ranks=None if ranks is None else list(ranks),
                              backend=dist.get_backend())


def backend(group: Group = None) -> str:
    """The backend of ``group`` (``"gloo"``, ``"nccl"``).

    Args:
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    return str(dist.get_backend(group))


def group_id() -> int:
    """An id of the default group, new each time a group is initialised (0
    without one): the key of things made per group."""
    return id(dist.group.WORLD) if dist.is_initialized() else 0


def _global(q: int, group: Group) -> int:
    """Global rank of rank ``q`` of ``group`` (point-to-point ops address global ranks)."""
    return q if group is None else dist.get_global_rank(group, q)


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
        dist.send(tensor, _global(dst, group), group=group, tag=tag)


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
        dist.recv(tensor, _global(src, group), group=group, tag=tag)
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
        return dist.isend(tensor, _global(dst, group), group=group, tag=tag)


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
            ops.append(dist.P2POp(dist.irecv, recvs[q], _global(q, group), group, tag))
        if q in sends:
            ops.append(dist.P2POp(dist.isend, sends[q], _global(q, group), group, tag))
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


def raise_together(error: BaseException | None, what: str, group: Group = None) -> None:
    """A check every rank makes on its own (its part file, its checkpoint),
    failed together: if any rank passes an ``error``, every rank raises one
    error listing each failing rank, its host, the error's type and its
    message, so that no rank waits in the next collective for one that gave
    up (:func:`raised_together` tells such errors). Where several ranks
    failed alike (the same type and message: a partition folder cut for
    another number of ranks) the message says it once, on one line. The
    error has
    the type of this rank's error, else that of the first failing rank when
    it is a built-in exception, else :class:`RuntimeError`. In a group of
    one, ``error`` itself is raised.

    Args:
        error (BaseException, optional): This rank's failure; :obj:`None` if
            its check passed.
        what (str): The check, named at the start of the error's message.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    if not is_distributed(group):
        if error is not None:
            raise error
        return
    mine = None if error is None else (type(error).__name__, str(error))
    reports = all_gather_objects(mine, group)
    failed = [(r, report) for r, report in enumerate(reports) if report is not None]
    if not failed:
        return
    message = _failed_on(what, failed, len(reports))
    kind = type(error) if error is not None else _builtin(failed[0][1][0])
    if issubclass(kind, KeyError):  # whose str() would be the repr of the message
        kind = _SharedKeyError
    try:
        exc = kind(message)
    except Exception:
        exc = RuntimeError(message)
    setattr(exc, _SHARED, True)
    raise exc from error


def _failed_on(what: str, failed: list[tuple[int, tuple[str, str]]], ranks: int) -> str:
    """The message of :func:`raise_together`: each failing rank's error on a
    line of its own, or one line where they all failed alike."""
    if len(failed) > 1 and len({report for _, report in failed}) == 1:
        kind, message = failed[0][1]
        who = (f"all {ranks} ranks" if len(failed) == ranks else
               f"{len(failed)} of {ranks} ranks ({', '.join(str(r) for r, _ in failed)})")
        return f"{what} failed alike on {who}: {kind}: {message}"
    lines = "\n".join(f"  {peers.name(r)}: {kind}: {message}" for r, (kind, message) in failed)
    return f"{what} failed on {len(failed)} of {ranks} ranks:\n{lines}"


#: Set on the errors :func:`raise_together` raises (on every rank at once).
_SHARED = "_pyg_dist_raised_together"


def raised_together(error: BaseException) -> bool:
    """Whether ``error`` was raised on every rank at once by
    :func:`raise_together` (or :func:`failing_together`), so the ranks are
    still in step.

    Args:
        error (BaseException): The error.
    """
    return bool(getattr(error, _SHARED, False))


class _SharedKeyError(KeyError):
    """A :class:`KeyError` shared by :func:`raise_together`, shown as its message."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@contextmanager
def failing_together(what: str, group: Group = None) -> Iterator[None]:
    """A step every rank takes on its own (opening its input, checking its
    slice, writing its part), failed together: any :class:`Exception` the
    block raises on any rank is raised after it on every rank, by
    :func:`raise_together`, so that no rank waits in the next collective for
    one that gave up. A ``pyg_dist.runtime.peers.PeerLost`` (a peer that
    cannot take part in sharing the error) and what is no
    :class:`Exception` (``KeyboardInterrupt``, ``SystemExit``) pass as they
    are.

    Args:
        what (str): The step, named at the start of the error's message.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    error = None
    try:
        yield
    except peers.PeerLost:
        raise
    except Exception as exc:  # noqa: BLE001 - every rank raises it below
        error = exc
    raise_together(error, what, group)


@dataclass
class Phase:
    """What a rank is doing inside :func:`announcing_failures`; the block
    updates ``doing`` as it goes.

    Args:
        doing (str): What the rank is doing, as a peer's error names it
            (``"the training step of epoch 3"``).
    """

    doing: str


@contextmanager
def announcing_failures(doing: str) -> Iterator[Phase]:
    """Work the ranks do together, where one rank's error would leave the
    others waiting in their next collective: an :class:`Exception` the block
    raises on this rank alone is left, with what the rank was doing, in the
    process group's store before it propagates
    (``pyg_dist.runtime.peers.report_failure``). A peer whose collective
    fails meanwhile (at once when this rank's process ends, at the timeout
    if it lingers) raises ``pyg_dist.runtime.peers.PeerFailed`` naming
    this rank, what it was doing and its error, instead of waiting or only
    finding it gone. Errors raised on every rank together
    (:func:`raise_together`), a lost peer, and what is no :class:`Exception`
    (``KeyboardInterrupt``, ``SystemExit``) pass unreported.

    Args:
        doing (str): What the block does, as errors name it (``"training"``);
            the yielded :class:`Phase` updates it.
    """
    forget_failure()
    phase = Phase(doing)
    try:
        yield phase
    except Exception as exc:
        announce_failure(phase.doing, exc)
        raise


def announce_failure(doing: str, error: BaseException) -> None:
    """What :func:`announcing_failures` does with an error its block
    raised: leaves it for the peers unless it was raised together, is a
    lost peer, or is no :class:`Exception`.

    Args:
        doing (str): What this rank was doing (``"the training step of epoch 3"``).
        error (BaseException): The error.
    """
    if (is_distributed() and isinstance(error, Exception)
            and not isinstance(error, peers.PeerLost) and not raised_together(error)):
        peers.report_failure(doing, error)


def forget_failure() -> None:
    """Takes back this rank's earlier report (:func:`announce_failure`), at
    the start of new work together: that error was handled, and must not be
    blamed for a later failure."""
    peers.clear_failure()


def _builtin(name: str) -> type[BaseException]:
    import builtins

    kind = getattr(builtins, name, None)
    return kind if isinstance(kind, type) and issubclass(kind, Exception) else RuntimeError


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


def host_store(host: str = "127.0.0.1") -> Any:
    """A new key-value store served by this process on a free port of ``host``
    (``store.port``), for the ranks :func:`pyg_dist.launch` starts.

    Args:
        host (str, optional): The address to serve on. (default: :obj:`"127.0.0.1"`)
    """
    return dist.TCPStore(host, 0, None, True, wait_for_workers=False)
