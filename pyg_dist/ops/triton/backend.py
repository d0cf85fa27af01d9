"""The Triton backend of :func:`pyg_dist.ops.spmm` and :func:`pyg_dist.ops.gat`:
the kernels of the ``Kernels`` protocol in :mod:`pyg_dist.ops.backends`."""
from __future__ import annotations

from torch import Tensor

from pyg_dist.ops.gat_ref import GatArgs, GatGrads
from pyg_dist.ops.triton import gat_grad_kernel, gat_kernel
from pyg_dist.ops.triton.configs import CHUNK_NNZ, SPLIT_DEGREE
from pyg_dist.ops.triton.sddmm_kernel import sddmm
from pyg_dist.ops.triton.spmm_kernel import spmm_forward

__all__ = ["TritonKernels"]


class TritonKernels:
    """Forward SpMM, SDDMM and GAT attention (forward and backward) in Triton,
    on CUDA tensors (or on CPU tensors under ``TRITON_INTERPRET=1``).

    Args:
        split_degree (int, optional): Rows (and, in GAT's backward, sources)
            with more entries than this are split into chunks reduced by
            several programs.
            (default: :data:`~.configs.SPLIT_DEGREE`)
        chunk_nnz (int, optional): Entries per chunk of a split row.
            (default: :data:`~.configs.CHUNK_NNZ`)
    """

    name = "triton"

    def __init__(self, split_degree: int = SPLIT_DEGREE, chunk_nnz: int = CHUNK_NNZ) -> None:
        self.split_degree = split_degree
        self.chunk_nnz = chunk_nnz

    def spmm_forward(self, rowptr: Tensor, col: Tensor, value: Tensor | None, x: Tensor,
                     x_halo: Tensor | None, reduce: str) -> tuple[Tensor, Tensor | None]:
        return spmm_forward(
            rowptr, col, value, x, x_halo, reduce, self.split_degree, self.chunk_nnz
        )

    def sddmm(
        self, rowptr: Tensor, col: Tensor, a: Tensor, x: Tensor, x_halo: Tensor | None
    ) -> Tensor:
        return sddmm(rowptr, col, a, x, x_halo)

    def gat_forward(self, args: GatArgs) -> tuple[Tensor, Tensor]:
        return gat_kernel.gat_forward(args, self.split_degree, self.chunk_nnz)

    def gat_backward(self, args: GatArgs, lse: Tensor, grad_out: Tensor,
                     transpose: tuple[Tensor, Tensor, Tensor] | None, need_src: bool,
                     need_score: bool, need_alpha_src: bool) -> GatGrads:
        return gat_grad_kernel.gat_backward(args, lse, grad_out, transpose, need_src, need_score,
                                            need_alpha_src, self.split_degree, self.chunk_nnz)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(split_degree={self.split_degree}, "
            f"chunk_nnz={self.chunk_nnz})"
        )
