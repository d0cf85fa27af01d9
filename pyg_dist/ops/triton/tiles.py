"""Device helpers shared by the kernels: the fused two-source gather, the
first-maximum merge, and the span of entries a row or chunk program walks.
Called from ``@triton.jit`` kernels only."""
from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["gather_tile", "merge_first_max", "short_row_span", "chunk_span"]


@triton.jit
def gather_tile(
    # pointers
    col_ptr,
    value_ptr,
    x_ptr,
    halo_ptr,
    # offsets and masks
    e_offs,
    e_mask,
    f_offs,
    f_mask,
    # sizes
    num_owned,
    # strides
    stride_x,
    stride_halo,
    # meta
    HAS_VALUE: tl.constexpr,
    HAS_HALO: tl.constexpr,
):
    """Float32 tile ``[BLOCK_E, BLOCK_F]``: ``value[e] * s[col[e], f]`` for the
    entries ``e_offs`` and features ``f_offs``, ``s`` being ``x`` followed by
    ``x_halo``; zero on masked lanes. A column below ``num_owned`` reads ``x``,
    any other reads ``x_halo`` at ``col - num_owned``: two masked loads, one
    select, no concatenated copy."""
    src = tl.load(col_ptr + e_offs, mask=e_mask, other=0).to(tl.int64)
    mask = e_mask[:, None] & f_mask[None, :]
    if HAS_HALO:
        owned = src < num_owned
        own = tl.load(
            x_ptr + src[:, None] * stride_x + f_offs[None, :],
            mask=mask & owned[:, None],
            other=0.0,
        )
        halo = tl.load(
            halo_ptr + (src - num_owned)[:, None] * stride_halo + f_offs[None, :],
            mask=mask & ~owned[:, None],
            other=0.0,
        )
        msg = tl.where(owned[:, None], own, halo).to(tl.float32)
    else:
        msg = tl.load(
            x_ptr + src[:, None] * stride_x + f_offs[None, :], mask=mask, other=0.0
        ).to(tl.float32)
    if HAS_VALUE:
        value = tl.load(value_ptr + e_offs, mask=e_mask, other=0.0).to(tl.float32)
        msg = msg * value[:, None]
    return msg


@triton.jit
def merge_first_max(best, arg, vals, pos, valid, nnz):
    """Merges a tile of candidates into a running first-maximum.

    ``best`` (float32) and ``arg`` (int64) are ``[BLOCK_F]``: the maximum so far
    and the CSR position of its first occurrence (``nnz`` while none was seen).
    ``vals`` ``[BLOCK, BLOCK_F]`` float32 are candidates at CSR positions
    ``pos`` (int64, broadcastable to ``vals``), where ``valid``. Tiles must
    arrive in increasing position order: a tie keeps the earlier position, and
    within a tile the smallest position among the maximal values wins.
    """
    vals = tl.where(valid, vals, float("-inf"))
    tile_best = tl.max(vals, axis=0)
    hit = valid & (vals == tile_best[None, :])
    tile_arg = tl.min(tl.where(hit, pos, nnz), axis=0)
    take = (tile_arg < nnz) & ((tile_best > best) | (arg >= nnz))
    return tl.where(take, tile_best, best), tl.where(take, tile_arg, arg)


@triton.jit
def short_row_span(rowptr_ptr, row, num_rows, split_degree):
    """The entries ``[start, end)`` of CSR row ``row`` (int64) for the program
    of a rows kernel, and ``short``: whether the row is in the grid and has at
    most ``split_degree`` entries. Other rows get an empty span (the split
    path computes them), so ``short`` is the condition of every store."""
    in_grid = row < num_rows
    start = tl.load(rowptr_ptr + row, mask=in_grid, other=0).to(tl.int64)
    end = tl.load(rowptr_ptr + row + 1, mask=in_grid, other=0).to(tl.int64)
    short = in_grid & ((end - start) <= split_degree)
    return start, tl.where(short, end, start), short


@triton.jit
def chunk_span(chunk_start_ptr, chunk_end_ptr, chunk_row_ptr, chunk, num_chunks):
    """The entries ``[start, end)`` of chunk ``chunk`` of a hub plan, the row
    it belongs to, and whether the chunk is in the grid (else all zero)."""
    in_grid = chunk < num_chunks
    start = tl.load(chunk_start_ptr + chunk, mask=in_grid, other=0)
    end = tl.load(chunk_end_ptr + chunk, mask=in_grid, other=0)
    row = tl.load(chunk_row_ptr + chunk, mask=in_grid, other=0)
    return start, end, row, in_grid
