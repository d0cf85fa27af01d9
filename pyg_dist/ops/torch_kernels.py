"""The kernels of :func:`pyg_dist.ops.spmm` in plain PyTorch: the backend on any
device where no faster one runs. Built from the helpers of the oracle
:func:`~pyg_dist.ops.spmm_ref`, so the two cannot disagree on semantics."""
from __future__ import annotations

from torch import Tensor

from pyg_dist.ops.csr import csr_row
from pyg_dist.ops.gat_ref import GatArgs, GatGrads, attend, gat_backward_ref
from pyg_dist.ops.spmm_ref import first_max, gather_sources, messages, sum_rows

__all__ = ["TorchKernels"]


class TorchKernels:
    """``spmm_forward``, ``sddmm``, ``gat_forward`` and ``gat_backward`` (see
    :class:`pyg_dist.ops.backends.Kernels`)."""

    name = "torch"

    def spmm_forward(self, rowptr: Tensor, col: Tensor, value: Tensor | None, x: Tensor,
                     x_halo: Tensor | None, reduce: str) -> tuple[Tensor, Tensor | None]:
        row = csr_row(rowptr, col).long()
        msg = messages(col, x, x_halo, value)
        if reduce == "max":
            best, arg = first_max(msg, row, rowptr.numel() - 1)
            return best.to(x.dtype), arg
        return sum_rows(msg, row, rowptr, reduce).to(x.dtype), None

    def sddmm(
        self, rowptr: Tensor, col: Tensor, a: Tensor, x: Tensor, x_halo: Tensor | None
    ) -> Tensor:
        row = csr_row(rowptr, col).long()
        src = gather_sources(col.long(), x, x_halo).float()
        return (a.float()[row] * src).sum(dim=-1)

    def gat_forward(self, args: GatArgs) -> tuple[Tensor, Tensor]:
        out, lse = attend(args)
        return out.to(args.x.dtype), lse

    def gat_backward(self, args: GatArgs, lse: Tensor, grad_out: Tensor,
                     transpose: tuple[Tensor, Tensor, Tensor] | None, need_src: bool,
                     need_score: bool, need_alpha_src: bool) -> GatGrads:
        return gat_backward_ref(args, lse, grad_out, need_src, need_score, need_alpha_src)
