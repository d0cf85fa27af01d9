"""``Isolated``: no halo at all; only gradients cross ranks."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pyg_dist.halo.policy import FetchContext, HaloPolicy, HaloRows

__all__ = ["Isolated"]


class Isolated(HaloPolicy):
    r"""Exchanges nothing: every rank aggregates over the edges among its own
    nodes, with degrees (GCN) and neighbour counts (mean) renormalised over
    those edges, exactly as PyG would on the part's subgraph alone. Ranks
    still share one model through the gradient all-reduce of training.
    """

    name = "isolated"

    def __init__(self) -> None:
        super().__init__(compress=None, cache_inputs=False)

    def fetch(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        num_halo = ctx.channel.plan.num_halo
        mask = torch.zeros(num_halo, dtype=torch.bool, device=x.device)
        if num_halo:
            ctx.skip()
        return HaloRows(x.new_zeros(num_halo, *x.shape[1:]), mask, remote=False)

    def options(self) -> dict[str, Any]:
        return {}  # takes no arguments
