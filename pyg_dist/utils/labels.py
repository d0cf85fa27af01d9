r"""Labels as input (the label trick of `"Bag of Tricks for Node Classification
with Graph Neural Networks" <https://arxiv.org/abs/2103.13355>`_ and
`"Masked Label Prediction" <https://arxiv.org/abs/2009.03509>`_): a model
reads the one-hot labels of some training nodes as extra input columns.

In each training epoch a random share of the training nodes (``rate``, half
by default) shows its label, and the loss is taken on the other training
nodes; in evaluation every training node shows its label. Which nodes show
theirs in epoch :math:`e` is a hash of :math:`(s, e, v)` (:math:`v` the
global node id, :math:`s` a seed), so one process on the whole graph and the
ranks of any cut draw the same split, and a resumed run draws what an
uninterrupted one does.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pyg_dist.utils.hashing import call_key, entry_hash

__all__ = ["LabelInput"]


@dataclass(frozen=True)
class LabelInput:
    """How a model reads labels as input: ``num_classes`` one-hot columns
    after the node features, filled for the training nodes that show their
    label (zero elsewhere).

    Args:
        num_classes (int): Classes, the width of the label columns.
        rate (float, optional): Share of the training nodes that show their
            label in a training epoch; the loss reads the others.
            (default: :obj:`0.5`)
        seed (int, optional): Seed of the split's hash. (default: :obj:`0`)
    """

    num_classes: int
    rate: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.num_classes, int) or self.num_classes < 1:
            raise ValueError(f"LabelInput(num_classes={self.num_classes!r}): use the number "
                             f"of classes (>= 1)")
        if not 0.0 < self.rate < 1.0:
            raise ValueError(f"LabelInput(rate={self.rate!r}): use a share in (0, 1) of the "
                             f"training nodes that show their label each epoch")

    def shown(self, global_id: Tensor, train_mask: Tensor, epoch: int) -> Tensor:
        """``[N]`` bool: the training nodes that show their label in training
        epoch ``epoch``: those whose 32-bit hash of ``(seed, epoch, global
        id)``, read as int32, lies in the lowest ``rate`` of its range.

        Args:
            global_id (torch.Tensor): ``[N]`` global ids of the rows.
            train_mask (torch.Tensor): ``[N]`` bool, the training nodes.
            epoch (int): The training epoch (from 1).
        """
        key = call_key(self.seed, epoch, global_id.device)
        draw = entry_hash(global_id, 1, key).view(-1)
        return train_mask & (draw < int(self.rate * 2**32) - 2**31)

    def columns(self, y: Tensor, shown: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
        """``[N, num_classes]``: the one-hot label of each row in ``shown``,
        zeros elsewhere.

        Args:
            y (torch.Tensor): ``[N]`` class of each row (any value where not
                shown).
            shown (torch.Tensor): ``[N]`` bool, the rows that show their label.
            dtype (torch.dtype, optional): The columns' dtype.
                (default: :obj:`torch.float32`)
        """
        out = torch.zeros(y.numel(), self.num_classes, dtype=dtype, device=y.device)
        rows = shown.nonzero().view(-1)
        out[rows, y[rows]] = 1.0
        return out

    def inputs(self, x: Tensor, y: Tensor, shown: Tensor) -> Tensor:
        """``[N, F + num_classes]``: the features ``x`` followed by the label
        columns of the rows in ``shown``.

        Args:
            x (torch.Tensor): ``[N, F]`` node features.
            y (torch.Tensor): ``[N]`` classes.
            shown (torch.Tensor): ``[N]`` bool, the rows that show their label.
        """
        return torch.cat([x, self.columns(y, shown, x.dtype)], dim=1)
