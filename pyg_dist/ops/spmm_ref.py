"""Pure-PyTorch sparse-dense matrix product: the fallback on every device and
the oracle every kernel is tested against."""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["spmm_ref", "REDUCTIONS"]

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
    Differentiable with respect to ``x``, ``x_halo`` and ``value``.

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
    src = x if x_halo is None else torch.cat([x, x_halo], dim=0)
    num_rows, num_feats = rowptr.numel() - 1, x.size(1)
    deg = rowptr[1:] - rowptr[:-1]
    row = torch.repeat_interleave(torch.arange(num_rows, device=x.device), deg.long())
    col = col.long()
    msg = src[col].float()
    if value is not None:
        msg = msg * value.float().view(-1, 1)

    if reduce == "max":
        out = _first_max(msg, row, num_rows)
    else:
        out = msg.new_zeros(num_rows, num_feats).index_add(0, row, msg)
        if reduce == "mean":
            out = out / deg.clamp(min=1).to(out.dtype).view(-1, 1)
    return out.to(x.dtype)


def _first_max(msg: Tensor, row: Tensor, num_rows: int) -> Tensor:
    """Row-wise maximum of ``msg`` whose gradient goes to the first maximal entry."""
    num_edges, num_feats = msg.shape
    with torch.no_grad():
        best = msg.new_zeros(num_rows, num_feats).scatter_reduce(
            0, row.view(-1, 1).expand_as(msg), msg, reduce="amax", include_self=False
        )
        position = torch.arange(num_edges, device=msg.device).view(-1, 1).expand_as(msg)
        position = torch.where(msg == best[row], position, num_edges)
        arg = torch.full((num_rows, num_feats), num_edges, device=msg.device, dtype=torch.long)
        arg = arg.scatter_reduce(0, row.view(-1, 1).expand_as(msg), position, reduce="amin")
    found = arg < num_edges
    padded = torch.cat([msg, msg.new_zeros(1, num_feats)], dim=0)
    out = padded.gather(0, arg)
    return torch.where(found, out, torch.zeros_like(out))


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
