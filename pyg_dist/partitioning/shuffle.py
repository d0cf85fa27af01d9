"""Moving numpy arrays between the ranks that partition a graph together:
contiguous id blocks (who owns which node), all-to-all shuffles of rows by
destination rank, and request/reply look-ups of values held by other ranks
(a halo exchange of ids, never an all-gather of the whole id range).

Every function here is collective: each rank of ``group`` calls it, in the
same order. Communication goes through :mod:`pyg_dist.runtime.distributed`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pyg_dist.partitioning.arrays import CHUNK
from pyg_dist.runtime import distributed
from pyg_dist.runtime.distributed import Group

__all__ = ["Blocks", "exchange", "exchange_counted", "exchange_rounds", "rounds", "fetch",
           "gather_to_root", "all_counts"]


@dataclass(frozen=True)
class Blocks:
    """Contiguous id ranges, one per rank: rank :math:`r` owns ids
    ``bounds[r]:bounds[r + 1]``.

    Attributes:
        bounds: ``[P + 1]`` int64 non-decreasing bounds, ``bounds[0] = 0``.
    """

    bounds: np.ndarray

    @staticmethod
    def even(count: int, num_ranks: int) -> Blocks:
        """``count`` ids in ``num_ranks`` blocks whose sizes differ by at most one."""
        return Blocks(np.array([r * count // num_ranks for r in range(num_ranks + 1)],
                               dtype=np.int64))

    @staticmethod
    def of_sizes(sizes: Sequence[int]) -> Blocks:
        """Blocks of the given sizes, in rank order."""
        bounds = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(np.asarray(sizes, dtype=np.int64), out=bounds[1:])
        return Blocks(bounds)

    def span(self, r: int) -> tuple[int, int]:
        """Rank ``r``'s ids ``lo:hi``."""
        return int(self.bounds[r]), int(self.bounds[r + 1])

    def owner(self, ids: np.ndarray) -> np.ndarray:
        """The rank owning each id (``[k]`` int64)."""
        return np.searchsorted(self.bounds, ids, side="right") - 1


def all_counts(counts: np.ndarray, group: Group = None) -> np.ndarray:
    """What every rank sends this one: ``counts[q]`` (``[P]``) goes to rank ``q``
    and the result's entry ``q`` is what rank ``q`` put at this rank's index."""
    send = torch.from_numpy(np.ascontiguousarray(counts, dtype=np.int64))
    if not distributed.is_distributed(group):
        return send.numpy().copy()
    recv = torch.empty_like(send)
    ones = [1] * send.numel()
    works = distributed.all_to_all_single(recv, send, ones, ones, group, "partition shuffle")
    distributed.wait_all(works, "partition shuffle")
    return recv.numpy()


def _move(rows: np.ndarray, send_counts: np.ndarray, recv_counts: np.ndarray,
          group: Group) -> np.ndarray:
    """All-to-all of ``rows`` (grouped by destination) with known counts."""
    if not distributed.is_distributed(group):
        return rows
    as_bytes = rows.dtype == np.bool_
    send = torch.from_numpy(np.ascontiguousarray(rows.view(np.uint8) if as_bytes else rows))
    recv = torch.empty((int(recv_counts.sum()), *send.shape[1:]), dtype=send.dtype)
    works = distributed.all_to_all_single(recv, send, recv_counts.tolist(),
                                          send_counts.tolist(), group, "partition shuffle")
    distributed.wait_all(works, "partition shuffle")
    out = recv.numpy()
    return out.view(np.bool_) if as_bytes else out


def exchange(arrays: Sequence[np.ndarray], dest: np.ndarray, num_ranks: int,
             group: Group = None, grouped: bool = False) -> tuple[list[np.ndarray], np.ndarray]:
    """Sends row :math:`i` of each of ``arrays`` to rank ``dest[i]``.

    Returns the rows received (from rank 0 first, each sender's rows in its
    order) and how many came from each rank.

    Args:
        arrays (Sequence[numpy.ndarray]): Arrays of equal length ``k``.
        dest (numpy.ndarray): ``[k]`` destination rank of each row.
        num_ranks (int): Ranks of ``group``.
        group (torch.distributed.ProcessGroup, optional): The process group.
            (default: :obj:`None`)
        grouped (bool, optional): Rows are already in destination order
            (``dest`` non-decreasing): no reordering copy. (default: :obj:`False`)
    """
    send_counts = np.bincount(dest, minlength=num_ranks).astype(np.int64)
    recv_counts = all_counts(send_counts, group)
    order = None if grouped else np.argsort(dest, kind="stable")
    received = [_move(a if order is None else a[order], send_counts, recv_counts, group)
                for a in arrays]
    return received, recv_counts


def exchange_counted(arrays: Sequence[np.ndarray], send_counts: np.ndarray,
                     group: Group = None) -> tuple[list[np.ndarray], np.ndarray]:
    """:func:`exchange` of rows already in destination order, the first
    ``send_counts[0]`` to rank 0 and so on: no per-row destination array."""
    send_counts = np.asarray(send_counts, dtype=np.int64)
    recv_counts = all_counts(send_counts, group)
    return [_move(a, send_counts, recv_counts, group) for a in arrays], recv_counts


