"""``Sampled(p)``: exchange a random fraction of boundary nodes (BNS-GCN)."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pyg_dist.halo.exchange import Route, exchange_route
from pyg_dist.halo.policy import FetchContext, HaloPolicy, HaloRows

__all__ = ["Sampled", "node_uniform"]


class Sampled(HaloPolicy):
    r"""Boundary-node sampling from `"BNS-GCN: Efficient Full-Graph Training of
    Graph Convolutional Networks with Partition-Parallelism and Random Boundary
    Node Sampling" <https://arxiv.org/abs/2203.10983>`_: each step keeps every
    boundary node with probability ``p`` and exchanges only the kept ones.

    The sample is a hash of (``seed``, step, global node id), so the owner and
    every rank that holds a node as halo agree on it without sending indices.
    Edges from dropped halo nodes are removed for the step and the aggregation
    is normalised over the neighbours actually used (GCN degrees and mean
    counts of the target nodes are recomputed; a kept halo node's own degree is
    its full-graph degree). Gradients flow back for the kept rows.
    ``Sampled(1.0)`` is :class:`Exact`.

    Args:
        p (float): Probability of keeping a boundary node, :math:`0 < p \le 1`.
        seed (int, optional): Seed of the sample. (default: :obj:`0`)
        compress (str, optional): ``"fp16"``, ``"bf16"``, ``"int8"``, ``"int4"``
            or ``"int2"`` messages.
            (default: :obj:`None`)
        cache_inputs (bool, optional): Reuse the halo of static inputs (the
            sample still masks it). (default: :obj:`True`)
    """

    name = "sampled"
    primary = "p"

    def __init__(self, p: float, seed: int = 0, compress: str | None = None,
                 cache_inputs: bool = True) -> None:
        super().__init__(compress, cache_inputs)
        if not 0.0 < float(p) <= 1.0:
            raise ValueError(f"'Sampled' needs 0 < p <= 1 (got {p}); p=1 is Exact()")
        self.p, self.seed = float(p), seed

    def sample(self, ctx: FetchContext) -> tuple[Tensor, Tensor]:
        """This step's kept send rows and kept halo rows (bool masks)."""
        plan = ctx.channel.plan
        keep_send = node_uniform(plan.send_global_id, self.seed, ctx.step) < self.p
        keep_halo = node_uniform(plan.halo_global_id, self.seed, ctx.step) < self.p
        return keep_send, keep_halo

    def fetch(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        plan = ctx.channel.plan
        if plan.pre_aggregated:
            raise ValueError(
                f"'Sampled' samples halo nodes, but layer '{ctx.layer}' runs on a "
                f"pre-aggregated graph whose halo rows include partial sums; pass "
                f"pre_aggregate=False to the layer (or DistData.load) to sample")
        keep_send, keep_halo = self.sample(ctx)
        route = Route(
            plan.send_idx[keep_send],
            _per_peer(plan.send_peer[keep_send], plan.world_size),
            _per_peer(plan.halo_peer[keep_halo], plan.world_size),
        )
        received = exchange_route(x, ctx.channel, ctx.layer, route, self.codec, ctx.direction)
        rows = received.new_zeros(plan.num_halo, *x.shape[1:])
        rows = rows.index_put((keep_halo.nonzero().view(-1),), received)
        return HaloRows(rows, keep_halo)

    def fetch_static(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        full = super().fetch_static(x, ctx)
        _, keep_halo = self.sample(ctx)
        return HaloRows(full.rows * keep_halo.view(-1, *[1] * (x.dim() - 1)), keep_halo)

    def options(self) -> dict[str, Any]:
        seed = {"seed": self.seed} if self.seed else {}
        return {"p": self.p, **seed, **super().options()}


def _per_peer(peer: Tensor, world_size: int) -> list[int]:
    return torch.bincount(peer, minlength=world_size).tolist()


_M32 = 0xFFFFFFFF


def node_uniform(node_id: Tensor, seed: int, step: int) -> Tensor:
    """A uniform number in [0, 1) per node, a pure function of (seed, step, id):
    every rank computes the same value for the same node. (A 32-bit integer
    hash; every product stays below 2^63.)"""
    h = (node_id & _M32) ^ ((seed * 0x9E3779B1 + step * 0x85EBCA77) & _M32)
    for multiplier, shift in ((0x7FEB352D, 15), (0x446CA68B, 16), (0x2C1B3C6D, 16)):
        h = (h ^ (h >> shift)) * multiplier & _M32
    h = h ^ (h >> 16)
    return h.double() / 2.0**32
