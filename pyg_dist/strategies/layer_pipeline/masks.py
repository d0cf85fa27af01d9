"""A layer pipeline's dropout masks: graph-parallel training's.

Graph-parallel training of a :class:`~pyg_dist.models.DeepGNN` draws each
training step's masks with :func:`pyg_dist.utils.dropout.dropout`, from the graph's
shared seed and one call number per dropout: the step's first call drops the
input features, the next ``layers`` the inputs of the convolutions in order,
the last the output projection's input. A mask entry is a hash of the seed,
the call, the global node id and the feature, so :class:`StepMasks` draws the
same masks for any rows on any rank: a pipeline's masks do not depend on its
parts, stages or chunks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pyg_dist.runtime import distributed
from pyg_dist.utils.dropout import DroppedInput

__all__ = ["StepMasks", "step_masks"]


@dataclass(frozen=True)
class StepMasks:
    """The dropout masks of one training step.

    Attributes:
        p: Dropout probability.
        seed: The graph's shared seed.
        first: Call number of the step's first dropout (the input features).
    """

    p: float
    seed: int
    first: int

    def drop(self, x: Tensor, global_id: Tensor, call: int) -> Tensor:
        """``x`` (``[len(global_id), F]``, rows of nodes ``global_id``) dropped
        as the step's dropout ``call`` (0: the input features, ``1 + k``:
        convolution ``k``'s input, ``layers + 1``: the output projection's)."""
        made = DroppedInput(x, self.p, self.seed, self.first + call, None)
        return x * made.scale(global_id.to(x.device), x.size(-1))


def step_masks(model: Any, graph: Any) -> StepMasks | None:
    """The masks of the training step about to run (:obj:`None` without
    dropout), counted on ``graph``'s dropout state as graph-parallel training
    counts them. The seed is drawn from rank 0's generator of the whole world
    at the first step (collective), as graph-parallel training draws it at its
    first dropout, so every stage shares it."""
    if model.dropout == 0.0:
        return None
    state = graph.registry.dropout
    if state.seed is None:
        seed = torch.randint(0, 2**31 - 1, (1,), dtype=torch.int64)
        state.seed = int(distributed.broadcast(seed))
    masks = StepMasks(model.dropout, state.seed, state.calls)
    state.calls += len(model.convs) + 2
    return masks
