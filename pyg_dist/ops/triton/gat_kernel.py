r"""GAT attention in Triton, forward: per-entry scores, a softmax over each
row and the weighted aggregation (the semantics of
:func:`pyg_dist.ops.gat_ref`); the backward kernels are in
:mod:`.gat_grad_kernel`.

Every kernel runs one program per (row, head) and, where it writes features,
per block of ``BLOCK_F`` of the head's :math:`C` features; rows are walked
``BLOCK_E`` entries at a time. ``_gat_rows_kernel`` keeps an online softmax
(running maximum, sum and rescaled float32 accumulator) and stores each row's
log-sum-exp for backward. Hub rows (more than ``split_degree`` entries) are cut
into chunks as :mod:`.spmm_kernel` cuts them, so that no program walks
thousands of entries: ``_gat_chunks_kernel`` writes each chunk's (maximum, sum,
accumulator) and ``_gat_combine_kernel`` merges them in chunk order, without
atomics.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from pyg_dist.ops.gat_ref import GatArgs
from pyg_dist.ops.triton.checks import FLOAT_DTYPES, check_csr, check_same_device
from pyg_dist.ops.triton.configs import (
    CHUNK_NNZ,
    SPLIT_DEGREE,
    autotune_args,
)
from pyg_dist.ops.triton.plan import HubPlan, hub_plan
from pyg_dist.ops.triton.tiles import chunk_span, gather_tile, short_row_span

__all__ = ["gat_forward", "LaunchTensors", "GAT_AUTOTUNE", "chunk_rows", "pre_scores",
           "source_scores", "leaky_relu", "scale_tile"]

#: Autotuning of every GAT kernel; num_feats is the width C of one head.
GAT_AUTOTUNE = autotune_args("num_feats")


# ------------------------------------------------------------- device helpers


@triton.jit
def pre_scores(
    # pointers
    col_ptr,
    asrc_ptr,
    asrc_halo_ptr,
    adst_ptr,
    aedge_ptr,
    # the entries, their target row (a scalar) and the head
    e_offs,
    e_mask,
    row,
    head,
    # sizes
    num_owned,
    heads,
    # meta
    HAS_HALO: tl.constexpr,
    HAS_EDGE: tl.constexpr,
):
    """Float32 scores before the leaky ReLU ``[BLOCK_E]``:
    ``alpha_src[col] + alpha_dst[row] (+ alpha_edge)`` for one head, the
    halo's scores read at ``col - num_owned``."""
    src = tl.load(col_ptr + e_offs, mask=e_mask, other=0).to(tl.int64)
    pre = source_scores(asrc_ptr, asrc_halo_ptr, src, e_mask, head, num_owned, heads, HAS_HALO)
    pre = pre + tl.load(adst_ptr + row * heads + head).to(tl.float32)
    if HAS_EDGE:
        pre += tl.load(aedge_ptr + e_offs * heads + head, mask=e_mask, other=0.0).to(tl.float32)
    return pre


