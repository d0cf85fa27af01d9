r"""Losses over the nodes of all ranks, for a training loop of one's own.

Each rank holds its own nodes' logits, so a loss averaged over this rank's
training nodes (``F.cross_entropy(out[mask], y[mask])``) weighs each rank's
nodes by the inverse of *its* count: the sum of the ranks' gradients is then
not the gradient of the loss of one process on the whole graph (it is
:math:`\sum_r \frac{1}{n_r} \sum_{i \in r} \nabla \ell_i` where one process
takes :math:`\frac{1}{n} \sum_i \nabla \ell_i`). The losses here divide this
rank's sum by the count of all ranks:

.. math::
    \mathcal{L} = \frac{1}{\sum_r n_r} \sum_r \sum_{i \in \text{mask}_r} \ell_i,

and return a scalar whose *value* is :math:`\mathcal{L}` on every rank (what
one process prints) and whose *gradient* is this rank's share, so the
gradients summed over the ranks (:class:`~pyg_dist.DistributedModel`) are
those of one process.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from pyg_dist.metrics import mean_over_ranks

__all__ = ["cross_entropy", "global_mean"]


def global_mean(local_sum: Tensor, count: int | Tensor) -> Tensor:
    r"""A loss summed over ``count`` nodes on each rank, averaged over the
    nodes of all ranks: for losses other than :func:`cross_entropy`
    (``F.binary_cross_entropy_with_logits(out[mask], y[mask],
    reduction="sum")``, say). Collective.

    Args:
        local_sum (torch.Tensor): This rank's loss summed over its nodes (a
            scalar).
        count (int or torch.Tensor): How many nodes it sums over.

    Returns:
        A scalar tensor: the mean over all ranks' nodes as its value (the
        same on every rank), this rank's share as its gradient.
    """
    if not isinstance(local_sum, Tensor) or local_sum.dim() != 0:
        got = (f"shape {tuple(local_sum.shape)}" if isinstance(local_sum, Tensor)
               else type(local_sum).__name__)
        raise ValueError(f"'pyg_dist.global_mean' takes this rank's loss summed to a scalar "
                         f"tensor (got {got}); sum it first, e.g. with reduction='sum'")
    share, value = mean_over_ranks(local_sum, int(count))
    return share + (value - share.detach())


def cross_entropy(out: Tensor, y: Tensor, mask: Tensor | None = None) -> Tensor:
    r"""Cross entropy averaged over the masked nodes of *all* ranks: what
    ``F.cross_entropy(out[mask], y[mask])`` is in one process on the whole
    graph. Collective.

    The same call on each rank's part divides by that rank's count
    :math:`n_r`, so the gradients summed over the ranks would be
    :math:`\sum_r \frac{1}{n_r} \sum_{i \in r} \nabla \ell_i`, not the single
    process's :math:`\frac{1}{n} \sum_i \nabla \ell_i`. This divides this
    rank's sum by the count of all ranks, :math:`n = \sum_r n_r`, and returns
    a scalar whose value is the loss over all ranks' nodes (equal on every
    rank, what one process prints) and whose gradient is this rank's share.

    Args:
        out (torch.Tensor): The logits of this rank's nodes.
        y (torch.Tensor): The class of each of this rank's nodes (a column
            :math:`(N, 1)`, as OGB stores it, is read as :math:`(N)`).
        mask (torch.Tensor, optional): Which of this rank's nodes count
            (bool); :obj:`None` counts all. (default: :obj:`None`)

    Returns:
        A scalar tensor: the loss over all ranks' nodes as its value, this
        rank's share as its gradient.

    Shapes:
        - **input:** logits :math:`(N, C)`, labels :math:`(N)`, mask
          :math:`(N)` (:math:`N` this rank's nodes)
        - **output:** a scalar
    """
    y = _labels(out, y, "cross_entropy")
    mask = _mask(out, mask, "cross_entropy")
    if mask is not None:
        out, y = out[mask], y[mask]
    return global_mean(F.cross_entropy(out, y, reduction="sum"), y.numel())


def _labels(out: Tensor, y: Tensor, where: str) -> Tensor:
    if y.dim() == 2 and y.size(1) == 1:
        y = y.view(-1)
    if out.dim() != 2 or y.dim() != 1 or y.size(0) != out.size(0):
        raise ValueError(
            f"'pyg_dist.{where}' takes a row per node of this rank, [N, C], and a label per "
            f"node, [N] (got {tuple(out.shape)} and {tuple(y.shape)}); pass the model's "
            f"output for data.x and data.y of the same DistData")
    return y


def _mask(out: Tensor, mask: Tensor | None, where: str) -> Tensor | None:
    if mask is None:
        return None
    if mask.dtype != torch.bool or mask.shape != out.shape[:1]:
        raise ValueError(
            f"'pyg_dist.{where}' takes a bool mask with one entry per row of out (got "
            f"{mask.dtype} of shape {tuple(mask.shape)} for {out.size(0)} rows); pass "
            f"data.train_mask of the same DistData, or mask.bool()")
    return mask
