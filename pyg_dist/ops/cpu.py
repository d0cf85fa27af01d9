"""pyg_dist's C++ CPU kernels as a backend of :func:`pyg_dist.ops.spmm` and
:func:`pyg_dist.ops.gat`. Loading them is :mod:`pyg_dist.runtime.cpu_ext`'s
(re-exported here): the binary wheel's prebuilt library, else a compile on
first use (cached); without either (no prebuilt library and no compiler or
``ninja``, a failed build, or ``PYG_DIST_DISABLE_CPU_EXT=1``),
:func:`is_available` is :obj:`False`, one warning says why, and the ops run
their PyTorch kernels.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pyg_dist.ops.gat_ref import GatArgs, GatGrads
from pyg_dist.runtime.cpu_ext import (
    DISABLE_ENV,
    is_available,
    kernels_origin,
    source_dir,
    unavailable_reason,
)

__all__ = ["is_available", "unavailable_reason", "kernels_origin", "kernels", "source_dir",
           "CppKernels", "DISABLE_ENV"]


def kernels() -> CppKernels:
    """The C++ kernels as a :class:`pyg_dist.ops.spmm.Kernels` backend."""
    if not is_available():
        raise RuntimeError(
            f"pyg_dist's C++ CPU kernels are not available ({unavailable_reason()}); "
            f"use backend='torch', install the binary wheel built for your torch, or install a "
            f"C++ compiler and ninja (pip install ninja)"
        )
    return CppKernels()


class CppKernels:
    """The kernels of the :class:`~pyg_dist.ops.backends.Kernels` protocol,
    calling ``torch.ops.pyg_dist.spmm_forward``, ``sddmm``, ``gat_forward``,
    ``gat_backward_rows`` and ``gat_backward_sources``."""

    name = "cpu"

    def spmm_forward(self, rowptr: Tensor, col: Tensor, value: Tensor | None, x: Tensor,
                     x_halo: Tensor | None, reduce: str) -> tuple[Tensor, Tensor | None]:
        out, arg = torch.ops.pyg_dist.spmm_forward(rowptr, col, value, x, x_halo, reduce)
        return out, (arg if reduce == "max" else None)

    def sddmm(
        self, rowptr: Tensor, col: Tensor, a: Tensor, x: Tensor, x_halo: Tensor | None
    ) -> Tensor:
        return torch.ops.pyg_dist.sddmm(rowptr, col, a, x, x_halo)

    def gat_forward(self, args: GatArgs) -> tuple[Tensor, Tensor]:
        return torch.ops.pyg_dist.gat_forward(
            args.rowptr, args.col, args.x, args.x_halo, args.alpha_src, args.alpha_src_halo,
            args.alpha_dst, args.alpha_edge, args.edge_scale, args.negative_slope,
        )

    def gat_backward(self, args: GatArgs, lse: Tensor, grad_out: Tensor,
                     transpose: tuple[Tensor, Tensor, Tensor] | None, need_src: bool,
                     need_score: bool, need_alpha_src: bool) -> GatGrads:
        grads = GatGrads()
        if need_score:
            grads.score, grads.alpha_dst = torch.ops.pyg_dist.gat_backward_rows(
                args.rowptr, args.col, args.x, args.x_halo, args.alpha_src, args.alpha_src_halo,
                args.alpha_dst, args.alpha_edge, args.edge_scale, lse, grad_out,
                args.negative_slope,
            )
        if need_src or need_alpha_src:
            assert transpose is not None, "gat_backward needs the transpose for source gradients"
            colptr, row, perm = transpose
            src, alpha_src = torch.ops.pyg_dist.gat_backward_sources(
                colptr, row, perm, args.alpha_src, args.alpha_src_halo, args.alpha_dst,
                args.alpha_edge, args.edge_scale, lse, grad_out,
                grads.score if need_alpha_src else None, need_src, args.negative_slope,
            )
            grads.src = src if need_src else None
            grads.alpha_src = alpha_src if need_alpha_src else None
        return grads
