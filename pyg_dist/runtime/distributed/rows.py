"""Collectives over a matrix's rows cut into one near-equal piece per rank
(:func:`row_piece`): summed into the pieces, and joined again, whole or a
range at a time, with no memory beside the result."""
from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import Tensor

from pyg_dist.runtime import peers
from pyg_dist.runtime.distributed.base import (
    Group,
    collective_device,
    is_distributed,
    rank,
    world_size,
)
from pyg_dist.runtime.distributed.collectives import batch_send_recv, wait_all

__all__ = [
    "row_piece", "reduce_scatter_rows", "reduce_row_range", "all_gather_rows",
    "gather_row_range",
]


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
    ranks, each into the rank whose piece (:func:`row_piece`) holds it: every
    rank sends the rows of each other piece the range meets to its rank, all
    at once (one batch of messages: every link busy at once, where a reduce
    per piece would take turns), and sums what it receives for its own piece
    into ``tensor``'s rows, in rank order. Returns where this rank's summed
    rows start in its piece and those rows (a view of ``tensor``; none when
    the range misses its piece); ``(lo, tensor)`` in a group of one. Besides
    ``tensor``, a rank holds what it receives: its rows of the range once per
    other rank.

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
    at, mine = 0, tensor.narrow(0, 0, 0)
    sends: dict[int, Tensor] = {}
    received: dict[int, Tensor] = {}
    for q, first, start, end in _pieces_meeting(rows, size, lo, lo + tensor.size(0)):
        part = tensor.narrow(0, start - lo, end - start)
        if q == me:
            at, mine = start - first, part
            received = {p: torch.empty_like(part) for p in range(size) if p != me}
        else:
            sends[q] = part
    wait_all(batch_send_recv(sends, received, group, what="reduce"), "reduce")
    for p in sorted(received):
        mine += received.pop(p)
    return at, mine


def all_gather_rows(piece: Tensor, rows: int, group: Group = None) -> Tensor:
    """``[rows, ...]`` every rank's piece (:func:`row_piece` of ``rows``, by
    rank in ``group``) in rank order: the rows :func:`reduce_scatter_rows`
    scattered, joined; ``piece`` itself in a group of one. Each piece is
    sent to every other rank straight into its rows of the result
    (:func:`gather_row_range`): no memory beside it (gloo's all-gather copies
    the whole result once more).

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
    joins: every rank whose piece the range meets sends those rows to every
    other rank, all at once (one batch of messages, where a broadcast per
    piece would take turns), received straight into their rows of the result
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
    sends: dict[int, Tensor] = {}
    recvs: dict[int, Tensor] = {}
    for q, first, start, end in _pieces_meeting(rows, size, lo, hi):
        rows_out = out[start - lo : end - lo]
        if q == me:
            rows_out.copy_(piece[start - first : end - first])
            sends = {p: rows_out for p in range(size) if p != me}
        else:
            recvs[q] = rows_out
    wait_all(batch_send_recv(sends, recvs, group, what="gather"), "gather")
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
