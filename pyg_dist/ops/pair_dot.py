r"""The dot product of node pairs whose rows come from one matrix: a link
task's scores

.. math::
    s_e = \mathbf{h}_{u_e}^\top \mathbf{h}_{v_e},

without the :math:`L \times F` rows of each end (and their product) that
``(h[src] * h[dst]).sum(-1)`` makes for :math:`L` pairs, keeps for the
backward, and turns into one :math:`N \times F` gradient per end there.
:func:`pair_dot` scores ``chunk`` pairs at a time, keeps only ``h`` and the
ids, and sums every pair's gradient into one gradient of ``h``, a chunk at a
time: its memory beyond ``h`` and its gradient is a chunk's rows.
:func:`pair_dot_ref` is the plain expression (the oracle).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

__all__ = ["pair_dot", "pair_dot_ref"]


def pair_dot_ref(h: Tensor, src: Tensor, dst: Tensor) -> Tensor:
    """``(h[src] * h[dst]).sum(-1)``: the reference of :func:`pair_dot`."""
    return (h[src] * h[dst]).sum(dim=-1)


class _PairDot(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, h: Tensor, src: Tensor, dst: Tensor, chunk: int) -> Tensor:
        out = h.new_empty(src.numel())
        for lo in range(0, src.numel(), chunk):
            out[lo:lo + chunk] = pair_dot_ref(h, src[lo:lo + chunk], dst[lo:lo + chunk])
        ctx.save_for_backward(h, src, dst)
        ctx.chunk = chunk
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None, None]:
        h, src, dst = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        grad_h = torch.zeros_like(h)
        for lo in range(0, src.numel(), ctx.chunk):
            s, d = src[lo:lo + ctx.chunk], dst[lo:lo + ctx.chunk]
            g = grad[lo:lo + ctx.chunk].unsqueeze(1)
            grad_h.index_add_(0, s, g * h[d])
            grad_h.index_add_(0, d, g * h[s])
        return grad_h, None, None, None


def pair_dot(h: Tensor, src: Tensor, dst: Tensor, chunk: int = 65_536) -> Tensor:
    r"""The score :math:`\mathbf{h}_{u}^\top \mathbf{h}_{v}` of each pair
    ``(src[e], dst[e])`` of rows of ``h``, ``chunk`` pairs at a time;
    differentiable in ``h`` (once).

    Args:
        h (torch.Tensor): The rows, float.
        src (torch.Tensor): The pairs' first rows, int64.
        dst (torch.Tensor): Their second rows, int64, as many.
        chunk (int, optional): Pairs scored at a time. (default: :obj:`65536`)

    Shapes:
        - **input:** :math:`(N, F)`, :math:`(L)`, :math:`(L)`
        - **output:** :math:`(L)`
    """
    if src.shape != dst.shape or src.dim() != 1:
        raise ValueError(f"'pair_dot' scores pairs: src and dst must be 1-D and as long; got "
                         f"shapes {tuple(src.shape)} and {tuple(dst.shape)}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"'pair_dot' got chunk={chunk!r}; pass an int >= 1 (pairs at a time)")
    out = _PairDot.apply(h, src, dst, chunk)
    assert isinstance(out, Tensor), "an autograd function returns a tensor"
    return out
