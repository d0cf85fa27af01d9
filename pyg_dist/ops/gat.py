r"""The fused GAT attention op: per-entry scores (SDDMM), a softmax over each
row, and the weighted aggregation (SpMM) in one pass, with autograd,
dispatched to Triton (CUDA), the C++ extension (CPU) or plain PyTorch.

Forward saves each row's log-sum-exp of its scores (:obj:`[M, H]` float32)
rather than the coefficients (:obj:`[nnz, H]`): for a graph of 1M edges and
100k nodes with 8 heads that is 3.2 MB instead of 32 MB held per layer from
forward to backward; backward recomputes the scores, one read of
``alpha_src[col]`` (:math:`H` values per entry) against the :math:`H \cdot C`
features per entry it reads anyway.

Like :func:`~pyg_dist.ops.spmm`, the op is registered with :mod:`torch.library`
as ``pyg_dist::gat`` and ``pyg_dist::gat_backward`` with fake kernels and an
autograd formula, so :func:`torch.compile` keeps it as one opaque node.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from pyg_dist.ops import backends
from pyg_dist.ops.csr import csr_row, csr_transpose
from pyg_dist.ops.gat_ref import GatArgs, check_gat_args, pre_scores, segment_softmax

__all__ = ["gat", "gat_attention"]


def gat(
    rowptr: Tensor,
    col: Tensor,
    x: Tensor,
    alpha_src: Tensor,
    alpha_dst: Tensor,
    x_halo: Tensor | None = None,
    alpha_src_halo: Tensor | None = None,
    alpha_edge: Tensor | None = None,
    edge_scale: Tensor | None = None,
    negative_slope: float = 0.2,
    backend: str | None = None,
) -> Tensor:
    r"""The attention aggregation of `"Graph Attention Networks"
    <https://arxiv.org/abs/1710.10903>`_, fused: for every target row :math:`i`
    and head :math:`h`

    .. math::
        z_{e,h} &= \mathrm{LeakyReLU}\left(\alpha^{src}_{\mathrm{col}_e,h} +
            \alpha^{dst}_{i,h} + \alpha^{edge}_{e,h}\right) \\
        \mathbf{y}_{i,h} &= \sum_{e \in \mathrm{row}(i)}
            \mathrm{softmax}_{\mathrm{row}(i)}(z_{\cdot,h})_e \, w_{e,h} \,
            \mathbf{s}_{\mathrm{col}_e,h}

    with :math:`\mathbf{s}` the rows of ``x`` followed by those of ``x_halo``
    (read in place) and :math:`w` the ``edge_scale``. The semantics are those
    of :func:`pyg_dist.ops.gat_ref` (PyG's ``GATConv`` propagation); softmax
    and sums run in float32 and empty rows give zeros. Backward recomputes the
    coefficients from the saved per-row log-sum-exp and sums the source-side
    gradients over the transposed graph (:func:`~pyg_dist.ops.csr_transpose`,
    cached per graph).

    Args:
        rowptr (torch.Tensor): Row pointers :obj:`[M + 1]`, int32 or int64; row
            :math:`i` holds the in-edges of target :math:`i`.
        col (torch.Tensor): Source of each entry :obj:`[nnz]`, the dtype of
            ``rowptr``; a column below :obj:`x.size(0)` reads ``x`` and
            ``alpha_src``, any other ``x_halo`` and ``alpha_src_halo`` at
            :obj:`col - x.size(0)`.
        x (torch.Tensor): Source features :obj:`[N, H, C]`, float32, float16 or
            bfloat16.
        alpha_src (torch.Tensor): Source scores :obj:`[N, H]`.
        alpha_dst (torch.Tensor): Target scores :obj:`[M, H]`.
        x_halo (torch.Tensor, optional): Halo features :obj:`[Hh, H, C]`, the
            dtype of ``x``. (default: :obj:`None`)
        alpha_src_halo (torch.Tensor, optional): Halo scores :obj:`[Hh, H]`,
            given exactly when ``x_halo`` is. (default: :obj:`None`)
        alpha_edge (torch.Tensor, optional): Extra score per entry
            :obj:`[nnz, H]` (e.g. projected edge features). (default: :obj:`None`)
        edge_scale (torch.Tensor, optional): Factor per entry :obj:`[nnz, H]`
            applied after the softmax, not differentiated (attention dropout's
            mask / (1 - p)). (default: :obj:`None`)
        negative_slope (float, optional): Slope of the leaky ReLU.
            (default: :obj:`0.2`)
        backend (str, optional): :obj:`"triton"`, :obj:`"cpu"` (the C++
            extension) or :obj:`"torch"`; :obj:`None` picks as
            :func:`pyg_dist.ops.spmm` does. (default: :obj:`None`)

    Shapes:
        - **output:** :obj:`[M, H, C]`, the dtype of ``x``. Gradients flow to
          ``x``, ``x_halo``, ``alpha_src``, ``alpha_src_halo``, ``alpha_dst``
          and ``alpha_edge``, each in its own dtype.
    """
    check_gat_args(rowptr, col, x, alpha_src, alpha_dst, x_halo, alpha_src_halo, alpha_edge,
                   edge_scale, negative_slope)
    name = backends.resolve_name(backend, x.device.type, "gat")
    if edge_scale is not None:
        edge_scale = edge_scale.detach()
    return _gat(rowptr, col, x, x_halo, alpha_src, alpha_src_halo, alpha_dst, alpha_edge,
                edge_scale, float(negative_slope), name)[0]


def gat_attention(
    rowptr: Tensor,
    col: Tensor,
    alpha_src: Tensor,
    alpha_dst: Tensor,
    alpha_src_halo: Tensor | None = None,
    alpha_edge: Tensor | None = None,
    negative_slope: float = 0.2,
) -> Tensor:
    r"""The softmax coefficients :math:`\mathrm{softmax}_{\mathrm{row}(i)}(z)_e`
    of :func:`gat` (before ``edge_scale``), for ``return_attention_weights``;
    differentiable (PyTorch ops). Arguments as in :func:`gat`.

    Args:
        rowptr (torch.Tensor): Row pointers :obj:`[M + 1]`, int32 or int64; row
            :math:`i` holds the in-edges of target :math:`i`.
        col (torch.Tensor): Source of each entry :obj:`[nnz]`, the dtype of
            ``rowptr``; a column below :obj:`alpha_src.size(0)` reads
            ``alpha_src``, any other ``alpha_src_halo`` at
            :obj:`col - alpha_src.size(0)`.
        alpha_src (torch.Tensor): Source scores :obj:`[N, H]`.
        alpha_dst (torch.Tensor): Target scores :obj:`[M, H]`.
        alpha_src_halo (torch.Tensor, optional): Halo scores :obj:`[Hh, H]`.
            (default: :obj:`None`)
        alpha_edge (torch.Tensor, optional): Extra score per entry
            :obj:`[nnz, H]` (e.g. projected edge features). (default: :obj:`None`)
        negative_slope (float, optional): Slope of the leaky ReLU.
            (default: :obj:`0.2`)

    Shapes:
        - **output:** :obj:`[nnz, H]` in CSR order, the dtype of ``alpha_dst``.
    """
    args = check_gat_args(rowptr, col, None, alpha_src, alpha_dst, None, alpha_src_halo,
                          alpha_edge, None, negative_slope, op="gat_attention")
    row = csr_row(rowptr, col).long()
    score = F.leaky_relu(pre_scores(args, row), args.negative_slope)
    return segment_softmax(score, row, args.num_rows)[0].to(alpha_dst.dtype)


@torch.library.custom_op("pyg_dist::gat", mutates_args=())
def _gat(rowptr: Tensor, col: Tensor, x: Tensor, x_halo: Tensor | None, alpha_src: Tensor,
         alpha_src_halo: Tensor | None, alpha_dst: Tensor, alpha_edge: Tensor | None,
         edge_scale: Tensor | None, negative_slope: float,
         backend: str) -> tuple[Tensor, Tensor]:
    """``(out [M, H, C], lse [M, H] float32)`` with backend ``backend`` (a name)."""
    args = GatArgs(rowptr, col, x, x_halo, alpha_src, alpha_src_halo, alpha_dst, alpha_edge,
                   edge_scale, negative_slope)
    return backends.kernels(backend).gat_forward(args)


@_gat.register_fake
def _(rowptr: Tensor, col: Tensor, x: Tensor, x_halo: Tensor | None, alpha_src: Tensor,
      alpha_src_halo: Tensor | None, alpha_dst: Tensor, alpha_edge: Tensor | None,
      edge_scale: Tensor | None, negative_slope: float, backend: str) -> tuple[Tensor, Tensor]:
    rows = rowptr.size(0) - 1
    return (x.new_empty(rows, x.size(1), x.size(2)),
            x.new_empty(rows, x.size(1), dtype=torch.float32))


@torch.library.custom_op("pyg_dist::gat_backward", mutates_args=())
def _gat_backward(grad_out: Tensor, lse: Tensor, rowptr: Tensor, col: Tensor, x: Tensor,
                  x_halo: Tensor | None, alpha_src: Tensor, alpha_src_halo: Tensor | None,
                  alpha_dst: Tensor, alpha_edge: Tensor | None, edge_scale: Tensor | None,
                  negative_slope: float, backend: str, need_src: bool, need_alpha_src: bool,
                  need_score: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(src, alpha_src, alpha_dst, score)`` gradients (see
    :class:`~pyg_dist.ops.gat_ref.GatGrads`), each empty unless asked for
    (``alpha_dst`` and ``score`` with ``need_score``)."""
    args = GatArgs(rowptr, col, x, x_halo, alpha_src, alpha_src_halo, alpha_dst, alpha_edge,
                   edge_scale, negative_slope)
    transpose = None
    if need_src or need_alpha_src:
        transpose = csr_transpose(rowptr, col, args.num_src)
    grads = backends.kernels(backend).gat_backward(args, lse, grad_out.contiguous(), transpose,
                                                   need_src, need_score, need_alpha_src)
    return (x.new_empty(0) if grads.src is None else grads.src,
            lse.new_empty(0) if grads.alpha_src is None else grads.alpha_src,
            lse.new_empty(0) if grads.alpha_dst is None else grads.alpha_dst,
            lse.new_empty(0) if grads.score is None else grads.score)


@_gat_backward.register_fake
def _(grad_out: Tensor, lse: Tensor, rowptr: Tensor, col: Tensor, x: Tensor,
      x_halo: Tensor | None, alpha_src: Tensor, alpha_src_halo: Tensor | None,
      alpha_dst: Tensor, alpha_edge: Tensor | None, edge_scale: Tensor | None,
      negative_slope: float, backend: str, need_src: bool, need_alpha_src: bool,
      need_score: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    num_src = x.size(0) + (0 if x_halo is None else x_halo.size(0))
    heads = x.size(1)
    src = x.new_empty((num_src, heads, x.size(2)) if need_src else (0,))
    alpha = lse.new_empty((num_src, heads) if need_alpha_src else (0,))
    dst = lse.new_empty(tuple(lse.shape) if need_score else (0,))
    score = lse.new_empty((col.size(0), heads) if need_score else (0,))
    return src, alpha, dst, score


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    rowptr, col, x, x_halo, alpha_src, alpha_src_halo, alpha_dst, alpha_edge, edge_scale, \
        negative_slope, backend = inputs
    ctx.negative_slope, ctx.backend = negative_slope, backend
    ctx.save_for_backward(rowptr, col, x, x_halo, alpha_src, alpha_src_halo, alpha_dst,
                          alpha_edge, edge_scale, output[1])


def _backward(ctx: Any, grad_out: Tensor, _grad_lse: Tensor | None) -> tuple[Tensor | None, ...]:
    rowptr, col, x, x_halo, alpha_src, alpha_src_halo, alpha_dst, alpha_edge, edge_scale, \
        lse = ctx.saved_tensors
    need = ctx.needs_input_grad
    need_x, need_halo = need[2], need[3]
    need_alpha_src = need[4] or need[5]
    need_score = need_alpha_src or need[6] or need[7]
    src, alpha, dst, score = _gat_backward(
        grad_out, lse, rowptr, col, x, x_halo, alpha_src, alpha_src_halo, alpha_dst,
        alpha_edge, edge_scale, ctx.negative_slope, ctx.backend, need_x or need_halo,
        need_alpha_src, need_score)
    n = x.size(0)
    return (None, None,
            _part(src, None, n, x) if need_x else None,
            _part(src, n, None, x_halo) if need_halo else None,
            _part(alpha, None, n, alpha_src) if need[4] else None,
            _part(alpha, n, None, alpha_src_halo) if need[5] else None,
            dst.to(alpha_dst.dtype) if need[6] else None,
            score.to(alpha_edge.dtype) if need[7] else None,
            None, None, None)


_gat.register_autograd(_backward, setup_context=_setup_context)


def _part(full: Tensor, start: int | None, stop: int | None, like: Tensor | None) -> Tensor:
    """Rows ``[start, stop)`` of a gradient over all sources, in ``like``'s dtype."""
    assert like is not None, "a gradient for an input that was not given"
    return full[start:stop].to(like.dtype)
