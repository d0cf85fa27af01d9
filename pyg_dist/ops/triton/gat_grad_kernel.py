r"""GAT attention in Triton, backward (see
:func:`~pyg_dist.ops.gat_ref.gat_backward_ref` for the formulas); the forward
and the helpers shared with it are in :mod:`.gat_kernel`.

- Target side (:mod:`.gat_grad_rows_kernel`): per entry the gradient of its
  score ``dz``, and its row sums.
- Source side (:mod:`.gat_grad_sources_kernel`): over the transposed graph,
  per source the gradient of its features and of its score.

Scores, sums and gradients of scores are float32; no atomics anywhere.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pyg_dist.ops.gat_ref import GatArgs, GatGrads
from pyg_dist.ops.triton.configs import CHUNK_NNZ, SPLIT_DEGREE
from pyg_dist.ops.triton.gat_grad_rows_kernel import score_grads
from pyg_dist.ops.triton.gat_grad_sources_kernel import source_grads
from pyg_dist.ops.triton.gat_kernel import LaunchTensors

__all__ = ["gat_backward"]


def gat_backward(
    args: GatArgs,
    lse: Tensor,
    grad_out: Tensor,
    transpose: tuple[Tensor, Tensor, Tensor] | None,
    need_src: bool,
    need_score: bool,
    need_alpha_src: bool,
    split_degree: int = SPLIT_DEGREE,
    chunk_nnz: int = CHUNK_NNZ,
) -> GatGrads:
    r"""Launches the backward pass (see
    :func:`~pyg_dist.ops.gat_ref.gat_backward_ref` for the formulas).

    Args:
        args (GatArgs): The forward's arguments (see :func:`gat_forward`).
        lse (torch.Tensor): The forward's log-sum-exp :obj:`[M, H]` float32.
        grad_out (torch.Tensor): :obj:`[M, H, C]`, ``x``'s dtype.
        transpose (tuple, optional): ``(colptr, row, perm)`` of
            :func:`~pyg_dist.ops.csr_transpose`; needed for ``need_src`` and
            ``need_alpha_src``.
        need_src, need_score, need_alpha_src (bool): What to compute: the
            gradient of the source features, of the scores (``dz``, its row
            sums), of the source scores (its column sums).
        split_degree, chunk_nnz (int, optional): As in :func:`gat_forward`,
            for the rows and for the sources.

    Returns:
        :class:`~pyg_dist.ops.gat_ref.GatGrads`.
    """
    t = LaunchTensors.of(args)
    heads, num_feats = args.x.size(1), args.x.size(2)
    grad_out = grad_out.contiguous()
    lse = lse.contiguous()
    if grad_out.shape != (args.num_rows, heads, num_feats) or grad_out.dtype != t.x.dtype:
        raise ValueError(
            f"'gat_backward' expects 'grad_out' of shape {[args.num_rows, heads, num_feats]} in "
            f"{t.x.dtype} (got {list(grad_out.shape)} of {grad_out.dtype})"
        )
    flags = t.flags()
    grads = GatGrads()
    device = t.x.device
    if need_score:
        grads.score = torch.zeros(t.col.numel(), heads, device=device, dtype=torch.float32)
        grads.alpha_dst = torch.zeros(args.num_rows, heads, device=device, dtype=torch.float32)
        if args.num_rows and heads:
            score_grads(t, lse, grad_out, grads.score, grads.alpha_dst, args.negative_slope,
                         split_degree, chunk_nnz, flags)
    if need_src or need_alpha_src:
        assert transpose is not None, "gat_backward needs the transpose for source gradients"
        need_alpha = need_alpha_src and grads.score is not None
        grads.src = (torch.zeros(args.num_src, heads, num_feats, device=device, dtype=t.x.dtype)
                     if need_src else None)
        grads.alpha_src = (torch.zeros(args.num_src, heads, device=device, dtype=torch.float32)
                           if need_alpha else None)
        if args.num_src and heads and t.col.numel():
            source_grads(t, transpose, lse, grad_out, grads, args.negative_slope,
                          split_degree, chunk_nnz, flags)
    return grads
