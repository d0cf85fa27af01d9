"""Per-graph metadata of the split path: which rows are hubs and how their
entries are cut into chunks. Built once per graph (one device sync) and cached
on ``col`` with :func:`pyg_dist.ops.csr.cached`."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pyg_dist.ops.csr import cached

__all__ = ["HubPlan", "hub_plan"]


@dataclass(frozen=True)
class HubPlan:
    """The rows with more than ``split_degree`` entries, cut into chunks of at
    most ``chunk_nnz`` consecutive entries; chunks of one row are contiguous and
    in CSR order. All tensors are int64 on the graph's device.

    Shapes:
        - ``rows`` :obj:`[H]`: the hub rows, increasing.
        - ``chunk_ptr`` :obj:`[H + 1]`: chunks of ``rows[h]`` are
          ``chunk_ptr[h]`` to ``chunk_ptr[h + 1] - 1``.
        - ``chunk_start``, ``chunk_end`` :obj:`[C]`: the CSR entries
          ``[start, end)`` of each chunk.
    """

    rows: Tensor
    chunk_ptr: Tensor
    chunk_start: Tensor
    chunk_end: Tensor

    @property
    def num_chunks(self) -> int:
        return self.chunk_start.numel()


def hub_plan(rowptr: Tensor, col: Tensor, split_degree: int, chunk_nnz: int) -> HubPlan | None:
    """The :class:`HubPlan` of the CSR graph ``(rowptr, col)``, or :obj:`None`
    when no row has more than ``split_degree`` entries; cached per graph."""
    if split_degree < 1 or chunk_nnz < 1:
        raise ValueError(
            f"'hub_plan' got split_degree={split_degree} and chunk_nnz={chunk_nnz}; "
            f"both must be at least 1"
        )
    key = ("triton_hub_plan", rowptr.numel(), split_degree, chunk_nnz)
    return cached(col, key, lambda: _build(rowptr, split_degree, chunk_nnz))


def _build(rowptr: Tensor, split_degree: int, chunk_nnz: int) -> HubPlan | None:
    rowptr = rowptr.long()
    degree = rowptr[1:] - rowptr[:-1]
    rows = torch.nonzero(degree > split_degree).view(-1)
    if rows.numel() == 0:
        return None
    hub_degree = degree[rows]
    num_chunks = (hub_degree + chunk_nnz - 1) // chunk_nnz
    chunk_ptr = rowptr.new_zeros(rows.numel() + 1)
    torch.cumsum(num_chunks, dim=0, out=chunk_ptr[1:])
    owner = torch.repeat_interleave(torch.arange(rows.numel(), device=rowptr.device), num_chunks)
    local = torch.arange(owner.numel(), device=rowptr.device) - chunk_ptr[owner]
    chunk_start = rowptr[rows][owner] + local * chunk_nnz
    chunk_end = torch.minimum(chunk_start + chunk_nnz, rowptr[rows + 1][owner])
    return HubPlan(rows, chunk_ptr, chunk_start, chunk_end)
