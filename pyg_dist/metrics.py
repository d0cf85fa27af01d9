"""Losses and accuracies over the nodes of all ranks, shared by every training strategy."""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pyg_dist.runtime import distributed

__all__ = ["global_loss", "mean_over_ranks", "global_means", "accuracies", "evaluate", "MASKS"]

#: The node masks accuracies are reported on, in the order they are returned.
MASKS = ("train_mask", "val_mask", "test_mask")
#: Losses averaged over all ranks' nodes so far in this process.
_MEANS = [0]


def global_means() -> int:
    """How many losses :func:`mean_over_ranks` (and so :func:`~pyg_dist.train.global_loss`)
    averaged over the nodes of all ranks in this process so far
    (:class:`~pyg_dist.DistributedModel` warns of a backward that follows
    none)."""
    return _MEANS[0]


def global_loss(out: Tensor, y: Tensor, mask: Tensor) -> tuple[Tensor, float]:
    """Cross entropy averaged over the masked nodes of all ranks: this rank's
    differentiable share, and the global value. Raises on a non-finite loss.
    Collective.

    Args:
        out (torch.Tensor): The logits of this rank's nodes.
        y (torch.Tensor): The class of each of this rank's nodes.
        mask (torch.Tensor): Which of this rank's nodes count (bool).

    Shapes:
        - **input:** logits :math:`(N, C)`, labels :math:`(N)`, mask :math:`(N)`
          (:math:`N` this rank's nodes)
        - **output:** a scalar tensor, and a float
    """
    return mean_over_ranks(F.cross_entropy(out[mask], y[mask], reduction="sum"),
                           int(mask.sum()))


def mean_over_ranks(local_sum: Tensor, count: int) -> tuple[Tensor, float]:
    """A loss summed over ``count`` nodes on each rank, averaged over the
    nodes of all ranks: this rank's differentiable share, and the global
    value. Raises on a non-finite loss. Collective.

    Args:
        local_sum (torch.Tensor): This rank's summed loss (a scalar).
        count (int): The nodes it sums over.
    """
    _MEANS[0] += 1
    total, counted = distributed.all_reduce_values([float(local_sum.detach()), float(count)])
    counted = max(counted, 1.0)
    if not math.isfinite(total):
        raise FloatingPointError(
            "the training loss is not finite; check the inputs for NaN/inf values "
            "(pyg_dist.partition rejects them in node features) or lower the learning rate"
        )
    return local_sum / counted, total / counted


def accuracies(pred: Tensor | None, data: Any) -> tuple[float, float, float]:
    """Global accuracy of the predictions ``pred`` (this rank's rows; :obj:`None`
    for a rank that predicts nothing) on the three masks (nan for a mask the
    data lacks). Collective.

    Args:
        pred (torch.Tensor, optional): The predicted class of each of this
            rank's nodes; :obj:`None` when this rank predicts nothing.
        data (DistData or torch_geometric.data.Data): The graph, with ``y``
            and the masks of :data:`~pyg_dist.metrics.MASKS`.

    Shapes:
        - **input:** predictions :math:`(N)`
        - **output:** train, validation and test accuracy (floats)
    """
    counts = []
    for name in MASKS:
        mask = getattr(data, name, None) if name in data_keys(data) else None
        if pred is None or mask is None:
            counts += [0.0, 0.0]
        else:
            counts += [float((pred[mask] == data.y[mask]).sum()), float(mask.sum())]
    stats = distributed.all_reduce_values(counts)
    return tuple(  # type: ignore[return-value]
        stats[2 * i] / stats[2 * i + 1] if stats[2 * i + 1] > 0 else float("nan")
        for i in range(3)
    )


@torch.no_grad()
def evaluate(model: nn.Module, data: Any) -> tuple[float, float, float]:
    """Global accuracy of ``model(data.x, data.edge_index)`` on ``train_mask``,
    ``val_mask`` and ``test_mask``. Collective.

    Args:
        model (torch.nn.Module): The model, switched to evaluation mode.
        data (DistData or torch_geometric.data.Data): The graph, with ``x``,
            ``edge_index``, ``y`` and the masks.
    """
    model.eval()
    return accuracies(model(data.x, data.edge_index).argmax(dim=-1), data)


def data_keys(data: Any) -> list[str]:
    """The attribute names of a PyG ``Data``/``DistData`` or a plain object."""
    keys = data.keys() if callable(getattr(data, "keys", None)) else list(vars(data))
    return list(keys)
