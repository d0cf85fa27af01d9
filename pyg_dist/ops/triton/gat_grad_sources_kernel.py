r"""GAT attention in Triton, backward, source side (see
:func:`~pyg_dist.ops.gat_ref.gat_backward_ref` for the formulas):
``_source_rows_kernel`` walks the transposed graph, one program per (source,
head, block of features), recomputing each coefficient from the log-sum-exp,
and sums :math:`a w \bar{y}_i` and ``dz`` per source; hub sources go through
``_source_chunks_kernel`` and the SpMM's deterministic combine. Float32 sums;
no atomics.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from pyg_dist.ops.gat_ref import GatGrads
from pyg_dist.ops.triton.gat_kernel import (
    GAT_AUTOTUNE,
    LaunchTensors,
    chunk_rows,
    leaky_relu,
    scale_tile,
    source_scores,
)
from pyg_dist.ops.triton.plan import hub_plan
from pyg_dist.ops.triton.spmm_kernel import fold_chunk_sums
from pyg_dist.ops.triton.tiles import chunk_span, short_row_span

__all__ = ["source_grads"]


@triton.jit
def _source_entries(
    # pointers
    row_ptr,
    perm_ptr,
    asrc_ptr,
    asrc_halo_ptr,
    adst_ptr,
    aedge_ptr,
    scale_ptr,
    lse_ptr,
    grad_out_ptr,
    dz_ptr,
    # entries [start, end) of the transposed graph, their source (if valid),
    # head, features
    start,
    end,
    source,
    valid,
    head,
    f_offs,
    f_mask,
    # sizes
    num_owned,
    heads,
    num_feats,
    negative_slope,
    # meta
    HAS_HALO: tl.constexpr,
    HAS_EDGE: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    NEED_SRC: tl.constexpr,
    NEED_ALPHA: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    """Sums over the out-edges ``[start, end)`` of ``source`` (CSR entry
    ``perm[k]``, target ``row[k]``): ``a * w * grad_out[row, head, f_offs]``
    ``[BLOCK_F]`` (if ``NEED_SRC``) and ``dz[perm, head]`` (if ``NEED_ALPHA``)."""
    alpha = source_scores(asrc_ptr, asrc_halo_ptr, source, valid, head, num_owned, heads,
                          HAS_HALO)
    stride = heads * num_feats
    acc = tl.zeros([BLOCK_F], tl.float32)
    alpha_sum = tl.sum(tl.zeros([BLOCK_E], tl.float32), axis=0)
    for k0 in range(start, end, BLOCK_E):
        k_offs = k0 + tl.arange(0, BLOCK_E)
        k_mask = k_offs < end
        e_offs = tl.load(perm_ptr + k_offs, mask=k_mask, other=0)
        if NEED_ALPHA:
            alpha_sum += tl.sum(tl.load(dz_ptr + e_offs * heads + head, mask=k_mask, other=0.0),
                                axis=0)
        if NEED_SRC:
            target = tl.load(row_ptr + k_offs, mask=k_mask, other=0).to(tl.int64)
            pre = alpha + tl.load(adst_ptr + target * heads + head, mask=k_mask,
                                  other=0.0).to(tl.float32)
            if HAS_EDGE:
                pre += tl.load(aedge_ptr + e_offs * heads + head, mask=k_mask,
                               other=0.0).to(tl.float32)
            lse = tl.load(lse_ptr + target * heads + head, mask=k_mask, other=0.0)
            coef = tl.exp(leaky_relu(pre, negative_slope) - lse)
            coef = coef * scale_tile(scale_ptr, e_offs, k_mask, head, heads, HAS_SCALE)
            go = tl.load(grad_out_ptr + target[:, None] * stride + head * num_feats
                         + f_offs[None, :], mask=k_mask[:, None] & f_mask[None, :], other=0.0)
            acc += tl.sum(coef[:, None] * go.to(tl.float32), axis=0)
    return acc, alpha_sum


@triton.autotune(**GAT_AUTOTUNE)
@triton.jit
def _source_rows_kernel(
    # pointers
    colptr_ptr,
    row_ptr,
    perm_ptr,
    asrc_ptr,
    asrc_halo_ptr,
    adst_ptr,
    aedge_ptr,
    scale_ptr,
    lse_ptr,
    grad_out_ptr,
    dz_ptr,
    grad_src_ptr,
    grad_alpha_ptr,
    # sizes
    num_src,
    num_feats,
    num_owned,
    heads,
    split_degree,
    negative_slope,
    # meta
    HAS_HALO: tl.constexpr,
    HAS_EDGE: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    NEED_SRC: tl.constexpr,
    NEED_ALPHA: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    """Grid ``(num_src, heads, cdiv(num_feats, BLOCK_F))`` (one feature block
    without ``NEED_SRC``): the gradients of one source and head, for sources of
    at most ``split_degree`` out-edges."""
    source = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    f_offs = tl.program_id(2) * BLOCK_F + tl.arange(0, BLOCK_F)
    start, end, short = short_row_span(colptr_ptr, source, num_src, split_degree)
    acc, alpha_sum = _source_entries(
        row_ptr, perm_ptr, asrc_ptr, asrc_halo_ptr, adst_ptr, aedge_ptr, scale_ptr, lse_ptr,
        grad_out_ptr, dz_ptr, start, end, source, source < num_src, head, f_offs,
        f_offs < num_feats,
        num_owned, heads, num_feats, negative_slope,
        HAS_HALO, HAS_EDGE, HAS_SCALE, NEED_SRC, NEED_ALPHA, BLOCK_E, BLOCK_F,
    )
    if NEED_SRC:
        f_limit = tl.where(short, num_feats, 0)
        tl.store(grad_src_ptr + (source * heads + head) * num_feats + f_offs,
                 acc.to(grad_src_ptr.dtype.element_ty), mask=f_offs < f_limit)
    if NEED_ALPHA:
        tl.store(grad_alpha_ptr + source * heads + head, alpha_sum,
                 mask=short & (tl.program_id(2) == 0))


@triton.autotune(**GAT_AUTOTUNE)
@triton.jit
def _source_chunks_kernel(
    # pointers
    chunk_start_ptr,
    chunk_end_ptr,
    chunk_row_ptr,
    row_ptr,
    perm_ptr,
    asrc_ptr,
    asrc_halo_ptr,
    adst_ptr,
    aedge_ptr,
    scale_ptr,
    lse_ptr,
    grad_out_ptr,
    dz_ptr,
    part_ptr,
    part_alpha_ptr,
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
    NEED_SRC: tl.constexpr,
    NEED_ALPHA: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    """Grid ``(num_chunks, heads, cdiv(num_feats, BLOCK_F))``: the float32
    partial sums of one chunk of a hub source's out-edges."""
    chunk = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    f_offs = tl.program_id(2) * BLOCK_F + tl.arange(0, BLOCK_F)
    start, end, source, in_grid = chunk_span(chunk_start_ptr, chunk_end_ptr, chunk_row_ptr,
                                             chunk, num_chunks)
    acc, alpha_sum = _source_entries(
        row_ptr, perm_ptr, asrc_ptr, asrc_halo_ptr, adst_ptr, aedge_ptr, scale_ptr, lse_ptr,
        grad_out_ptr, dz_ptr, start, end, source, in_grid, head, f_offs, f_offs < num_feats,
        num_owned, heads, num_feats, negative_slope,
        HAS_HALO, HAS_EDGE, HAS_SCALE, NEED_SRC, NEED_ALPHA, BLOCK_E, BLOCK_F,
    )
    if NEED_SRC:
        f_limit = tl.where(in_grid, num_feats, 0)
        tl.store(part_ptr + (chunk * heads + head) * num_feats + f_offs, acc,
                 mask=f_offs < f_limit)
    if NEED_ALPHA:
        tl.store(part_alpha_ptr + chunk * heads + head, alpha_sum,
                 mask=in_grid & (tl.program_id(2) == 0))


