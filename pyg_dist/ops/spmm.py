"""The one aggregation op of pyg_dist: CSR sparse times dense, with autograd,
dispatched to Triton (CUDA), the C++ extension (CPU) or plain PyTorch.

The op is registered with :mod:`torch.library` as ``pyg_dist::spmm`` (forward)
and ``pyg_dist::spmm_backward`` (both gradients, composed from the backend's
two kernels), each with a fake kernel that gives shapes and dtypes only, so
:func:`torch.compile` keeps it as one opaque node of its graphs whatever the
backend."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pyg_dist.ops import backends
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
            PyTorch otherwise; under :func:`torch.compile` the choice is made
            when the graph is traced. (default: :obj:`None`)

    Shapes:
        - **output:** :obj:`[M, F]`, the dtype of ``x``.
    """
    reduce = check_spmm_args(rowptr, col, x, value, reduce, x_halo)
    name = backends.resolve_name(backend, x.device.type)
    return _spmm(rowptr, col, value, x, x_halo, reduce, name)[0]


@torch.library.custom_op("pyg_dist::spmm", mutates_args=())
def _spmm(rowptr: Tensor, col: Tensor, value: Tensor | None, x: Tensor, x_halo: Tensor | None,
          reduce: str, backend: str) -> tuple[Tensor, Tensor]:
    """``(out [M, F], arg)`` with backend ``backend`` (a name); ``arg`` is the
    ``[M, F]`` int64 argmax of ``"max"``, an empty int64 tensor otherwise."""
    out, arg = backends.kernels(backend).spmm_forward(rowptr, col, value, x, x_halo, reduce)
    return out, (_no_arg(x) if arg is None else arg)


@_spmm.register_fake
def _(rowptr: Tensor, col: Tensor, value: Tensor | None, x: Tensor, x_halo: Tensor | None,
      reduce: str, backend: str) -> tuple[Tensor, Tensor]:
    out = x.new_empty(rowptr.size(0) - 1, x.size(1))
    if reduce == "max":
        return out, x.new_empty(out.shape, dtype=torch.long)
    return out, _no_arg(x)


@torch.library.custom_op("pyg_dist::spmm_backward", mutates_args=())
def _spmm_backward(grad_out: Tensor, rowptr: Tensor, col: Tensor, value: Tensor | None,
                   x: Tensor, x_halo: Tensor | None, arg: Tensor, reduce: str, backend: str,
                   need_src: bool, need_value: bool) -> tuple[Tensor, Tensor]:
    """``(grad_src, grad_value)``: the gradient of ``[x ; x_halo]`` (``[N + H, F]``,
    empty unless ``need_src``) and of ``value`` (``[nnz]``, empty unless
    ``need_value``), from the gradient of the output ``grad_out`` (``[M, F]``)."""
    kernels = backends.kernels(backend)
    grad_value = grad_src = None
    grad_out = grad_out.contiguous()
    if reduce == "max":
        grad_src, grad_value = _max_backward(grad_out, arg, col, value, x, x_halo, need_value,
                                             need_src)
    else:
        if reduce == "mean":
            deg = (rowptr[1:] - rowptr[:-1]).clamp(min=1).to(torch.float32)
            grad_out = (grad_out.float() / deg.view(-1, 1)).to(grad_out.dtype)
        if need_src:
            colptr, row_t, perm = csr_transpose(rowptr, col, _num_sources(x, x_halo))
            value_t = None if value is None else csr_transpose_values(value, perm)
            grad_src, _ = kernels.spmm_forward(colptr, row_t, value_t, grad_out, None, "sum")
        if need_value:
            assert value is not None, "value gradient requested without a value tensor"
            grad_value = kernels.sddmm(rowptr, col, grad_out, x, x_halo).to(value.dtype)
    return (x.new_empty(0) if grad_src is None else grad_src,
            _value_like(value, x).new_empty(0) if grad_value is None else grad_value)


@_spmm_backward.register_fake
def _(grad_out: Tensor, rowptr: Tensor, col: Tensor, value: Tensor | None, x: Tensor,
      x_halo: Tensor | None, arg: Tensor, reduce: str, backend: str, need_src: bool,
      need_value: bool) -> tuple[Tensor, Tensor]:
    grad_src = x.new_empty((_num_sources(x, x_halo), x.size(1)) if need_src else (0,))
    grad_value = _value_like(value, x).new_empty(col.shape if need_value else (0,))
    return grad_src, grad_value


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    rowptr, col, value, x, x_halo, reduce, backend = inputs
    ctx.reduce, ctx.backend = reduce, backend
    if not ctx.needs_input_grad[2] and reduce != "max":
        # the sources' gradient reads their shapes only: their rows are not kept alive
        x, x_halo = _shape_of(x), None if x_halo is None else _shape_of(x_halo)
    ctx.save_for_backward(rowptr, col, value, x, x_halo, output[1])


def _shape_of(x: Tensor) -> Tensor:
    """A tensor of ``x``'s shape, dtype and device holding one element."""
    return x.new_zeros(()).expand(x.shape)


def _backward(ctx: Any, grad_out: Tensor, _grad_arg: Tensor | None) -> tuple[Tensor | None, ...]:
    rowptr, col, value, x, x_halo, arg = ctx.saved_tensors
    need_value, need_x, need_halo = ctx.needs_input_grad[2:5]
    grad_src, grad_value = _spmm_backward(grad_out, rowptr, col, value, x, x_halo, arg,
                                          ctx.reduce, ctx.backend, need_x or need_halo,
                                          need_value)
    num_owned = x.size(0)
    return (None, None, grad_value if need_value else None,
            grad_src[:num_owned] if need_x else None,
            grad_src[num_owned:] if need_halo else None, None, None)


_spmm.register_autograd(_backward, setup_context=_setup_context)


def _no_arg(x: Tensor) -> Tensor:
    """The ``arg`` output of the reductions other than ``"max"``."""
    return x.new_empty(0, dtype=torch.long)


def _num_sources(x: Tensor, x_halo: Tensor | None) -> int:
    return x.size(0) + (0 if x_halo is None else x_halo.size(0))


def _value_like(value: Tensor | None, x: Tensor) -> Tensor:
    """A tensor with the dtype of the value gradient."""
    return x if value is None else value


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
