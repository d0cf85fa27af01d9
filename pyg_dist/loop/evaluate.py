"""Accuracy over the nodes of all ranks, for a training loop of one's own."""
from __future__ import annotations

from torch import Tensor

from pyg_dist.loop.loss import _labels, _mask
from pyg_dist.runtime import distributed

__all__ = ["accuracy"]


def accuracy(pred: Tensor, y: Tensor, mask: Tensor | None = None) -> float:
    r"""The fraction of the masked nodes of *all* ranks whose prediction is
    their label: what ``int((pred[mask] == y[mask]).sum()) / int(mask.sum())``
    is in one process on the whole graph (and OGB's ``Evaluator("ogbn-...")``
    ``"acc"``). ``nan`` when no rank has a masked node. Collective.

    Args:
        pred (torch.Tensor): This rank's predicted classes :math:`(N)`, or its
            logits :math:`(N, C)` (their argmax is taken). A column
            :math:`(N, 1)` of classes, as OGB writes ``y_pred``, is read as
            :math:`(N)`.
        y (torch.Tensor): The class of each of this rank's nodes, :math:`(N)`
            or :math:`(N, 1)`.
        mask (torch.Tensor, optional): Which of this rank's nodes count
            (bool); :obj:`None` counts all. (default: :obj:`None`)

    Shapes:
        - **input:** predictions :math:`(N)`, :math:`(N, 1)` or :math:`(N, C)`,
          labels :math:`(N)` or :math:`(N, 1)`, mask :math:`(N)`
        - **output:** a float
    """
    if pred.dim() == 2 and pred.size(1) == 1 and not pred.is_floating_point():
        pred = pred.view(-1)
    if pred.dim() == 2:
        pred = pred.argmax(dim=-1)
    if pred.dim() != 1:
        raise ValueError(f"'pyg_dist.accuracy' takes classes [N] or logits [N, C] of this "
                         f"rank's nodes (got shape {tuple(pred.shape)}); pass "
                         f"model(data.x, data.edge_index) or its argmax(dim=-1)")
    y = _labels(pred.unsqueeze(1), y, "accuracy")
    mask = _mask(pred.unsqueeze(1), mask, "accuracy")
    if mask is not None:
        pred, y = pred[mask], y[mask]
    right, total = distributed.all_reduce_values([float((pred == y).sum()), float(y.numel())])
    return right / total if total > 0 else float("nan")