def source_grads(t: LaunchTensors, transpose: tuple[Tensor, Tensor, Tensor], lse: Tensor,
                  grad_out: Tensor, grads: GatGrads, negative_slope: float, split_degree: int,
                  chunk_nnz: int, flags: dict[str, bool]) -> None:
    """Launches the source side over the transposed graph ``(colptr, row,
    perm)``: ``grads.src`` and ``grads.alpha_src``, those not :obj:`None`
    (zero-filled by the caller)."""
    colptr, row, perm = (v.contiguous() for v in transpose)
    num_rows, heads, num_feats = grad_out.shape
    num_src = colptr.numel() - 1
    # Tensors the kernels never touch stand in for the gradients not asked for.
    need_src, need_alpha = grads.src is not None, grads.alpha_src is not None
    grad_src = grads.src if grads.src is not None else grad_out
    grad_alpha = grads.alpha_src if grads.alpha_src is not None else lse
    dz = grads.score if need_alpha and grads.score is not None else lse
    consts = dict(flags, NEED_SRC=need_src, NEED_ALPHA=need_alpha)

    def grid(num: int):
        if not need_src:  # one program per source and head
            return (num, heads, 1)
        return lambda meta: (num, heads, triton.cdiv(num_feats, meta["BLOCK_F"]))

    _source_rows_kernel[grid(num_src)](
        colptr, row, perm, t.asrc, t.asrc_halo, t.adst, t.aedge, t.scale, lse, grad_out, dz,
        grad_src, grad_alpha,
        num_src, num_feats, t.num_owned, heads, split_degree, negative_slope, **consts,
    )
    plan = hub_plan(colptr, row, split_degree, chunk_nnz)
    if plan is None:
        return
    part = torch.empty(plan.num_chunks, heads, num_feats if need_src else 0, device=lse.device,
                       dtype=torch.float32)
    part_alpha = torch.empty(plan.num_chunks, heads, device=lse.device, dtype=torch.float32)
    _source_chunks_kernel[grid(plan.num_chunks)](
        plan.chunk_start, plan.chunk_end, chunk_rows(plan), row, perm, t.asrc, t.asrc_halo,
        t.adst, t.aedge, t.scale, lse, grad_out, dz, part if need_src else part_alpha,
        part_alpha,
        plan.num_chunks, num_feats, t.num_owned, heads, negative_slope, **consts,
    )
    if need_src:
        fold_chunk_sums(plan, colptr, part.view(plan.num_chunks, -1),
                        grad_src.view(num_src, -1))
    if need_alpha:
        fold_chunk_sums(plan, colptr, part_alpha, grad_alpha)
