r"""Pure-PyTorch GAT attention: the oracle every GAT kernel is tested against,
and the helpers the PyTorch backend (:mod:`.torch_kernels`) shares with it,
including the explicit backward the C++ and Triton kernels implement."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from pyg_dist.ops.csr import csr_row
from pyg_dist.ops.spmm_ref import gather_sources

__all__ = ["gat_ref", "GatArgs", "GatGrads", "check_gat_args", "attend", "pre_scores",
           "segment_softmax", "aggregate", "gat_backward_ref", "FLOAT_DTYPES"]

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class GatArgs:
    """The checked arguments of one :func:`pyg_dist.ops.gat` call, as the
    backends receive them (see :func:`gat_ref` for the shapes)."""

    rowptr: Tensor
    col: Tensor
    x: Tensor
    x_halo: Tensor | None
    alpha_src: Tensor
    alpha_src_halo: Tensor | None
    alpha_dst: Tensor
    alpha_edge: Tensor | None
    edge_scale: Tensor | None
    negative_slope: float

    @property
    def num_rows(self) -> int:
        return self.rowptr.numel() - 1

    @property
    def num_owned(self) -> int:
        return self.x.size(0)

    @property
    def num_src(self) -> int:
        return self.x.size(0) + (0 if self.x_halo is None else self.x_halo.size(0))


@dataclass
class GatGrads:
    """What a backend's ``gat_backward`` returns; :obj:`None` where not asked.

    - ``src`` :obj:`[N + Hh, H, C]`, ``x``'s dtype: gradient of ``[x ; x_halo]``.
    - ``alpha_src`` :obj:`[N + Hh, H]` float32: of ``[alpha_src ; alpha_src_halo]``.
    - ``alpha_dst`` :obj:`[M, H]` float32.
    - ``score`` :obj:`[nnz, H]` float32: of each entry's score before the
      leaky ReLU, which is also the gradient of ``alpha_edge``.
    """

    src: Tensor | None = None
    alpha_src: Tensor | None = None
    alpha_dst: Tensor | None = None
    score: Tensor | None = None


def gat_ref(
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
) -> Tensor:
    r"""The attention aggregation of `"Graph Attention Networks"
    <https://arxiv.org/abs/1710.10903>`_ over a CSR graph, computed with PyTorch
    ops (the semantics of :func:`pyg_dist.ops.gat`, and its oracle).

    .. math::
        z_{e,h} &= \mathrm{LeakyReLU}\left(\alpha^{src}_{\mathrm{col}_e,h} +
            \alpha^{dst}_{i,h} + \alpha^{edge}_{e,h}\right) \\
        a_{e,h} &= \frac{\exp z_{e,h}}{\sum_{e' \in \mathrm{row}(i)} \exp z_{e',h}} \\
        \mathbf{y}_{i,h} &= \sum_{e \in \mathrm{row}(i)} a_{e,h} \, w_{e,h} \,
            \mathbf{s}_{\mathrm{col}_e,h}

    for the entries :math:`e` of row :math:`i`, :math:`\mathbf{s}` being the
    rows of ``x`` followed by those of ``x_halo`` (and the same for
    :math:`\alpha^{src}`), and :math:`w` the ``edge_scale``. This is PyG's
    ``GATConv`` message passing (``softmax`` over each target's in-edges). The
    softmax subtracts each row's maximum and runs in float32, as does the sum;
    empty rows give zeros. Differentiable with respect to every input but
    ``edge_scale`` (through PyTorch's own autograd).

    Args:
        rowptr (torch.Tensor): Row pointers :obj:`[M + 1]`, int32 or int64; row
            :math:`i` holds the in-edges of target :math:`i`.
        col (torch.Tensor): Source of each entry :obj:`[nnz]`, the dtype of
            ``rowptr``; a column below :obj:`x.size(0)` reads ``x`` and
            ``alpha_src``, any other ``x_halo`` and ``alpha_src_halo``.
        x (torch.Tensor): Source features :obj:`[N, H, C]`, float32, float16
            or bfloat16.
        alpha_src (torch.Tensor): Source scores :obj:`[N, H]`.
        alpha_dst (torch.Tensor): Target scores :obj:`[M, H]`.
        x_halo (torch.Tensor, optional): Halo features :obj:`[Hh, H, C]`, the
            dtype of ``x``. (default: :obj:`None`)
        alpha_src_halo (torch.Tensor, optional): Halo scores :obj:`[Hh, H]`,
            given exactly when ``x_halo`` is. (default: :obj:`None`)
        alpha_edge (torch.Tensor, optional): Extra score per entry
            :obj:`[nnz, H]`. (default: :obj:`None`)
        edge_scale (torch.Tensor, optional): Factor per entry :obj:`[nnz, H]`
            applied after the softmax (attention dropout's mask / (1 - p));
            not differentiated. (default: :obj:`None`)
        negative_slope (float, optional): Slope of the leaky ReLU.
            (default: :obj:`0.2`)

    Shapes:
        - **output:** :obj:`[M, H, C]`, the dtype of ``x``.
    """
    args = check_gat_args(rowptr, col, x, alpha_src, alpha_dst, x_halo, alpha_src_halo,
                          alpha_edge, edge_scale, negative_slope)
    return attend(args)[0].to(x.dtype)


def attend(args: GatArgs) -> tuple[Tensor, Tensor]:
    """The float32 output ``[M, H, C]`` of :func:`gat_ref` and each row's
    log-sum-exp of the scores ``[M, H]``; differentiable."""
    row = csr_row(args.rowptr, args.col).long()
    score = F.leaky_relu(pre_scores(args, row), args.negative_slope)
    coef, lse = segment_softmax(score, row, args.num_rows)
    if args.edge_scale is not None:
        coef = coef * args.edge_scale.detach().float()
    return aggregate(coef, row, args.col, args.x, args.x_halo, args.num_rows), lse


def pre_scores(args: GatArgs, row: Tensor) -> Tensor:
    """``[nnz, H]`` float32: each entry's score before the leaky ReLU,
    ``alpha_src[col] + alpha_dst[row] (+ alpha_edge)``."""
    src = gather_sources(args.col.long(), args.alpha_src, args.alpha_src_halo).float()
    score = src + args.alpha_dst.float()[row]
    return score if args.alpha_edge is None else score + args.alpha_edge.float()


def segment_softmax(score: Tensor, row: Tensor, num_rows: int) -> tuple[Tensor, Tensor]:
    """Softmax of ``score`` ``[nnz, H]`` over the entries of each row (``row``
    sorted, as in a CSR), with the row's maximum subtracted. Returns the
    coefficients ``[nnz, H]`` and each row's log-sum-exp ``[num_rows, H]``
    (zero for empty rows); differentiable in ``score``."""
    index = row.view(-1, 1).expand_as(score)
    heads = score.size(1)
    best = score.new_zeros(num_rows, heads).scatter_reduce(
        0, index, score.detach(), reduce="amax", include_self=False
    )
    exp = torch.exp(score - best[row])
    total = score.new_zeros(num_rows, heads).index_add(0, row, exp)
    lse = best + torch.log(total.detach().clamp(min=torch.finfo(torch.float32).tiny))
    return exp / total[row], torch.where(total.detach() > 0, lse, 0.0)


def aggregate(coef: Tensor, row: Tensor, col: Tensor, x: Tensor, x_halo: Tensor | None,
              num_rows: int) -> Tensor:
    """``[num_rows, H, C]`` float32: ``sum_e coef[e, h] * s[col[e], h, :]`` per row."""
    msg = gather_sources(col.long(), x, x_halo).float() * coef.unsqueeze(-1)
    return msg.new_zeros(num_rows, *msg.shape[1:]).index_add(0, row, msg)


def gat_backward_ref(args: GatArgs, lse: Tensor, grad_out: Tensor, need_src: bool,
                     need_score: bool, need_alpha_src: bool) -> GatGrads:
    r"""The gradients of :func:`gat_ref`, written out (the formulas the
    kernels implement), given the forward's log-sum-exp ``lse`` ``[M, H]``.

    With :math:`a` the coefficients (recomputed as :math:`\exp(z - \mathrm{lse})`),
    :math:`w` the ``edge_scale`` and :math:`\bar{\mathbf{y}}` ``grad_out``:
    :math:`g_e = w_e \langle \bar{\mathbf{y}}_i, \mathbf{s}_{\mathrm{col}_e} \rangle`,
    :math:`\bar{z}_e = a_e (g_e - \sum_{e' \in \mathrm{row}(i)} a_{e'} g_{e'})`
    times the leaky ReLU's slope at the entry; the score gradient sums into
    ``alpha_dst`` by row and into ``alpha_src`` by column, and
    :math:`\bar{\mathbf{s}}_j = \sum_{e : \mathrm{col}_e = j} a_e w_e \bar{\mathbf{y}}_i`.
    ``need_alpha_src`` asks for the column sums (``need_score`` must be set).
    """
    row, col = csr_row(args.rowptr, args.col).long(), args.col.long()
    pre = pre_scores(args, row)
    coef = torch.exp(F.leaky_relu(pre, args.negative_slope) - lse[row])
    scale = None if args.edge_scale is None else args.edge_scale.float()
    grad_out = grad_out.float()
    grads = GatGrads()
    if need_src:
        weight = coef if scale is None else coef * scale
        msg = grad_out[row] * weight.unsqueeze(-1)
        grads.src = msg.new_zeros(args.num_src, *msg.shape[1:]).index_add_(0, col, msg)
        grads.src = grads.src.to(args.x.dtype)
    if need_score:
        src = gather_sources(col, args.x, args.x_halo).float()
        g = (grad_out[row] * src).sum(dim=-1)
        g = g if scale is None else g * scale
        total = g.new_zeros(args.num_rows, g.size(1)).index_add_(0, row, coef * g)
        slope = torch.where(pre > 0, 1.0, args.negative_slope)
        grads.score = coef * (g - total[row]) * slope
        grads.alpha_dst = torch.zeros_like(total).index_add_(0, row, grads.score)
        if need_alpha_src:
            grads.alpha_src = g.new_zeros(args.num_src, g.size(1)).index_add_(0, col, grads.score)
    return grads


def check_gat_args(
    rowptr: Tensor,
    col: Tensor,
    x: Tensor | None,
    alpha_src: Tensor,
    alpha_dst: Tensor,
    x_halo: Tensor | None,
    alpha_src_halo: Tensor | None,
    alpha_edge: Tensor | None,
    edge_scale: Tensor | None,
    negative_slope: float,
    op: str = "gat",
) -> GatArgs:
    """Validates the arguments of :func:`pyg_dist.ops.gat` (``x`` may be
    :obj:`None` for :func:`pyg_dist.ops.gat_attention`) and bundles them."""
    if rowptr.dim() != 1 or col.dim() != 1 or rowptr.numel() < 1:
        raise ValueError(
            f"'{op}' expects 1-D 'rowptr' [M + 1] and 'col' [nnz] (got shapes "
            f"{tuple(rowptr.shape)} and {tuple(col.shape)}); build them with pyg_dist.ops.to_csr"
        )
    if rowptr.dtype not in (torch.int32, torch.int64) or col.dtype != rowptr.dtype:
        raise TypeError(
            f"'{op}' expects int32 or int64 'rowptr' and 'col' of one dtype (got "
            f"{rowptr.dtype} and {col.dtype}); cast both with .to(torch.int64)"
        )
    if alpha_src.dim() != 2:
        raise ValueError(
            f"'{op}' expects 'alpha_src' of shape [N, H] (got {list(alpha_src.shape)})"
        )
    num_owned, heads = alpha_src.shape
    num_rows, nnz = rowptr.numel() - 1, col.numel()
    if x is not None:
        if x.dim() != 3 or x.dtype not in FLOAT_DTYPES:
            raise TypeError(
                f"'{op}' expects 'x' of shape [N, H, C] in float32, float16 or bfloat16 (got "
                f"shape {tuple(x.shape)} of {x.dtype}); reshape it with x.view(N, heads, -1)"
            )
        if x.shape[:2] != alpha_src.shape:
            raise ValueError(
                f"'{op}' expects 'alpha_src' of shape [N, H] = {list(x.shape[:2])} like 'x' "
                f"{list(x.shape)} (got {list(alpha_src.shape)}); give one score per node and head"
            )
    _check_shape(op, "alpha_dst", alpha_dst, (num_rows, heads), "one row per CSR row (target)")
    _check_shape(op, "alpha_edge", alpha_edge, (nnz, heads), "one row per CSR entry")
    _check_shape(op, "edge_scale", edge_scale, (nnz, heads), "one row per CSR entry")
    if x is not None and (x_halo is None) != (alpha_src_halo is None):
        given, missing = ("x_halo", "alpha_src_halo") if x_halo is not None else (
            "alpha_src_halo", "x_halo")
        raise ValueError(
            f"'{op}' got '{given}' without '{missing}'; halo sources need both their features "
            f"and their scores"
        )
    if alpha_src_halo is not None:
        if alpha_src_halo.dim() != 2 or alpha_src_halo.size(1) != heads:
            raise ValueError(
                f"'{op}' expects 'alpha_src_halo' of shape [Hh, {heads}] like 'alpha_src' (got "
                f"{list(alpha_src_halo.shape)}); check the number of heads"
            )
        if x is not None and x_halo is not None:
            _check_shape(op, "x_halo", x_halo, (alpha_src_halo.size(0), *x.shape[1:]),
                         "like 'x', one row per row of 'alpha_src_halo'")
            if x_halo.dtype != x.dtype:
                raise TypeError(f"'{op}' got x of {x.dtype} but x_halo of {x_halo.dtype}; cast one")
    for name, t in (("alpha_src", alpha_src), ("alpha_dst", alpha_dst),
                    ("alpha_src_halo", alpha_src_halo), ("alpha_edge", alpha_edge),
                    ("edge_scale", edge_scale)):
        if t is not None and t.dtype not in FLOAT_DTYPES:
            raise TypeError(
                f"'{op}' expects '{name}' in float32, float16 or bfloat16 (got {t.dtype})"
            )
    devices = {t.device for t in (rowptr, col, x, x_halo, alpha_src, alpha_src_halo, alpha_dst,
                                  alpha_edge, edge_scale) if t is not None}
    if len(devices) > 1:
        raise ValueError(
            f"'{op}' expects all tensors on one device (got {sorted(map(str, devices))}); "
            f"move them with .to(device)"
        )
    # gat_attention has no features: an empty [N, H, 0] keeps GatArgs's sizes right.
    features = alpha_src.new_empty(num_owned, heads, 0) if x is None else x
    return GatArgs(rowptr, col, features, x_halo, alpha_src, alpha_src_halo, alpha_dst, alpha_edge,
                   edge_scale, float(negative_slope))


def _check_shape(op: str, name: str, t: Tensor | None, shape: tuple[int, ...], what: str) -> None:
    if t is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(
            f"'{op}' expects '{name}' of shape {list(shape)}, {what} (got {list(t.shape)}); "
            f"check the number of heads and the graph's size"
        )