@triton.jit
def source_scores(asrc_ptr, asrc_halo_ptr, src, mask, head, num_owned, heads,
                  HAS_HALO: tl.constexpr):
    """Float32 ``alpha_src[src, head]`` for sources ``src`` (int64, a scalar or
    a tile) where ``mask``, zero elsewhere; a source from ``num_owned`` on is
    read from the halo's scores at ``src - num_owned``."""
    if HAS_HALO:
        owned = src < num_owned
        own = tl.load(asrc_ptr + src * heads + head, mask=mask & owned, other=0.0)
        halo = tl.load(asrc_halo_ptr + (src - num_owned) * heads + head,
                       mask=mask & ~owned, other=0.0)
        return tl.where(owned, own, halo).to(tl.float32)
    return tl.load(asrc_ptr + src * heads + head, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def leaky_relu(pre, negative_slope):
    return tl.where(pre > 0, pre, pre * negative_slope)


@triton.jit
def scale_tile(scale_ptr, e_offs, e_mask, head, heads, HAS_SCALE: tl.constexpr):
    """``edge_scale[e, head]`` as float32 ``[BLOCK_E]`` (ones without it)."""
    if HAS_SCALE:
        return tl.load(scale_ptr + e_offs * heads + head, mask=e_mask, other=0.0).to(tl.float32)
    return tl.where(e_mask, 1.0, 0.0)


@triton.jit
def _softmax_entries(
    # pointers
    col_ptr,
    x_ptr,
    halo_ptr,
    asrc_ptr,
    asrc_halo_ptr,
    adst_ptr,
    aedge_ptr,
    scale_ptr,
    # CSR entries [start, end), the target row, head and features of this program
    start,
    end,
    row,
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
    BLOCK_E: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    """Online softmax over the entries ``[start, end)`` for one head: the
    maximum score ``m``, the sum ``l`` of ``exp(z - m)`` and the float32
    accumulator ``[BLOCK_F]`` of ``exp(z - m) * w * s[col, head, f_offs]``
    (``m`` is ``-inf`` and the others zero for an empty range)."""
    m = tl.max(tl.full([BLOCK_E], float("-inf"), tl.float32), axis=0)
    total = tl.sum(tl.zeros([BLOCK_E], tl.float32), axis=0)
    acc = tl.zeros([BLOCK_F], tl.float32)
    stride = heads * num_feats
    for e0 in range(start, end, BLOCK_E):
        e_offs = e0 + tl.arange(0, BLOCK_E)
        e_mask = e_offs < end
        pre = pre_scores(col_ptr, asrc_ptr, asrc_halo_ptr, adst_ptr, aedge_ptr, e_offs, e_mask,
                          row, head, num_owned, heads, HAS_HALO, HAS_EDGE)
        z = tl.where(e_mask, leaky_relu(pre, negative_slope), float("-inf"))
        m_new = tl.maximum(m, tl.max(z, axis=0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        rescale = tl.exp(m - m_safe)
        p = tl.exp(z - m_safe)
        total = total * rescale + tl.sum(p, axis=0)
        p = p * scale_tile(scale_ptr, e_offs, e_mask, head, heads, HAS_SCALE)
        feats = gather_tile(
            col_ptr, col_ptr, x_ptr, halo_ptr, e_offs, e_mask, head * num_feats + f_offs, f_mask,
            num_owned, stride, stride, False, HAS_HALO,
        )
        acc = acc * rescale + tl.sum(p[:, None] * feats, axis=0)
        m = m_new
    return m, total, acc


@triton.jit
def _store_softmax_row(
    # pointers
    out_ptr,
    lse_ptr,
    # what to store
    row,
    head,
    m,
    total,
    acc,
    f_offs,
    f_mask,
    write_lse,
    # sizes
    heads,
    num_feats,
):
    """Stores ``acc / total`` (zeros for an empty row) in ``out``'s dtype and,
    if ``write_lse``, the row's log-sum-exp ``m + log(total)`` (zero if empty)."""
    nonempty = total > 0
    out = acc / tl.where(nonempty, total, 1.0)
    tl.store(out_ptr + (row * heads + head) * num_feats + f_offs,
             out.to(out_ptr.dtype.element_ty), mask=f_mask)
    lse = tl.where(nonempty, m + tl.log(tl.where(nonempty, total, 1.0)), 0.0)
    tl.store(lse_ptr + row * heads + head, lse, mask=write_lse)


# ------------------------------------------------------------------- forward


@triton.autotune(**GAT_AUTOTUNE)
@triton.jit
def _gat_rows_kernel(
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
    out_ptr,
    lse_ptr,
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
    """Grid ``(num_rows, heads, cdiv(num_feats, BLOCK_F))``: one row, head and
    feature block. Rows with more than ``split_degree`` entries are left to the
    split path."""
    row = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    f_offs = tl.program_id(2) * BLOCK_F + tl.arange(0, BLOCK_F)
    start, end, short = short_row_span(rowptr_ptr, row, num_rows, split_degree)
    m, total, acc = _softmax_entries(
        col_ptr, x_ptr, halo_ptr, asrc_ptr, asrc_halo_ptr, adst_ptr, aedge_ptr, scale_ptr,
        start, end, row, head, f_offs, f_offs < num_feats,
        num_owned, heads, num_feats, negative_slope,
        HAS_HALO, HAS_EDGE, HAS_SCALE, BLOCK_E, BLOCK_F,
    )
    # Row-wide conditions enter the store mask through the feature bound.
    f_limit = tl.where(short, num_feats, 0)
    _store_softmax_row(out_ptr, lse_ptr, row, head, m, total, acc, f_offs, f_offs < f_limit,
                       short & (tl.program_id(2) == 0), heads, num_feats)


@triton.autotune(**GAT_AUTOTUNE)
@triton.jit
def _gat_chunks_kernel(
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
    part_ptr,
    part_max_ptr,
    part_sum_ptr,
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
    """Grid ``(num_chunks, heads, cdiv(num_feats, BLOCK_F))``: the online
    softmax state of one chunk of a hub row, float32."""
    chunk = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    f_offs = tl.program_id(2) * BLOCK_F + tl.arange(0, BLOCK_F)
    start, end, row, in_grid = chunk_span(chunk_start_ptr, chunk_end_ptr, chunk_row_ptr, chunk,
                                          num_chunks)
    m, total, acc = _softmax_entries(
        col_ptr, x_ptr, halo_ptr, asrc_ptr, asrc_halo_ptr, adst_ptr, aedge_ptr, scale_ptr,
        start, end, row, head, f_offs, f_offs < num_feats,
        num_owned, heads, num_feats, negative_slope,
        HAS_HALO, HAS_EDGE, HAS_SCALE, BLOCK_E, BLOCK_F,
    )
    f_limit = tl.where(in_grid, num_feats, 0)
    tl.store(part_ptr + (chunk * heads + head) * num_feats + f_offs, acc, mask=f_offs < f_limit)
    first = in_grid & (tl.program_id(2) == 0)
    tl.store(part_max_ptr + chunk * heads + head, m, mask=first)
    tl.store(part_sum_ptr + chunk * heads + head, total, mask=first)


@triton.autotune(**GAT_AUTOTUNE)
@triton.jit
def _gat_combine_kernel(
    # pointers
    hub_rows_ptr,
    chunk_ptr_ptr,
    part_ptr,
    part_max_ptr,
    part_sum_ptr,
    out_ptr,
    lse_ptr,
    # sizes
    num_hubs,
    num_feats,
    heads,
    # meta
    BLOCK_E: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    """Grid ``(num_hubs, heads, cdiv(num_feats, BLOCK_F))``: merges the chunk
    states of one hub row, ``BLOCK_E`` chunks at a time, and stores the row."""
    hub = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    f_offs = tl.program_id(2) * BLOCK_F + tl.arange(0, BLOCK_F)
    f_mask = f_offs < num_feats
    in_grid = hub < num_hubs
    row = tl.load(hub_rows_ptr + hub, mask=in_grid, other=0)
    first = tl.load(chunk_ptr_ptr + hub, mask=in_grid, other=0)
    last = tl.load(chunk_ptr_ptr + hub + 1, mask=in_grid, other=0)
    m = tl.max(tl.full([BLOCK_E], float("-inf"), tl.float32), axis=0)
    total = tl.sum(tl.zeros([BLOCK_E], tl.float32), axis=0)
    acc = tl.zeros([BLOCK_F], tl.float32)
    for c0 in range(first, last, BLOCK_E):
        c_offs = c0 + tl.arange(0, BLOCK_E)
        c_mask = c_offs < last
        part_max = tl.load(part_max_ptr + c_offs * heads + head, mask=c_mask,
                           other=float("-inf"))
        part_sum = tl.load(part_sum_ptr + c_offs * heads + head, mask=c_mask, other=0.0)
        part = tl.load(part_ptr + (c_offs[:, None] * heads + head) * num_feats + f_offs[None, :],
                       mask=c_mask[:, None] & f_mask[None, :], other=0.0)
        m_new = tl.maximum(m, tl.max(part_max, axis=0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        rescale = tl.exp(m - m_safe)
        weight = tl.exp(part_max - m_safe)
        total = total * rescale + tl.sum(part_sum * weight, axis=0)
        acc = acc * rescale + tl.sum(part * weight[:, None], axis=0)
        m = m_new
    f_limit = tl.where(in_grid, num_feats, 0)
    _store_softmax_row(out_ptr, lse_ptr, row, head, m, total, acc, f_offs, f_offs < f_limit,
                       in_grid & (tl.program_id(2) == 0), heads, num_feats)


# ------------------------------------------------------------------ launchers


def gat_forward(
    args: GatArgs, split_degree: int = SPLIT_DEGREE, chunk_nnz: int = CHUNK_NNZ
) -> tuple[Tensor, Tensor]:
    r"""Launches the forward pass.

    Args:
        args (GatArgs): The checked arguments (see :func:`pyg_dist.ops.gat`):
            ``rowptr`` :obj:`[M + 1]` and ``col`` :obj:`[nnz]` int32 or int64,
            ``x`` :obj:`[N, H, C]` and ``x_halo`` :obj:`[Hh, H, C]` float32,
            float16 or bfloat16, the scores :obj:`[*, H]` in any of those.
        split_degree (int, optional): Rows with more entries take the split
            path. (default: :data:`~.configs.SPLIT_DEGREE`)
        chunk_nnz (int, optional): Entries per chunk of a split row.
            (default: :data:`~.configs.CHUNK_NNZ`)

    Returns:
        ``out`` :obj:`[M, H, C]` in ``x``'s dtype and ``lse`` :obj:`[M, H]`
        float32, each row's log-sum-exp of its scores (zero if empty).
    """
    t = LaunchTensors.of(args)
    num_rows, heads, num_feats = args.num_rows, args.x.size(1), args.x.size(2)
    out = torch.empty(num_rows, heads, num_feats, device=t.x.device, dtype=t.x.dtype)
    lse = torch.zeros(num_rows, heads, device=t.x.device, dtype=torch.float32)
    if num_rows == 0 or heads == 0 or num_feats == 0:
        return out.zero_(), lse
    flags = t.flags()

    def grid(num: int):
        return lambda meta: (num, heads, triton.cdiv(num_feats, meta["BLOCK_F"]))

    _gat_rows_kernel[grid(num_rows)](
        t.rowptr, t.col, t.x, t.halo, t.asrc, t.asrc_halo, t.adst, t.aedge, t.scale, out, lse,
        num_rows, num_feats, t.num_owned, heads, split_degree, args.negative_slope, **flags,
    )
    plan = hub_plan(t.rowptr, t.col, split_degree, chunk_nnz)
    if plan is None:
        return out, lse
    chunk_row = chunk_rows(plan)
    part = torch.empty(plan.num_chunks, heads, num_feats, device=out.device, dtype=torch.float32)
    part_max = torch.empty(plan.num_chunks, heads, device=out.device, dtype=torch.float32)
    part_sum = torch.empty_like(part_max)
    _gat_chunks_kernel[grid(plan.num_chunks)](
        plan.chunk_start, plan.chunk_end, chunk_row, t.col, t.x, t.halo, t.asrc, t.asrc_halo,
        t.adst, t.aedge, t.scale, part, part_max, part_sum,
        plan.num_chunks, num_feats, t.num_owned, heads, args.negative_slope, **flags,
    )
    _gat_combine_kernel[grid(plan.rows.numel())](
        plan.rows, plan.chunk_ptr, part, part_max, part_sum, out, lse,
        plan.rows.numel(), num_feats, heads,
    )
    return out, lse


def chunk_rows(plan: HubPlan) -> Tensor:
    """The row of each chunk ``[C]`` int64."""
    counts = plan.chunk_ptr[1:] - plan.chunk_ptr[:-1]
    return torch.repeat_interleave(plan.rows, counts, output_size=plan.num_chunks)


class LaunchTensors:
    """The launch-ready tensors of one call: contiguous, absent optionals
    replaced by a tensor the kernel never reads, and the flags saying which."""

    def __init__(self, args: GatArgs) -> None:
        self.rowptr, self.col = args.rowptr.contiguous(), args.col.contiguous()
        self.x = args.x.contiguous()
        self.has_halo = args.x_halo is not None and args.x_halo.size(0) > 0
        self.halo = args.x_halo.contiguous() if self.has_halo else self.x  # type: ignore[union-attr]
        self.asrc = args.alpha_src.contiguous()
        self.asrc_halo = (args.alpha_src_halo.contiguous()  # type: ignore[union-attr]
                          if self.has_halo else self.asrc)
        self.adst = args.alpha_dst.contiguous()
        self.aedge = self.asrc if args.alpha_edge is None else args.alpha_edge.contiguous()
        self.scale = self.asrc if args.edge_scale is None else args.edge_scale.contiguous()
        self.has_edge, self.has_scale = args.alpha_edge is not None, args.edge_scale is not None
        self.num_owned = args.num_owned

    @classmethod
    def of(cls, args: GatArgs) -> LaunchTensors:
        _check_args(args)
        return cls(args)

    def flags(self) -> dict[str, bool]:
        return dict(HAS_HALO=self.has_halo, HAS_EDGE=self.has_edge, HAS_SCALE=self.has_scale)


def _check_args(args: GatArgs) -> None:
    check_csr("gat", args.rowptr, args.col)
    for name in ("x", "x_halo", "alpha_src", "alpha_src_halo", "alpha_dst", "alpha_edge",
                 "edge_scale"):
        value = getattr(args, name)
        if value is not None and value.dtype not in FLOAT_DTYPES:
            raise TypeError(
                f"'gat' (Triton) expects '{name}' in float32, float16 or bfloat16 (got "
                f"{value.dtype})"
            )
    check_same_device("gat", args.rowptr, args.col, args.x, args.x_halo, args.alpha_src,
                      args.alpha_src_halo, args.alpha_dst, args.alpha_edge, args.edge_scale)