def rounds(length: int, group: Group = None) -> list[slice]:
    """Slices of ``range(length)`` of :data:`~pyg_dist.partitioning.arrays.CHUNK`
    entries, as many on every rank (the most any rank needs; trailing ones
    empty): the rounds of an :func:`exchange_rounds`."""
    mine = max(1, -(-length // CHUNK))
    count = int(distributed.all_reduce_values([float(mine)], "max", group)[0]) \
        if distributed.is_distributed(group) else mine
    return [slice(min(c * CHUNK, length), min((c + 1) * CHUNK, length)) for c in range(count)]


def exchange_rounds(counts: np.ndarray, produce: Callable[[int], Sequence[np.ndarray]],
                    dtypes: Sequence[Any], group: Group = None) -> tuple[list[np.ndarray],
                                                                        np.ndarray]:
    """:func:`exchange_counted` in rounds, one chunk of rows each: only one
    round's send buffers exist at a time, and the rows received land in
    arrays allocated once, so a shuffle of :math:`k` rows holds the :math:`k`
    rows received and a chunk, not the rows sent besides.

    Args:
        counts (numpy.ndarray): ``[R, P]`` rows this rank sends to each rank
            in each round (``R`` the same on every rank: :func:`rounds`).
        produce (Callable): ``produce(r)`` returns round ``r``'s 1-D arrays,
            rows grouped by destination as ``counts[r]`` says.
        dtypes (Sequence): The dtype of each array ``produce`` returns.
        group (torch.distributed.ProcessGroup, optional): The process group.
            (default: :obj:`None`)

    Returns:
        The rows received (round after round, from rank 0 first within a
        round) and ``[R, P]`` how many came from each rank in each round.
    """
    counts = np.asarray(counts, dtype=np.int64).reshape(-1, counts.shape[-1])
    recv_counts = _all_counts_rounds(counts, group)
    out = [np.empty(int(recv_counts.sum()), dtype=dtype) for dtype in dtypes]
    at = 0
    for r in range(counts.shape[0]):
        arrays = produce(r)
        size = int(recv_counts[r].sum())
        for buffer, rows in zip(out, arrays):
            _move_into(buffer[at:at + size], rows, counts[r], recv_counts[r], group)
        del arrays
        at += size
    return out, recv_counts


def _all_counts_rounds(counts: np.ndarray, group: Group) -> np.ndarray:
    """:func:`all_counts` of every round at once: entry ``[r, q]`` is what
    rank ``q`` sends this one in round ``r``."""
    if not distributed.is_distributed(group):
        return counts.copy()
    num_rounds, num_ranks = counts.shape
    send = torch.from_numpy(np.ascontiguousarray(counts.T)).reshape(-1)
    recv = torch.empty_like(send)
    split = [num_rounds] * num_ranks
    works = distributed.all_to_all_single(recv, send, split, split, group, "partition shuffle")
    distributed.wait_all(works, "partition shuffle")
    return recv.numpy().reshape(num_ranks, num_rounds).T.copy()


def _move_into(out: np.ndarray, rows: np.ndarray, send_counts: np.ndarray,
               recv_counts: np.ndarray, group: Group) -> None:
    """:func:`_move` into the given contiguous ``out``."""
    if not distributed.is_distributed(group):
        out[:] = rows
        return
    if rows.dtype == np.bool_:
        out, rows = out.view(np.uint8), rows.view(np.uint8)
    works = distributed.all_to_all_single(torch.from_numpy(out),
                                          torch.from_numpy(np.ascontiguousarray(rows)),
                                          recv_counts.tolist(), send_counts.tolist(), group,
                                          "partition shuffle")
    distributed.wait_all(works, "partition shuffle")


def fetch(ids: np.ndarray, owner: np.ndarray, answer: Callable[[np.ndarray], np.ndarray],
          num_ranks: int, group: Group = None, grouped: bool = False) -> np.ndarray:
    """The value of each of ``ids`` as its owner answers it: ``ids`` go to
    their owners, each owner calls ``answer`` on all the ids it was asked
    (one array, requesters in rank order) and the answers come back.

    Args:
        ids (numpy.ndarray): ``[k]`` ids to look up.
        owner (numpy.ndarray): ``[k]`` rank holding each id's value.
        answer (Callable): Maps the ``[m]`` ids asked of this rank to their
            ``[m, ...]`` values.
        num_ranks (int): Ranks of ``group``.
        group (torch.distributed.ProcessGroup, optional): The process group.
            (default: :obj:`None`)
        grouped (bool, optional): ``ids`` are already in owner order
            (``owner`` non-decreasing): no reordering. (default: :obj:`False`)

    Returns:
        ``[k, ...]`` the values, in the order of ``ids``.
    """
    order = None if grouped else np.argsort(owner, kind="stable")
    send_counts = np.bincount(owner, minlength=num_ranks).astype(np.int64)
    recv_counts = all_counts(send_counts, group)
    asked = _move(ids if order is None else ids[order], send_counts, recv_counts, group)
    replies = np.ascontiguousarray(answer(asked))
    got = _move(replies, recv_counts, send_counts, group)
    if order is None:
        return got
    out = np.empty_like(got)
    out[order] = got
    return out


def gather_to_root(rows: np.ndarray, num_ranks: int, group: Group = None) -> np.ndarray:
    """Every rank's ``rows`` concatenated in rank order on rank 0; an empty
    array of the same row shape elsewhere."""
    counts = np.zeros(num_ranks, dtype=np.int64)
    counts[0] = rows.shape[0]
    return exchange_counted([rows], counts, group)[0][0]
