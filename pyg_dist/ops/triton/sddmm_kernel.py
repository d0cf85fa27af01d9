r"""Sampled dense-dense product in Triton: for every entry :math:`e` of a CSR
matrix, :math:`o_e = \langle \mathbf{a}_{\mathrm{row}(e)},
\mathbf{s}_{\mathrm{col}(e)} \rangle` with :math:`\mathbf{s}` the rows of ``x``
followed by those of ``x_halo``. It is the gradient of SpMM with respect to the
matrix entries.

Work is blocked over entries, ``BLOCK_E`` per program whatever their rows, so a
hub row spreads over many programs; each program walks the features
``BLOCK_F`` at a time and accumulates in float32.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from pyg_dist.ops.csr import csr_row
from pyg_dist.ops.triton.checks import check_csr, check_dense, check_same_device, row_major
from pyg_dist.ops.triton.configs import autotune_args
from pyg_dist.ops.triton.tiles import gather_tile

__all__ = ["sddmm"]


@triton.autotune(**autotune_args("num_feats"))
@triton.jit
def _sddmm_kernel(
    # pointers
    row_ptr,
    col_ptr,
    a_ptr,
    x_ptr,
    halo_ptr,
    out_ptr,
    # sizes
    nnz,
    num_feats,
    num_owned,
    # strides
    stride_a,
    stride_x,
    stride_halo,
    # meta
    HAS_HALO: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    """Grid ``(cdiv(nnz, BLOCK_E),)``: the products of ``BLOCK_E`` entries."""
    e_offs = tl.program_id(0).to(tl.int64) * BLOCK_E + tl.arange(0, BLOCK_E)
    e_mask = e_offs < nnz
    row = tl.load(row_ptr + e_offs, mask=e_mask, other=0).to(tl.int64)
    acc = tl.zeros([BLOCK_E], tl.float32)
    for f0 in range(0, num_feats, BLOCK_F):
        f_offs = f0 + tl.arange(0, BLOCK_F)
        f_mask = f_offs < num_feats
        a = tl.load(
            a_ptr + row[:, None] * stride_a + f_offs[None, :],
            mask=e_mask[:, None] & f_mask[None, :],
            other=0.0,
        ).to(tl.float32)
        src = gather_tile(
            col_ptr, col_ptr, x_ptr, halo_ptr, e_offs, e_mask, f_offs, f_mask,
            num_owned, stride_x, stride_halo, False, HAS_HALO,
        )
        acc += tl.sum(a * src, axis=1)
    tl.store(out_ptr + e_offs, acc, mask=e_mask)


def sddmm(rowptr: Tensor, col: Tensor, a: Tensor, x: Tensor, x_halo: Tensor | None) -> Tensor:
    r"""Launches the SDDMM.

    Args:
        rowptr (torch.Tensor): Row pointers :obj:`[M + 1]`, int32 or int64.
        col (torch.Tensor): Column indices :obj:`[nnz]`, the dtype of ``rowptr``.
        a (torch.Tensor): Row-side operand :obj:`[M, F]`, float32, float16 or
            bfloat16.
        x (torch.Tensor): Column-side rows :obj:`[N, F]`, float32, float16 or
            bfloat16.
        x_halo (torch.Tensor, optional): Further column-side rows :obj:`[H, F]`,
            the dtype of ``x``; columns from :obj:`N` on read them.

    Returns:
        ``out`` :obj:`[nnz]` float32.
    """
    _check_args(rowptr, col, a, x, x_halo)
    nnz, num_feats = col.numel(), x.size(1)
    out = torch.empty(nnz, device=x.device, dtype=torch.float32)
    if nnz == 0:
        return out
    if num_feats == 0:
        return out.zero_()
    row = csr_row(rowptr, col)
    a, x = row_major(a), row_major(x)
    has_halo = x_halo is not None and x_halo.size(0) > 0
    halo = row_major(x_halo) if has_halo else x  # type: ignore[arg-type]
    _sddmm_kernel[lambda meta: (triton.cdiv(nnz, meta["BLOCK_E"]),)](
        row, col.contiguous(), a, x, halo, out,
        nnz, num_feats, x.size(0),
        a.stride(0), x.stride(0), halo.stride(0),
        HAS_HALO=has_halo,
    )
    return out


def _check_args(rowptr: Tensor, col: Tensor, a: Tensor, x: Tensor, x_halo: Tensor | None) -> None:
    check_csr("sddmm", rowptr, col)
    check_dense("sddmm", "x", x)
    check_dense("sddmm", "a", a, x.size(1))
    if a.size(0) != rowptr.numel() - 1:
        raise ValueError(
            f"'sddmm' expects 'a' of shape [{rowptr.numel() - 1}, {x.size(1)}], one row per "
            f"CSR row (got {tuple(a.shape)})"
        )
    if x_halo is not None:
        check_dense("sddmm", "x_halo", x_halo, x.size(1))
        if x_halo.dtype != x.dtype:
            raise TypeError(f"'sddmm' got x of {x.dtype} but x_halo of {x_halo.dtype}; cast one")
    check_same_device("sddmm", rowptr, col, a, x, x_halo)
