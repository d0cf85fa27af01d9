"""Argument checks and layout fixes shared by the Triton launchers."""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "FLOAT_DTYPES",
    "INDEX_DTYPES",
    "check_csr",
    "check_dense",
    "check_same_device",
    "row_major",
]

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)


def check_csr(op: str, rowptr: Tensor, col: Tensor) -> None:
    """Raises unless ``rowptr`` :obj:`[M + 1]` and ``col`` :obj:`[nnz]` are 1-D
    int32 or int64 tensors of one dtype."""
    if rowptr.dim() != 1 or col.dim() != 1 or rowptr.numel() < 1:
        raise ValueError(
            f"'{op}' expects 1-D 'rowptr' [M + 1] and 'col' [nnz] (got shapes "
            f"{tuple(rowptr.shape)} and {tuple(col.shape)}); build them with "
            f"pyg_dist.ops.to_csr"
        )
    if rowptr.dtype not in INDEX_DTYPES or col.dtype != rowptr.dtype:
        raise TypeError(
            f"'{op}' expects int32 or int64 'rowptr' and 'col' of one dtype (got "
            f"{rowptr.dtype} and {col.dtype}); cast both with .to(torch.int64)"
        )


def check_dense(op: str, name: str, t: Tensor, num_feats: int | None = None) -> None:
    """Raises unless ``t`` is a 2-D float32, float16 or bfloat16 tensor (of
    ``num_feats`` columns when given)."""
    if t.dim() != 2 or t.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"'{op}' expects a 2-D float32, float16 or bfloat16 '{name}' (got shape "
            f"{tuple(t.shape)} of {t.dtype})"
        )
    if num_feats is not None and t.size(1) != num_feats:
        raise ValueError(
            f"'{op}' expects '{name}' of shape [*, {num_feats}] like 'x' (got {tuple(t.shape)})"
        )


def check_same_device(op: str, *tensors: Tensor | None) -> None:
    """Raises unless all given tensors live on one device."""
    devices = {t.device for t in tensors if t is not None}
    if len(devices) > 1:
        raise ValueError(
            f"'{op}' expects all tensors on one device (got {sorted(map(str, devices))}); "
            f"move them with .to(device)"
        )


def row_major(t: Tensor) -> Tensor:
    """``t`` with unit feature stride: the kernels take row strides only."""
    return t if t.stride(-1) == 1 else t.contiguous()
