"""Halo exchange: fetching the rows of remote neighbours, behind policies.

========================  =====================================================
policy                    what crosses the network each training step
========================  =====================================================
``Exact()``               every halo row and gradient (static inputs: once)
``Cached()``              the halo once, ever
``Stale(every=k)``        everything, every k-th step; nothing in between
``Pipelined()``           everything, but overlapped with the next step
``Adaptive(tol)``         blocks that drifted past ``tol`` (or got too old)
``Sampled(p)``            a fraction ``p`` of boundary nodes
``Isolated()``            nothing (only the gradient all-reduce)
========================  =====================================================

Any policy takes ``compress="fp16" | "bf16" | "int8"``. A policy is set per
layer (``DistGCNConv(..., halo=Stale(every=4))``) or as the default of a
graph (``DistData.load(..., halo=...)``). Evaluation (``model.eval()``) always
exchanges exactly, so accuracy measures the weights a policy trained.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from torch import Tensor

from pyg_dist.halo.adaptive import Adaptive
from pyg_dist.halo.cached import Cached
from pyg_dist.halo.comm import TRANSPORTS, exchange_rows
from pyg_dist.halo.compress import CODECS, Codec, get_codec
from pyg_dist.halo.dropout import DroppedInput, dropout, dropped_input
from pyg_dist.halo.exact import Exact
from pyg_dist.halo.exchange import HaloChannel, Route, exchange_halo, exchange_route
from pyg_dist.halo.isolated import Isolated
from pyg_dist.halo.ledger import Ledger, LedgerEntry
from pyg_dist.halo.pipelined import Pipelined
from pyg_dist.halo.plan import HaloPlan
from pyg_dist.halo.policy import FetchContext, HaloPolicy, HaloRows, InputTracker, fingerprint
from pyg_dist.halo.sampled import Sampled
from pyg_dist.halo.spec import SPECS, parse_policy
from pyg_dist.halo.stale import Stale

__all__ = [
    "Exact",
    "Cached",
    "Stale",
    "Pipelined",
    "Adaptive",
    "Sampled",
    "Isolated",
    "HaloPolicy",
    "HaloRows",
    "parse_policy",
    "SPECS",
    "CODECS",
    "Codec",
    "get_codec",
    "LayerHalo",
    "dropout",
    "exchange_halo",
    "exchange_route",
    "exchange_rows",
    "HaloChannel",
    "HaloPlan",
    "Route",
    "Ledger",
    "LedgerEntry",
    "TRANSPORTS",
]


class LayerHalo:
    r"""The halo of one layer call: resolves the layer's policy (its own
    ``halo``, else the graph's default, else :class:`Exact`), its state on
    this graph, and whether its input is static.

    Layers use it in two steps: :meth:`is_static` on the raw input (to decide
    whether to aggregate before transforming), then :meth:`fetch`. An input
    made by :func:`dropout` from a static tensor counts as static: the halo of
    the source is cached and the shared mask applied to it.
    """

    def __init__(self, edge_index: Any, layer: Any) -> None:
        channel = edge_index.channel
        training = bool(getattr(layer, "training", True))
        policy = getattr(layer, "halo", None) or edge_index.halo or Exact()
        if not training:  # evaluation is exact, whatever trained the weights
            policy = Exact(compress=None, cache_inputs=policy.cache_inputs)
        self.policy: HaloPolicy = policy
        self.name = channel.ledger.layer_name(layer)
        self.key = (self.name, "train" if training else "eval")
        self.state = edge_index.halo_states.setdefault(self.key, {})
        self.state["_policy"] = policy  # for flushing exchanges in flight
        self.tracker: InputTracker = edge_index.input_tracker
        self.ctx = FetchContext(channel, self.name, self.state, channel.ledger.step,
                                "fwd" if training else "eval")
        self.edge_index = edge_index
        self.dropped: DroppedInput | None = None

    def is_static(self, x: Tensor) -> bool:
        """Whether ``x`` is the unchanged, grad-free input of this layer's
        previous call (or, right after a restart, has the content of the input
        whose halo the restored state caches) and the policy caches such inputs."""
        dropped = dropped_input(x, self.edge_index)
        source = x if dropped is None else dropped.source
        seen = self.tracker.is_static(self.key, source)
        if seen is None and "static_fingerprint" in self.state:
            seen = self.state["static_fingerprint"] == fingerprint(source)
        static = bool(seen) and self.policy.cache_inputs
        if not static:
            self.state.pop("static_halo", None)
            self.state.pop("static_fingerprint", None)
        self.dropped = dropped if static else None
        return static

    def fetch(self, x: Tensor, static: bool = False) -> HaloRows:
        """The halo rows of ``x`` (``[num_owned, F]``) under the policy."""
        if static and self.dropped is not None:
            fetched = self.policy.fetch_static(self.dropped.source, self.ctx)
            return replace(fetched, rows=self.dropped.halo(fetched.rows))
        if static:
            return self.policy.fetch_static(x, self.ctx)
        return self.policy.fetch(x, self.ctx)
