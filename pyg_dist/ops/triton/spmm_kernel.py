r"""Forward SpMM in Triton: :math:`\mathbf{Y} = \mathbf{A} \cdot [\mathbf{X} ;
\mathbf{X}_{halo}]` for a CSR matrix :math:`\mathbf{A}`, each row reduced by a
sum, a mean or a first-maximum.

Work is cut in two so that a hub row (thousands of entries) never serialises
one program:

- ``_spmm_rows_kernel``: one program per (row, block of ``BLOCK_F`` features)
  for every row with at most ``split_degree`` entries; it walks the row
  ``BLOCK_E`` entries at a time, gathering a ``[BLOCK_E, BLOCK_F]`` tile of
  source rows per step.
- the split path, for the other rows (the :class:`~.plan.HubPlan`, cached per
  graph): ``_spmm_chunks_kernel`` reduces each chunk of ``chunk_nnz`` entries
  into a float32 partial (and, for max, the position of its first maximum);
  ``_spmm_combine_kernel`` then folds the partials of each hub row in chunk
  order. The combine is deterministic (no atomics) and keeps first-max
  semantics, as tiles and chunks are merged in CSR order.

All accumulation is in float32; the output has ``x``'s dtype.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from pyg_dist.ops.triton.checks import (
    FLOAT_DTYPES,
    check_csr,
    check_dense,
    check_same_device,
    row_major,
)
from pyg_dist.ops.triton.configs import (
    CHUNK_NNZ,
    SPLIT_DEGREE,
    autotune_args,
)
from pyg_dist.ops.triton.plan import HubPlan, hub_plan
from pyg_dist.ops.triton.tiles import gather_tile, merge_first_max

__all__ = ["spmm_forward", "fold_chunk_sums", "REDUCTIONS"]

REDUCTIONS = ("sum", "mean", "max")

# Keyed on the width and the reduction: max carries a second (int64) tile
# through the loop, which shifts the best tile size.
_SPMM_AUTOTUNE = autotune_args("num_feats", "REDUCE")


@triton.jit
def _reduce_entries(
    # pointers
    col_ptr,
    value_ptr,
    x_ptr,
    halo_ptr,
    # CSR entries [start, end) and the features of this program
    start,
    end,
    f_offs,
    f_mask,
    # sizes
    num_owned,
    nnz,
    # strides
    stride_x,
    stride_halo,
    # meta
    REDUCE: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    HAS_HALO: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    """Reduces the entries ``[start, end)``: returns the float32 sum (``"sum"``,
    ``"mean"``) or maximum (``"max"``) ``[BLOCK_F]`` and, for max, the int64
    position of the first maximum (``nnz`` where the range is empty)."""
    if REDUCE == "max":
        acc = tl.full([BLOCK_F], float("-inf"), tl.float32)
    else:
        acc = tl.zeros([BLOCK_F], tl.float32)
    arg = tl.full([BLOCK_F], nnz, tl.int64)
    for e0 in range(start, end, BLOCK_E):
        e_offs = e0 + tl.arange(0, BLOCK_E)
        e_mask = e_offs < end
        msg = gather_tile(
            col_ptr, value_ptr, x_ptr, halo_ptr, e_offs, e_mask, f_offs, f_mask,
            num_owned, stride_x, stride_halo, HAS_VALUE, HAS_HALO,
        )
        if REDUCE == "max":
            acc, arg = merge_first_max(acc, arg, msg, e_offs[:, None], e_mask[:, None], nnz)
        else:
            acc += tl.sum(msg, axis=0)
    return acc, arg


@triton.jit
def _store_row(
    # pointers
    out_ptr,
    arg_ptr,
    # what to store
    row,
    acc,
    arg,
    degree,
    f_offs,
    mask,
    # sizes
    nnz,
    # strides
    stride_out,
    # meta
    REDUCE: tl.constexpr,
):
    """Finishes a row (mean: divide by its degree; max: zero where it is empty)
    and stores it, cast to ``out``'s dtype, and for max its ``arg``."""
    if REDUCE == "mean":
        acc = acc / tl.maximum(degree, 1).to(tl.float32)
    if REDUCE == "max":
        acc = tl.where(arg < nnz, acc, 0.0)
        tl.store(arg_ptr + row * stride_out + f_offs, arg, mask=mask)
    tl.store(out_ptr + row * stride_out + f_offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.autotune(**_SPMM_AUTOTUNE)
@triton.jit
def _spmm_rows_kernel(
    # pointers
    rowptr_ptr,
    col_ptr,
    value_ptr,
    x_ptr,
    halo_ptr,
    out_ptr,
    arg_ptr,
    # sizes
    num_rows,
    num_feats,
    num_owned,
    nnz,
    split_degree,
    # strides
    stride_x,
    stride_halo,
    stride_out,
    # meta
    REDUCE: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    HAS_HALO: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    """Grid ``(num_rows, cdiv(num_feats, BLOCK_F))``: one row, one feature block.
    Rows with more than ``split_degree`` entries are left to the split path."""
    row = tl.program_id(0).to(tl.int64)
    f_offs = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    f_mask = f_offs < num_feats
    in_grid = row < num_rows
    start = tl.load(rowptr_ptr + row, mask=in_grid, other=0).to(tl.int64)
    end = tl.load(rowptr_ptr + row + 1, mask=in_grid, other=0).to(tl.int64)
    degree = end - start
    is_short = degree <= split_degree
    end = tl.where(is_short, end, start)
    acc, arg = _reduce_entries(
        col_ptr, value_ptr, x_ptr, halo_ptr, start, end, f_offs, f_mask,
        num_owned, nnz, stride_x, stride_halo,
        REDUCE, HAS_VALUE, HAS_HALO, BLOCK_E, BLOCK_F,
    )
    # Row-wide conditions enter the store mask through the feature bound (a
    # block & scalar mask is also rejected by Triton's interpreter).
    f_limit = tl.where(is_short & in_grid, num_feats, 0)
    _store_row(
        out_ptr, arg_ptr, row, acc, arg, degree, f_offs, f_offs < f_limit,
        nnz, stride_out, REDUCE,
    )


@triton.autotune(**_SPMM_AUTOTUNE)
@triton.jit
def _spmm_chunks_kernel(
    # pointers
    chunk_start_ptr,
    chunk_end_ptr,
    col_ptr,
    value_ptr,
    x_ptr,
    halo_ptr,
    part_ptr,
    part_arg_ptr,
    # sizes
    num_chunks,
    num_feats,
    num_owned,
    nnz,
    # strides
    stride_x,
    stride_halo,
    stride_part,
    # meta
    REDUCE: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    HAS_HALO: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    """Grid ``(num_chunks, cdiv(num_feats, BLOCK_F))``: the float32 partial of
    one chunk of a hub row (the sum for sum and mean, the maximum and its first
    position for max)."""
    chunk = tl.program_id(0).to(tl.int64)
    f_offs = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    f_mask = f_offs < num_feats
    in_grid = chunk < num_chunks
    start = tl.load(chunk_start_ptr + chunk, mask=in_grid, other=0)
    end = tl.load(chunk_end_ptr + chunk, mask=in_grid, other=0)
    acc, arg = _reduce_entries(
        col_ptr, value_ptr, x_ptr, halo_ptr, start, end, f_offs, f_mask,
        num_owned, nnz, stride_x, stride_halo,
        REDUCE, HAS_VALUE, HAS_HALO, BLOCK_E, BLOCK_F,
    )
    f_limit = tl.where(in_grid, num_feats, 0)
    mask = f_offs < f_limit
    tl.store(part_ptr + chunk * stride_part + f_offs, acc, mask=mask)
    if REDUCE == "max":
        tl.store(part_arg_ptr + chunk * stride_part + f_offs, arg, mask=mask)


@triton.autotune(**_SPMM_AUTOTUNE)
@triton.jit
def _spmm_combine_kernel(
    # pointers
    hub_rows_ptr,
    chunk_ptr_ptr,
    rowptr_ptr,
    part_ptr,
    part_arg_ptr,
    out_ptr,
    arg_ptr,
    # sizes
    num_hubs,
    num_feats,
    nnz,
    # strides
    stride_part,
    stride_out,
    # meta
    REDUCE: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    """Grid ``(num_hubs, cdiv(num_feats, BLOCK_F))``: folds the partials of one
    hub row, ``BLOCK_E`` chunks at a time and in chunk order, and stores the
    row."""
    hub = tl.program_id(0).to(tl.int64)
    f_offs = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    f_mask = f_offs < num_feats
    in_grid = hub < num_hubs
    row = tl.load(hub_rows_ptr + hub, mask=in_grid, other=0)
    first = tl.load(chunk_ptr_ptr + hub, mask=in_grid, other=0)
    last = tl.load(chunk_ptr_ptr + hub + 1, mask=in_grid, other=0)
    row_start = tl.load(rowptr_ptr + row, mask=in_grid, other=0).to(tl.int64)
    row_end = tl.load(rowptr_ptr + row + 1, mask=in_grid, other=0).to(tl.int64)
    if REDUCE == "max":
        acc = tl.full([BLOCK_F], float("-inf"), tl.float32)
    else:
        acc = tl.zeros([BLOCK_F], tl.float32)
    arg = tl.full([BLOCK_F], nnz, tl.int64)
    for c0 in range(first, last, BLOCK_E):
        c_offs = c0 + tl.arange(0, BLOCK_E)
        mask = (c_offs < last)[:, None] & f_mask[None, :]
        offs = c_offs[:, None] * stride_part + f_offs[None, :]
        part = tl.load(part_ptr + offs, mask=mask, other=0.0)
        if REDUCE == "max":
            part_arg = tl.load(part_arg_ptr + offs, mask=mask, other=nnz)
            acc, arg = merge_first_max(acc, arg, part, part_arg, mask & (part_arg < nnz), nnz)
        else:
            acc += tl.sum(part, axis=0)
    f_limit = tl.where(in_grid, num_feats, 0)
    _store_row(
        out_ptr, arg_ptr, row, acc, arg, row_end - row_start, f_offs, f_offs < f_limit,
        nnz, stride_out, REDUCE,
    )


def spmm_forward(
    rowptr: Tensor, col: Tensor, value: Tensor | None, x: Tensor, x_halo: Tensor | None,
    reduce: str,
    split_degree: int = SPLIT_DEGREE,
    chunk_nnz: int = CHUNK_NNZ,
) -> tuple[Tensor, Tensor | None]:
    r"""Launches the forward SpMM.

    Args:
        rowptr (torch.Tensor): Row pointers :obj:`[M + 1]`, int32 or int64.
        col (torch.Tensor): Column indices :obj:`[nnz]`, the dtype of ``rowptr``;
            a column below :obj:`x.size(0)` reads ``x``, any other ``x_halo``.
        value (torch.Tensor, optional): Entries :obj:`[nnz]`, float32, float16 or
            bfloat16; ones if :obj:`None`.
        x (torch.Tensor): Source rows :obj:`[N, F]`, float32, float16 or bfloat16.
        x_halo (torch.Tensor, optional): Further source rows :obj:`[H, F]`, the
            dtype of ``x``.
        reduce (str): :obj:`"sum"`, :obj:`"mean"` or :obj:`"max"`.
        split_degree (int, optional): Rows with more entries take the split
            path. (default: :data:`~.configs.SPLIT_DEGREE`)
        chunk_nnz (int, optional): Entries per chunk of a split row.
            (default: :data:`~.configs.CHUNK_NNZ`)

    Returns:
        ``out`` :obj:`[M, F]` in ``x``'s dtype and, for :obj:`"max"`, ``arg``
        :obj:`[M, F]` int64, the CSR position of each output's first maximal
        entry (``nnz`` for an empty row); :obj:`None` otherwise.
    """
    _check_args(rowptr, col, value, x, x_halo, reduce)
    x = row_major(x)
    num_rows, num_feats, nnz = rowptr.numel() - 1, x.size(1), col.numel()
    out = torch.empty(num_rows, num_feats, device=x.device, dtype=x.dtype)
    arg = (
        torch.empty(num_rows, num_feats, device=x.device, dtype=torch.long)
        if reduce == "max"
        else None
    )
    if num_rows == 0 or num_feats == 0:
        return out, arg
    rowptr, col = rowptr.contiguous(), col.contiguous()
    value = None if value is None else value.contiguous()
    has_halo = x_halo is not None and x_halo.size(0) > 0
    halo = row_major(x_halo) if has_halo else x  # type: ignore[arg-type]
    value_or_x = x if value is None else value
    arg_or_out = out if arg is None else arg

    def grid(num: int):
        return lambda meta: (num, triton.cdiv(num_feats, meta["BLOCK_F"]))

    _spmm_rows_kernel[grid(num_rows)](
        rowptr, col, value_or_x, x, halo, out, arg_or_out,
        num_rows, num_feats, x.size(0), nnz, split_degree,
        x.stride(0), halo.stride(0), out.stride(0),
        REDUCE=reduce, HAS_VALUE=value is not None, HAS_HALO=has_halo,
    )

    plan = hub_plan(rowptr, col, split_degree, chunk_nnz)
    if plan is None:
        return out, arg
    part = torch.empty(plan.num_chunks, num_feats, device=x.device, dtype=torch.float32)
    part_arg = (
        torch.empty(plan.num_chunks, num_feats, device=x.device, dtype=torch.long)
        if reduce == "max"
        else part
    )
    _spmm_chunks_kernel[grid(plan.num_chunks)](
        plan.chunk_start, plan.chunk_end, col, value_or_x, x, halo, part, part_arg,
        plan.num_chunks, num_feats, x.size(0), nnz,
        x.stride(0), halo.stride(0), part.stride(0),
        REDUCE=reduce, HAS_VALUE=value is not None, HAS_HALO=has_halo,
    )
    _spmm_combine_kernel[grid(plan.rows.numel())](
        plan.rows, plan.chunk_ptr, rowptr, part, part_arg, out, arg_or_out,
        plan.rows.numel(), num_feats, nnz,
        part.stride(0), out.stride(0),
        REDUCE=reduce,
    )
    return out, arg


def fold_chunk_sums(plan: HubPlan, rowptr: Tensor, part: Tensor, out: Tensor) -> None:
    """Writes the sum of the float32 partials ``part`` :obj:`[C, F]` of each hub
    row's chunks into that row of ``out`` :obj:`[M, F]` (row-major, any float
    dtype), in chunk order: the split path's combine, for kernels that reduce
    chunks of their own."""
    num_feats = out.size(1)
    _spmm_combine_kernel[lambda meta: (plan.rows.numel(), triton.cdiv(num_feats, meta["BLOCK_F"]))](
        plan.rows, plan.chunk_ptr, rowptr, part, part, out, out,
        plan.rows.numel(), num_feats, 0,
        part.stride(0), out.stride(0),
        REDUCE="sum",
    )


def _check_args(
    rowptr: Tensor,
    col: Tensor,
    value: Tensor | None,
    x: Tensor,
    x_halo: Tensor | None,
    reduce: str,
) -> None:
    if reduce not in REDUCTIONS:
        raise ValueError(
            f"'spmm_forward' got reduce='{reduce}'; use one of {', '.join(REDUCTIONS)}"
        )
    check_csr("spmm_forward", rowptr, col)
    check_dense("spmm_forward", "x", x)
    if x_halo is not None:
        check_dense("spmm_forward", "x_halo", x_halo, x.size(1))
        if x_halo.dtype != x.dtype:
            raise TypeError(
                f"'spmm_forward' got x of {x.dtype} but x_halo of {x_halo.dtype}; cast one"
            )
    if value is not None and (value.shape != col.shape or value.dtype not in FLOAT_DTYPES):
        raise ValueError(
            f"'spmm_forward' expects a float 'value' of shape [{col.numel()}] like 'col' (got "
            f"{tuple(value.shape)} of {value.dtype})"
        )
    check_same_device("spmm_forward", rowptr, col, value, x, x_halo)
