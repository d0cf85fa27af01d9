r"""GAT attention in Triton, backward, target side (see
:func:`~pyg_dist.ops.gat_ref.gat_backward_ref` for the formulas):
``_grad_rows_kernel``, one program per (row, head), computes per entry
:math:`g = w \langle \bar{y}_i, s_{col} \rangle` (kept in ``dz``) and
:math:`\sum a g`, then :math:`dz = a (g - \sum a g)` times the leaky ReLU's
slope and the row sums of ``dz``. For hub rows ``_grad_chunks_kernel`` writes
each chunk's :math:`\sum a g` and ``_grad_combine_kernel`` adds them up and
finishes the row (a pass over the hub's entries that reads :math:`H` values per
entry, no features). Float32 throughout; no atomics.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from pyg_dist.ops.triton.gat_kernel import (
    GAT_AUTOTUNE,
    LaunchTensors,
    chunk_rows,
    leaky_relu,
    pre_scores,
    scale_tile,
)
from pyg_dist.ops.triton.plan import hub_plan
from pyg_dist.ops.triton.tiles import chunk_span, gather_tile, short_row_span

__all__ = ["score_grads"]


@triton.jit
def _grad_entries(
    # pointers
    col_ptr,
    x_ptr,
    halo_ptr,
    asrc_ptr,
    asrc_halo_ptr,
    adst_ptr,
    aedge_ptr,
    scale_ptr,
    lse_ptr,
    grad_out_ptr,
    dz_ptr,
    # CSR entries [start, end), their target row and the head
    start,
    end,
    row,
    head,
    # sizes
    num_owned,
    heads,
    num_feats,
    negative_slope,
    # meta
    HAS_HALO: tl.constexpr,
    HAS_EDGE: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    """First sweep: stores ``g = w * <grad_out[row, head], s[col, head]>`` in
    ``dz`` for the entries ``[start, end)`` and returns ``sum a * g``."""
    lse = tl.load(lse_ptr + row * heads + head)
    stride = heads * num_feats
    weighted = tl.sum(tl.zeros([BLOCK_E], tl.float32), axis=0)
    for e0 in range(start, end, BLOCK_E):
        e_offs = e0 + tl.arange(0, BLOCK_E)
        e_mask = e_offs < end
        pre = pre_scores(col_ptr, asrc_ptr, asrc_halo_ptr, adst_ptr, aedge_ptr, e_offs, e_mask,
                          row, head, num_owned, heads, HAS_HALO, HAS_EDGE)
        coef = tl.where(e_mask, tl.exp(leaky_relu(pre, negative_slope) - lse), 0.0)
        g = tl.zeros([BLOCK_E], tl.float32)
        for f0 in range(0, num_feats, BLOCK_F):
            f_offs = f0 + tl.arange(0, BLOCK_F)
            f_mask = f_offs < num_feats
            f_head = head * num_feats + f_offs
            feats = gather_tile(
                col_ptr, col_ptr, x_ptr, halo_ptr, e_offs, e_mask, f_head, f_mask,
                num_owned, stride, stride, False, HAS_HALO,
            )
            go = tl.load(grad_out_ptr + row * stride + f_head, mask=f_mask, other=0.0)
            g += tl.sum(feats * go.to(tl.float32)[None, :], axis=1)
        g = g * scale_tile(scale_ptr, e_offs, e_mask, head, heads, HAS_SCALE)
        tl.store(dz_ptr + e_offs * heads + head, g, mask=e_mask)
        weighted += tl.sum(coef * g, axis=0)
    return weighted


@triton.jit
def _finish_entries(
    # pointers
    col_ptr,
    asrc_ptr,
    asrc_halo_ptr,
    adst_ptr,
    aedge_ptr,
    lse_ptr,
    dz_ptr,
    # CSR entries [start, end), their target row, the head and sum a * g
    start,
    end,
    row,
    head,
    weighted,
    # sizes
    num_owned,
    heads,
    negative_slope,
    # meta
    HAS_HALO: tl.constexpr,
    HAS_EDGE: tl.constexpr,
    BLOCK_E: tl.constexpr,
):
    """Second sweep: turns the ``g`` kept in ``dz`` into
    ``a * (g - weighted) * slope`` and returns the sum of those."""
    lse = tl.load(lse_ptr + row * heads + head)
    total = tl.sum(tl.zeros([BLOCK_E], tl.float32), axis=0)
    for e0 in range(start, end, BLOCK_E):
        e_offs = e0 + tl.arange(0, BLOCK_E)
        e_mask = e_offs < end
        pre = pre_scores(col_ptr, asrc_ptr, asrc_halo_ptr, adst_ptr, aedge_ptr, e_offs, e_mask,
                          row, head, num_owned, heads, HAS_HALO, HAS_EDGE)
        coef = tl.exp(leaky_relu(pre, negative_slope) - lse)
        g = tl.load(dz_ptr + e_offs * heads + head, mask=e_mask, other=0.0)
        dz = tl.where(e_mask, coef * (g - weighted) * tl.where(pre > 0, 1.0, negative_slope), 0.0)
        tl.store(dz_ptr + e_offs * heads + head, dz, mask=e_mask)
        total += tl.sum(dz, axis=0)
    return total


@triton.autotune(**GAT_AUTOTUNE)
@triton.jit
def _grad_rows_kernel(
    # pointers
    rowptr_ptr,
    col_ptr,
    x_ptr,
    halo_ptr,
    asrc_ptr,
    asrc_halo_ptr,
    adst_ptr,
    aedge_ptr,
    scale_ptr,
    lse_ptr,
    grad_out_ptr,
    dz_ptr,
    grad_dst_ptr,
    # sizes
    num_rows,
    num_feats,
    num_owned,
    heads,
    split_degree,
    negative_slope,
    # meta
    HAS_HALO: tl.constexpr,
    HAS_EDGE: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    """Grid ``(num_rows, heads)``: ``dz`` of one row's entries and their sum,
    for rows of at most ``split_degree`` entries."""
    row = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    start, end, short = short_row_span(rowptr_ptr, row, num_rows, split_degree)
    weighted = _grad_entries(
        col_ptr, x_ptr, halo_ptr, asrc_ptr, asrc_halo_ptr, adst_ptr, aedge_ptr, scale_ptr,
        lse_ptr, grad_out_ptr, dz_ptr, start, end, row, head,
        num_owned, heads, num_feats, negative_slope,
        HAS_HALO, HAS_EDGE, HAS_SCALE, BLOCK_E, BLOCK_F,
    )
    tl.debug_barrier()  # the second sweep reads the g that the first one stored
    total = _finish_entries(
        col_ptr, asrc_ptr, asrc_halo_ptr, adst_ptr, aedge_ptr, lse_ptr, dz_ptr,
        start, end, row, head, weighted, num_owned, heads, negative_slope,
        HAS_HALO, HAS_EDGE, BLOCK_E,
    )
    tl.store(grad_dst_ptr + row * heads + head, total, mask=short)


@triton.autotune(**GAT_AUTOTUNE)
@triton.jit
def _grad_chunks_kernel(
    # pointers
    chunk_start_ptr,
    chunk_end_ptr,
    chunk_row_ptr,
    col_ptr,
    x_ptr,
    halo_ptr,
    asrc_ptr,
    asrc_halo_ptr,
    adst_ptr,
    aedge_ptr,
    scale_ptr,
    lse_ptr,
    grad_out_ptr,
    dz_ptr,
    part_ptr,
    # sizes
    num_chunks,
    num_feats,
    num_owned,
    heads,
    negative_slope,
    # meta
    HAS_HALO: tl.constexpr,
    HAS_EDGE: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    """Grid ``(num_chunks, heads)``: the first sweep over one chunk of a hub
    row; stores the chunk's ``sum a * g``."""
    chunk = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    start, end, row, in_grid = chunk_span(chunk_start_ptr, chunk_end_ptr, chunk_row_ptr, chunk,
                                          num_chunks)
    weighted = _grad_entries(
        col_ptr, x_ptr, halo_ptr, asrc_ptr, asrc_halo_ptr, adst_ptr, aedge_ptr, scale_ptr,
        lse_ptr, grad_out_ptr, dz_ptr, start, end, row, head,
        num_owned, heads, num_feats, negative_slope,
        HAS_HALO, HAS_EDGE, HAS_SCALE, BLOCK_E, BLOCK_F,
    )
    tl.store(part_ptr + chunk * heads + head, weighted, mask=in_grid)


