"""The one aggregation op of pyg_dist: CSR sparse times dense, with autograd,
dispatched to Triton (CUDA), the C++ extension (CPU) or plain PyTorch."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pyg_dist.ops import backends
from pyg_dist.ops.backends import Kernels
from pyg_dist.ops.csr import csr_transpose, csr_transpose_values
from pyg_dist.ops.spmm_ref import check_spmm_args

__all__ = ["spmm"]


def spmm(
    rowptr: Tensor,
    col: Tensor,
    x: Tensor,
    value: Tensor | None = None,
    reduce: str = "sum",
    x_halo: Tensor | None = None,
    backend: str | None = None,
) -> Tensor:
    r"""Sparse (CSR) times dense: :math:`\mathbf{Y} = \mathbf{A} \cdot
    [\mathbf{X} ; \mathbf{X}_{halo}]`, each row reduced by ``reduce``.

    The semantics are those of :func:`pyg_dist.ops.spmm_ref` (the oracle); this
    op adds fast kernels and a backward that reuses the transpose of
    :math:`\mathbf{A}`, computed once per graph and cached on ``col``.

    Args:
        rowptr (torch.Tensor): Row pointers :obj:`[M + 1]`, int32 or int64.
        col (torch.Tensor): Column indices :obj:`[nnz]`, same dtype as ``rowptr``.
            Columns below :obj:`x.size(0)` read ``x``, the others ``x_halo``.
        x (torch.Tensor): Source rows :obj:`[N, F]`, float32, float16 or bfloat16.
        value (torch.Tensor, optional): Matrix entries :obj:`[nnz]`; ones if
            :obj:`None`. (default: :obj:`None`)
        reduce (str, optional): :obj:`"sum"`, :obj:`"mean"` or :obj:`"max"`.
            (default: :obj:`"sum"`)
        x_halo (torch.Tensor, optional): Further source rows :obj:`[H, F]`, read
            without concatenating them to ``x``. (default: :obj:`None`)
        backend (str, optional): :obj:`"triton"`, :obj:`"cpu"` (the C++
            extension) or :obj:`"torch"`; :obj:`None` picks Triton for CUDA
            tensors, the C++ extension for CPU tensors when it is built, and
            PyTorch otherwise. (default: :obj:`None`)

    Shapes:
        - **output:** :obj:`[M, F]`, the dtype of ``x``.
    """
    reduce = check_spmm_args(rowptr, col, x, value, reduce, x_halo)
    kernels = backends.resolve(backend, x)
    return _SpMM.apply(rowptr, col, value, x, x_halo, reduce, kernels)


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, rowptr: Tensor, col: Tensor, value: Tensor | None,  # type: ignore[override]
                x: Tensor, x_halo: Tensor | None, reduce: str, kernels: Kernels) -> Tensor:
        out, arg = kernels.spmm_forward(rowptr, col, value, x, x_halo, reduce)
        ctx.reduce, ctx.kernels = reduce, kernels
        ctx.num_owned = x.size(0)
        ctx.save_for_backward(rowptr, col, value, x, x_halo, arg)
        if arg is not None:
            ctx.mark_non_differentiable(arg)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        rowptr, col, value, x, x_halo, arg = ctx.saved_tensors
        need_value, need_x, need_halo = (
            ctx.needs_input_grad[2],
            ctx.needs_input_grad[3],
            ctx.needs_input_grad[4],
        )
        grad_value = grad_src = None
        grad_out = grad_out.contiguous()
        if ctx.reduce == "max":
            grad_src, grad_value = _max_backward(
                grad_out, arg, col, value, x, x_halo, need_value, need_x or need_halo
            )
        else:
            if ctx.reduce == "mean":
                deg = (rowptr[1:] - rowptr[:-1]).clamp(min=1).to(torch.float32)
                grad_out = (grad_out.float() / deg.view(-1, 1)).to(grad_out.dtype)
            if need_x or need_halo:
                num_src = ctx.num_owned + (0 if x_halo is None else x_halo.size(0))
                colptr, row_t, perm = csr_transpose(rowptr, col, num_src)
                value_t = None if value is None else csr_transpose_values(value, perm)
                grad_src, _ = ctx.kernels.spmm_forward(
                    colptr, row_t, value_t, grad_out, None, "sum"
                )
            if need_value:
                grad_value = ctx.kernels.sddmm(rowptr, col, grad_out, x, x_halo).to(value.dtype)

        grad_x = grad_halo = None
        if grad_src is not None:
            grad_x = grad_src[: ctx.num_owned] if need_x else None
            grad_halo = grad_src[ctx.num_owned :] if need_halo else None
        return None, None, grad_value, grad_x, grad_halo, None, None


def _max_backward(
    grad_out: Tensor,
    arg: Tensor,
    col: Tensor,
    value: Tensor | None,
    x: Tensor,
    x_halo: Tensor | None,
    need_value: bool,
    need_src: bool,
) -> tuple[Tensor | None, Tensor | None]:
    """Routes each output element's gradient to the entry that won the maximum."""
    nnz = col.numel()
    found = arg < nnz
    edge = arg[found]
    feat = torch.nonzero(found, as_tuple=True)[1]
    grad = grad_out[found].float()
    grad_src = grad_value = None
    if need_src:
        num_src = x.size(0) + (0 if x_halo is None else x_halo.size(0))
        scale = grad if value is None else grad * value.float()[edge]
        flat = torch.zeros(num_src * x.size(1), device=x.device, dtype=torch.float32)
        flat.index_add_(0, col.long()[edge] * x.size(1) + feat, scale)
        grad_src = flat.view(num_src, x.size(1)).to(x.dtype)
    if need_value:
        assert value is not None, "value gradient requested without a value tensor"
        src_col = col.long()[edge]
        owned = src_col < x.size(0)
        src_val = torch.empty_like(grad)
        src_val[owned] = x[src_col[owned], feat[owned]].float()
        if x_halo is not None:
            src_val[~owned] = x_halo[src_col[~owned] - x.size(0), feat[~owned]].float()
        grad_value = torch.zeros(nnz, device=x.device, dtype=torch.float32)
        grad_value.index_add_(0, edge, grad * src_val)
        grad_value = grad_value.to(value.dtype)
    return grad_src, grad_value
