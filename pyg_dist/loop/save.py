"""A trained model's weights as one ``state_dict`` file, written by rank 0."""
from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from pyg_dist.nn.owned import owned_parameters
from pyg_dist.runtime import distributed

__all__ = ["save_model"]


def save_model(model: nn.Module, path: str | os.PathLike) -> Path:
    """Writes ``model``'s ``state_dict`` to ``path`` with :func:`torch.save`,
    from rank 0 (the ranks hold equal weights after any loop that sums
    gradients), atomically: written as ``.<name>.partial``, then renamed. A
    :class:`~pyg_dist.DistributedModel` or
    :class:`~torch.nn.parallel.DistributedDataParallel` is unwrapped, so the
    keys are the model's own, which Dist layers share with PyG's: the file
    loads into the plain PyG model with ``model.load_state_dict(torch.load(path))``.
    Tensors are saved on the CPU. Collective.

    Args:
        model (torch.nn.Module): The trained model.
        path (str or os.PathLike): The file to write, replaced if it exists.

    Returns:
        The path written.
    """
    while hasattr(model, "module") and isinstance(model.module, nn.Module):
        model = model.module
    if owned_parameters(model):
        raise ValueError(f"'save_model' writes rank 0's weights, but {type(model).__name__} "
                         f"holds each rank's own rows of its embedding table; write every "
                         f"node's embedding with pyg_dist.save_embeddings(model, data, folder)")
    path = Path(path)
    with distributed.failing_together(f"saving the model to '{path}'"):
        if distributed.rank() == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f".{path.name}.partial")
            torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, partial)
            os.replace(partial, path)
    return path
