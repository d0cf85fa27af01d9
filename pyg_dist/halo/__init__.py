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
``Auto()``                per layer, what a cost model measured in the first
                          steps picks (exact, or stale + int8; caching or not);
                          nothing where under 5% of neighbours are remote
========================  =====================================================

Any policy takes ``compress="fp16" | "bf16" | "int8"``. A policy is set per
layer (``DistGCNConv(..., halo=Stale(every=4))``) or as the default of a
graph (``DistData.load(..., halo=...)``). Evaluation (``model.eval()``)
exchanges exactly unless the graph's registry sets an ``eval_default``
(``train(..., eval_halo=...)``), so accuracy measures the weights a policy trained.
"""
from pyg_dist.halo.adaptive import Adaptive
from pyg_dist.halo.auto import Auto
from pyg_dist.halo.cache import HaloCache
from pyg_dist.halo.cached import Cached
from pyg_dist.halo.comm import TRANSPORTS, exchange_rows
from pyg_dist.halo.compress import CODECS, Codec, get_codec
from pyg_dist.halo.dropout import dropout
from pyg_dist.halo.exact import Exact
from pyg_dist.halo.exchange import HaloChannel, Route, exchange_halo, exchange_route
from pyg_dist.halo.isolated import Isolated
from pyg_dist.halo.layer import HaloRegistry, LayerHalo
from pyg_dist.halo.ledger import Ledger, LedgerEntry
from pyg_dist.halo.pipelined import Pipelined
from pyg_dist.halo.plan import HaloPlan
from pyg_dist.halo.policy import FetchContext, HaloPolicy, HaloRows, PolicyState
from pyg_dist.halo.sampled import Sampled
from pyg_dist.halo.spec import parse_policy, spellings
from pyg_dist.halo.stale import Stale

__all__ = [
    "Exact",
    "Cached",
    "Stale",
    "Pipelined",
    "Adaptive",
    "Sampled",
    "Isolated",
    "Auto",
    "HaloPolicy",
    "HaloRows",
    "PolicyState",
    "FetchContext",
    "HaloCache",
    "parse_policy",
    "spellings",
    "CODECS",
    "Codec",
    "get_codec",
    "LayerHalo",
    "HaloRegistry",
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
