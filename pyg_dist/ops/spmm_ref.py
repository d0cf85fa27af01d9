"""Pure-PyTorch sparse-dense matrix product: the oracle every kernel is tested
against, and the helpers the PyTorch backend (:mod:`.torch_kernels`) shares
with it."""
from __future__ import annotations

import torch
from torch import Tensor

from pyg_dist.ops.csr import csr_row

__all__ = ["spmm_ref", "REDUCTIONS", "check_spmm_args", "messages", "sum_rows", "gather_sources",
           "first_max"]

REDUCTIONS = ("sum", "mean", "max")


def spmm_ref(
    rowptr: Tensor,
    col: Tensor,
    x: Tensor,
    value: Tensor | None = None,
    reduce: str = "sum",
    x_halo: Tensor | None = None,
) -> Tensor:
    r"""Computes :math:`\mathbf{Y} = \mathbf{A} \cdot [\mathbf{X} ; \mathbf{X}_{halo}]`
    for a CSR matrix :math:`\mathbf{A}`, reducing each row by ``reduce``.

    .. math::
        \mathbf{y}_i = \bigoplus_{e = \mathrm{rowptr}_i}^{\mathrm{rowptr}_{i+1} - 1}
        a_e \cdot \mathbf{s}_{\mathrm{col}_e}

    where :math:`\mathbf{s}` are the rows of ``x`` followed by the rows of ``x_halo``
    and :math:`\bigoplus` is a sum, a mean (the sum divided by the number of
    entries of the row) or an element-wise maximum. Empty rows give zeros. For
    ``"max"`` the gradient of each output element flows to the first entry of its
    row (in CSR order) that attains the maximum. Accumulation is in float32.
    Differentiable with respect to ``x``, ``x_halo`` and ``value`` (through
    PyTorch's own autograd).

    Args:
        rowptr (torch.Tensor): Row pointers, shape :obj:`[M + 1]`, int32 or int64.
        col (torch.Tensor): Column indices, shape :obj:`[nnz]`; a column below
            :obj:`x.size(0)` reads ``x``, any other reads ``x_halo``.
        x (torch.Tensor): Dense source rows, shape :obj:`[N, F]`.
        value (torch.Tensor, optional): Entries of :math:`\mathbf{A}`, shape
            :obj:`[nnz]`; all ones if :obj:`None`. (default: :obj:`None`)
        reduce (str, optional): :obj:`"sum"`, :obj:`"mean"` or :obj:`"max"`.
            (default: :obj:`"sum"`)
        x_halo (torch.Tensor, optional): More source rows, shape :obj:`[H, F]`.
            (default: :obj:`None`)

    Shapes:
        - **output:** :obj:`[M, F]`, the dtype of ``x``.
    """
    reduce = check_spmm_args(rowptr, col, x, value, reduce, x_halo)
    row = csr_row(rowptr, col).long()
    msg = messages(col, x, x_halo, value)
    if reduce == "max":
        _, arg = first_max(msg.detach(), row, rowptr.numel() - 1)
        padded = torch.cat([msg, msg.new_zeros(1, msg.size(1))], dim=0)
        return padded.gather(0, arg).to(x.dtype)  # empty rows read the zero row
    return sum_rows(msg, row, rowptr, reduce).to(x.dtype)


def messages(col: Tensor, x: Tensor, x_halo: Tensor | None, value: Tensor | None) -> Tensor:
    """``[nnz, F]`` float32: the source row of every entry, times its value."""
    msg = gather_sources(col.long(), x, x_halo).float()
    return msg if value is None else msg * value.float().view(-1, 1)


def sum_rows(msg: Tensor, row: Tensor, rowptr: Tensor, reduce: str) -> Tensor:
    """``[M, F]``: the entries ``msg`` summed per row (``"mean"``: divided by
    the row's entry count, empty rows staying zero)."""
    out = msg.new_zeros(rowptr.numel() - 1, msg.size(1)).index_add(0, row, msg)
    if reduce == "mean":
        out = out / (rowptr[1:] - rowptr[:-1]).clamp(min=1).to(out.dtype).view(-1, 1)
    return out


def gather_sources(col: Tensor, x: Tensor, x_halo: Tensor | None) -> Tensor:
    """Rows ``col`` of ``[x ; x_halo]`` (``[nnz, *]``, any trailing shape shared
    by both), without concatenating the two; differentiable in both."""
    if x_halo is None or x_halo.size(0) == 0:
        return x[col]
    owned = col < x.size(0)
    out = x.new_empty(col.numel(), *x.shape[1:])
    out[owned] = x[col[owned]]
    out[~owned] = x_halo[col[~owned] - x.size(0)]
    return out


def first_max(msg: Tensor, row: Tensor, num_rows: int) -> tuple[Tensor, Tensor]:
    """Row-wise maximum of the entries ``msg`` (``[nnz, F]``, entry ``e`` in row
    ``row[e]``) and, per output element, the position of the first entry (in
    CSR order) attaining it: ``(best, arg)``, both ``[num_rows, F]``; ``arg``
    is ``nnz`` and ``best`` zero for empty rows."""
    nnz, num_feats = msg.shape
    index = row.view(-1, 1).expand_as(msg)
    best = msg.new_zeros(num_rows, num_feats).scatter_reduce_(
        0, index, msg, reduce="amax", include_self=False
    )
    position = torch.arange(nnz, device=msg.device).view(-1, 1).expand_as(msg)
    position = torch.where(msg == best[row], position, nnz)
    arg = torch.full((num_rows, num_feats), nnz, device=msg.device, dtype=torch.long)
    return best, arg.scatter_reduce_(0, index, position, reduce="amin")


def check_spmm_args(
    rowptr: Tensor,
    col: Tensor,
    x: Tensor,
    value: Tensor | None,
    reduce: str,
    x_halo: Tensor | None,
) -> str:
    """Validates the arguments of :func:`spmm` and returns the canonical reduce name."""
    reduce = "sum" if reduce == "add" else reduce
    if reduce not in REDUCTIONS:
        raise ValueError(f"'spmm' got reduce='{reduce}'; use one of {', '.join(REDUCTIONS)}")
    if rowptr.dim() != 1 or col.dim() != 1:
        raise ValueError(
            f"'spmm' expects 1-D 'rowptr' and 'col' (got shapes {tuple(rowptr.shape)} "
            f"and {tuple(col.shape)}); build them with pyg_dist.ops.to_csr"
        )
    if rowptr.dtype not in (torch.int32, torch.int64) or col.dtype not in (
        torch.int32,
        torch.int64,
    ):
        raise TypeError(
            f"'spmm' expects int32 or int64 indices (got {rowptr.dtype} and {col.dtype})"
        )
    if x.dim() != 2:
        raise ValueError(f"'spmm' expects a 2-D 'x' of shape [N, F] (got {tuple(x.shape)})")
    if x_halo is not None and (x_halo.dim() != 2 or x_halo.size(1) != x.size(1)):
        raise ValueError(
            f"'spmm' expects 'x_halo' of shape [H, {x.size(1)}] (got {tuple(x_halo.shape)})"
        )
    if x_halo is not None and x_halo.dtype != x.dtype:
        raise TypeError(f"'spmm' got x of {x.dtype} but x_halo of {x_halo.dtype}; cast one")
    if value is not None and value.shape != col.shape:
        raise ValueError(
            f"'spmm' expects 'value' of shape [{col.numel()}] like 'col' "
            f"(got {tuple(value.shape)})"
        )
    return reduce
