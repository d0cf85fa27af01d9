"""A sum over chunks of pairs whose activations are recomputed in the backward.

A link loss scores every pair of its edges and negatives: kept for the
backward, the decoder's activations of all pairs would outgrow the rows
they are computed from. :func:`chunked_sum` computes the loss one chunk of
pairs at a time, keeps only the rows, and in the backward computes each
chunk again under the random state of its forward (a decoder's dropout
draws the same masks), adding the chunk's row gradients into one buffer.
Against activation checkpointing of each chunk (one gradient of the whole
row matrix per chunk, then summed), this fills and adds one such buffer in
all, and its rows are fetched with ``index_select`` (whose backward is an
``index_add_``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

__all__ = ["chunked_sum"]

#: One chunk: the rows it reads (vectors of indices into the row matrix) and
#: its sum of those rows (one matrix per vector).
Chunk = tuple[tuple[Tensor, ...], Callable[..., Tensor]]


def chunked_sum(chunks: Sequence[Chunk], rows: Tensor, params: Sequence[nn.Parameter] = ()
                ) -> Tensor:
    r"""``sum(fn(*(rows[i] for i in index)) for index, fn in chunks)``,
    differentiable in ``rows`` and ``params``, holding one chunk's
    activations at a time.

    Each ``fn`` maps its chunk's rows to a scalar (a pair's source rows and
    target rows, say, as two matrices); the parameters it reads
    (a decoder's) are listed in ``params`` (parameters it does not read get
    no gradient). Its random draws are replayed in the backward.

    Args:
        chunks (list[tuple[tuple[torch.Tensor, ...], Callable]]):
            ``(index, fn)`` per chunk, ``index`` int64 vectors of rows of
            ``rows``, one per argument of ``fn``.
        rows (torch.Tensor): The row matrix ``[N, *]``.
        params (list[torch.nn.Parameter], optional): The parameters the
            ``fn`` read. (default: :obj:`()`)
    """
    wanted = [p for p in params if p.requires_grad]
    return _ChunkedSum.apply(list(chunks), rows, *wanted)


def _random_state(device: torch.device) -> tuple[Tensor, Tensor | None]:
    accelerator = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), accelerator


class _ChunkedSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, chunks: list[Chunk], rows: Tensor,  # type: ignore[override]
                *params: Tensor) -> Tensor:
        ctx.chunks, ctx.params, ctx.states = chunks, params, []
        total = rows.new_zeros(())
        for index, fn in chunks:
            ctx.states.append(_random_state(rows.device))
            total = total + fn(*(rows.index_select(0, i) for i in index))
        ctx.save_for_backward(rows)
        return total

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        (rows,) = ctx.saved_tensors
        rows = rows.detach()
        params: tuple[Tensor, ...] = ctx.params
        grad_rows = torch.zeros_like(rows)
        grad_params: list[Tensor | None] = [None] * len(params)
        cuda = [rows.device] if rows.device.type == "cuda" else []
        for (index, fn), (state, accelerator) in zip(ctx.chunks, ctx.states):
            with torch.random.fork_rng(devices=cuda), torch.enable_grad():
                torch.set_rng_state(state)
                if accelerator is not None:
                    torch.cuda.set_rng_state(accelerator, rows.device)
                xs = [rows.index_select(0, i).requires_grad_() for i in index]
                got = torch.autograd.grad(fn(*xs), (*xs, *params), grad, allow_unused=True)
            for i, g in zip(index, got):
                if g is not None:
                    grad_rows.index_add_(0, i, g)
            for j, g in enumerate(got[len(xs):]):
                kept = grad_params[j]
                if g is not None:
                    grad_params[j] = g if kept is None else kept + g
            del xs, got  # before the next chunk's rows are made
        return (None, grad_rows, *grad_params)