@triton.autotune(**GAT_AUTOTUNE)
@triton.jit
def _grad_combine_kernel(
    # pointers
    hub_rows_ptr,
    chunk_ptr_ptr,
    rowptr_ptr,
    col_ptr,
    asrc_ptr,
    asrc_halo_ptr,
    adst_ptr,
    aedge_ptr,
    lse_ptr,
    dz_ptr,
    part_ptr,
    grad_dst_ptr,
    # sizes
    num_hubs,
    num_feats,
    num_owned,
    heads,
    negative_slope,
    # meta
    HAS_HALO: tl.constexpr,
    HAS_EDGE: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    """Grid ``(num_hubs, heads)``: adds up the chunks' ``sum a * g`` of one hub
    row, in chunk order, and runs the second sweep over the whole row."""
    hub = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    in_grid = hub < num_hubs
    row = tl.load(hub_rows_ptr + hub, mask=in_grid, other=0)
    first = tl.load(chunk_ptr_ptr + hub, mask=in_grid, other=0)
    last = tl.load(chunk_ptr_ptr + hub + 1, mask=in_grid, other=0)
    weighted = tl.sum(tl.zeros([BLOCK_E], tl.float32), axis=0)
    for c0 in range(first, last, BLOCK_E):
        c_offs = c0 + tl.arange(0, BLOCK_E)
        weighted += tl.sum(tl.load(part_ptr + c_offs * heads + head, mask=c_offs < last,
                                   other=0.0), axis=0)
    start = tl.load(rowptr_ptr + row, mask=in_grid, other=0).to(tl.int64)
    end = tl.load(rowptr_ptr + row + 1, mask=in_grid, other=0).to(tl.int64)
    total = _finish_entries(
        col_ptr, asrc_ptr, asrc_halo_ptr, adst_ptr, aedge_ptr, lse_ptr, dz_ptr,
        start, end, row, head, weighted, num_owned, heads, negative_slope,
        HAS_HALO, HAS_EDGE, BLOCK_E,
    )
    tl.store(grad_dst_ptr + row * heads + head, total, mask=in_grid)


def score_grads(t: LaunchTensors, lse: Tensor, grad_out: Tensor, dz: Tensor, grad_dst: Tensor,
                 negative_slope: float, split_degree: int, chunk_nnz: int,
                 flags: dict[str, bool]) -> None:
    """Launches the target side: ``dz`` (the gradient of the scores) and its
    row sums ``grad_dst``, both float32 and zero-filled by the caller."""
    num_rows, heads, num_feats = grad_out.shape
    _grad_rows_kernel[(num_rows, heads)](
        t.rowptr, t.col, t.x, t.halo, t.asrc, t.asrc_halo, t.adst, t.aedge, t.scale, lse,
        grad_out, dz, grad_dst,
        num_rows, num_feats, t.num_owned, heads, split_degree, negative_slope, **flags,
    )
    plan = hub_plan(t.rowptr, t.col, split_degree, chunk_nnz)
    if plan is None:
        return
    part = torch.empty(plan.num_chunks, heads, device=dz.device, dtype=torch.float32)
    _grad_chunks_kernel[(plan.num_chunks, heads)](
        plan.chunk_start, plan.chunk_end, chunk_rows(plan), t.col, t.x, t.halo, t.asrc,
        t.asrc_halo, t.adst, t.aedge, t.scale, lse, grad_out, dz, part,
        plan.num_chunks, num_feats, t.num_owned, heads, negative_slope, **flags,
    )
    _grad_combine_kernel[(plan.rows.numel(), heads)](
        plan.rows, plan.chunk_ptr, t.rowptr, t.col, t.asrc, t.asrc_halo, t.adst, t.aedge, lse,
        dz, part, grad_dst,
        plan.rows.numel(), num_feats, t.num_owned, heads, negative_slope,
        HAS_HALO=flags["HAS_HALO"], HAS_EDGE=flags["HAS_EDGE"],
    )
