r"""GAT attention in Triton, backward (see
:func:`~pyg_dist.ops.gat_ref.gat_backward_ref` for the formulas); the forward
and the helpers shared with it are in :mod:`.gat_kernel`.

- Target side: ``_grad_rows_kernel``, one program per (row, head), computes per
  entry :math:`g = w \langle \bar{y}_i, s_{col} \rangle` (kept in ``dz``) and
  :math:`\sum a g`, then :math:`dz = a (g - \sum a g)` times the leaky ReLU's
  slope and the row sums of ``dz``. For hub rows ``_grad_chunks_kernel`` writes
  each chunk's :math:`\sum a g` and ``_grad_combine_kernel`` adds them up and
  finishes the row (a pass over the hub's entries that reads :math:`H` values
  per entry, no features).
- Source side: ``_source_rows_kernel`` walks the transposed graph, one program
  per (source, head, block of features), recomputing each coefficient from
  the log-sum-exp, and sums :math:`a w \bar{y}_i` and ``dz`` per source; hub
  sources go through ``_source_chunks_kernel`` and the SpMM's deterministic
  combine.

Scores, sums and gradients of scores are float32; no atomics anywhere.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from pyg_dist.ops.gat_ref import GatArgs, GatGrads
from pyg_dist.ops.triton.configs import CHUNK_NNZ, SPLIT_DEGREE
from pyg_dist.ops.triton.gat_kernel import (
    GAT_AUTOTUNE,
    LaunchTensors,
    chunk_rows,
    leaky_relu,
    pre_scores,
    scale_tile,
)
from pyg_dist.ops.triton.plan import hub_plan
from pyg_dist.ops.triton.spmm_kernel import fold_chunk_sums
from pyg_dist.ops.triton.tiles import gather_tile

__all__ = ["gat_backward"]


# ------------------------------------------------------- backward, target side


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
    in_grid = row < num_rows
    start = tl.load(rowptr_ptr + row, mask=in_grid, other=0).to(tl.int64)
    end = tl.load(rowptr_ptr + row + 1, mask=in_grid, other=0).to(tl.int64)
    is_short = (end - start) <= split_degree
    end = tl.where(is_short & in_grid, end, start)
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
    tl.store(grad_dst_ptr + row * heads + head, total, mask=is_short & in_grid)


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
    in_grid = chunk < num_chunks
    start = tl.load(chunk_start_ptr + chunk, mask=in_grid, other=0)
    end = tl.load(chunk_end_ptr + chunk, mask=in_grid, other=0)
    row = tl.load(chunk_row_ptr + chunk, mask=in_grid, other=0)
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


# ------------------------------------------------------- backward, source side


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
    # entries [start, end) of the transposed graph, their source, head, features
    start,
    end,
    source,
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
    if HAS_HALO:
        owned = source < num_owned
        own = tl.load(asrc_ptr + source * heads + head, mask=owned, other=0.0)
        halo = tl.load(asrc_halo_ptr + (source - num_owned) * heads + head, mask=~owned,
                       other=0.0)
        alpha = tl.where(owned, own, halo).to(tl.float32)
    else:
        alpha = tl.load(asrc_ptr + source * heads + head).to(tl.float32)
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
    in_grid = source < num_src
    start = tl.load(colptr_ptr + source, mask=in_grid, other=0).to(tl.int64)
    end = tl.load(colptr_ptr + source + 1, mask=in_grid, other=0).to(tl.int64)
    is_short = (end - start) <= split_degree
    end = tl.where(is_short & in_grid, end, start)
    acc, alpha_sum = _source_entries(
        row_ptr, perm_ptr, asrc_ptr, asrc_halo_ptr, adst_ptr, aedge_ptr, scale_ptr, lse_ptr,
        grad_out_ptr, dz_ptr, start, end, source, head, f_offs, f_offs < num_feats,
        num_owned, heads, num_feats, negative_slope,
        HAS_HALO, HAS_EDGE, HAS_SCALE, NEED_SRC, NEED_ALPHA, BLOCK_E, BLOCK_F,
    )
    if NEED_SRC:
        f_limit = tl.where(is_short & in_grid, num_feats, 0)
        tl.store(grad_src_ptr + (source * heads + head) * num_feats + f_offs,
                 acc.to(grad_src_ptr.dtype.element_ty), mask=f_offs < f_limit)
    if NEED_ALPHA:
        tl.store(grad_alpha_ptr + source * heads + head, alpha_sum,
                 mask=is_short & in_grid & (tl.program_id(2) == 0))


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
    in_grid = chunk < num_chunks
    start = tl.load(chunk_start_ptr + chunk, mask=in_grid, other=0)
    end = tl.load(chunk_end_ptr + chunk, mask=in_grid, other=0)
    source = tl.load(chunk_row_ptr + chunk, mask=in_grid, other=0)
    acc, alpha_sum = _source_entries(
        row_ptr, perm_ptr, asrc_ptr, asrc_halo_ptr, adst_ptr, aedge_ptr, scale_ptr, lse_ptr,
        grad_out_ptr, dz_ptr, start, end, source, head, f_offs, f_offs < num_feats,
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


def gat_backward(
    args: GatArgs,
    lse: Tensor,
    grad_out: Tensor,
    transpose: tuple[Tensor, Tensor, Tensor] | None,
    need_src: bool,
    need_score: bool,
    need_alpha_src: bool,
    split_degree: int = SPLIT_DEGREE,
    chunk_nnz: int = CHUNK_NNZ,
) -> GatGrads:
    r"""Launches the backward pass (see
    :func:`~pyg_dist.ops.gat_ref.gat_backward_ref` for the formulas).

    Args:
        args (GatArgs): The forward's arguments (see :func:`gat_forward`).
        lse (torch.Tensor): The forward's log-sum-exp :obj:`[M, H]` float32.
        grad_out (torch.Tensor): :obj:`[M, H, C]`, ``x``'s dtype.
        transpose (tuple, optional): ``(colptr, row, perm)`` of
            :func:`~pyg_dist.ops.csr_transpose`; needed for ``need_src`` and
            ``need_alpha_src``.
        need_src, need_score, need_alpha_src (bool): What to compute: the
            gradient of the source features, of the scores (``dz``, its row
            sums), of the source scores (its column sums).
        split_degree, chunk_nnz (int, optional): As in :func:`gat_forward`,
            for the rows and for the sources.

    Returns:
        :class:`~pyg_dist.ops.gat_ref.GatGrads`.
    """
    t = LaunchTensors.of(args)
    heads, num_feats = args.x.size(1), args.x.size(2)
    grad_out = grad_out.contiguous()
    lse = lse.contiguous()
    if grad_out.shape != (args.num_rows, heads, num_feats) or grad_out.dtype != t.x.dtype:
        raise ValueError(
            f"'gat_backward' expects 'grad_out' of shape {[args.num_rows, heads, num_feats]} in "
            f"{t.x.dtype} (got {list(grad_out.shape)} of {grad_out.dtype})"
        )
    flags = t.flags()
    grads = GatGrads()
    device = t.x.device
    if need_score:
        grads.score = torch.zeros(t.col.numel(), heads, device=device, dtype=torch.float32)
        grads.alpha_dst = torch.zeros(args.num_rows, heads, device=device, dtype=torch.float32)
        if args.num_rows and heads:
            _score_grads(t, lse, grad_out, grads.score, grads.alpha_dst, args.negative_slope,
                         split_degree, chunk_nnz, flags)
    if need_src or need_alpha_src:
        assert transpose is not None, "gat_backward needs the transpose for source gradients"
        need_alpha = need_alpha_src and grads.score is not None
        grads.src = (torch.zeros(args.num_src, heads, num_feats, device=device, dtype=t.x.dtype)
                     if need_src else None)
        grads.alpha_src = (torch.zeros(args.num_src, heads, device=device, dtype=torch.float32)
                           if need_alpha else None)
        if args.num_src and heads and t.col.numel():
            _source_grads(t, transpose, lse, grad_out, grads, args.negative_slope,
                          split_degree, chunk_nnz, flags)
    return grads


def _score_grads(t: LaunchTensors, lse: Tensor, grad_out: Tensor, dz: Tensor, grad_dst: Tensor,
                 negative_slope: float, split_degree: int, chunk_nnz: int,
                 flags: dict[str, bool]) -> None:
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


def _source_grads(t: LaunchTensors, transpose: tuple[Tensor, Tensor, Tensor], lse: Tensor,
                  grad_out: Tensor, grads: GatGrads, negative_slope: float, split_degree: int,
                  chunk_nnz: int, flags: dict[str, bool]) -> None:
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


