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

Any policy takes ``compress="fp16" | "bf16" | "int8" | "int4" | "int2"``. A
policy is set per layer (``DistGCNConv(..., halo=Stale(every=4))``) or as the default of a
graph (``DistData.load(..., halo=...)``). Evaluation (``model.eval()``)
exchanges exactly unless the graph's registry sets an ``eval_default``
(``train(..., eval_halo=...)``), so accuracy measures the weights a policy trained.

A policy of your own subclasses :class:`HaloPolicy` (its :meth:`~HaloPolicy.fetch`
gets a :class:`FetchContext` and returns :class:`HaloRows`; what it keeps per
layer is a :class:`PolicyState`) and, with a ``name``, is read by
:func:`parse_policy` at once. The exchange itself (``pyg_dist.halo.exchange``,
``pyg_dist.halo.comm``) is internal.
"""
from pyg_dist.halo.adaptive import Adaptive
from pyg_dist.halo.auto import Auto
from pyg_dist.halo.cache import HaloCache
from pyg_dist.halo.cached import Cached
from pyg_dist.halo.compress import Codec, get_codec
from pyg_dist.halo.exact import Exact
from pyg_dist.halo.exchange import HaloChannel
from pyg_dist.halo.isolated import Isolated
from pyg_dist.halo.layer import HaloRegistry, LayerHalo
from pyg_dist.halo.ledger import Ledger
from pyg_dist.halo.pipelined import Pipelined
from pyg_dist.halo.plan import HaloPlan, SendOperator
from pyg_dist.halo.policy import FetchContext, HaloPolicy, HaloRows, PolicyState, transient
from pyg_dist.halo.sampled import Sampled
from pyg_dist.halo.spec import parse_policy, spellings
from pyg_dist.halo.stale import Stale

__all__ = [
    # the policies
    "Exact",
    "Cached",
    "Stale",
    "Pipelined",
    "Adaptive",
    "Sampled",
    "Isolated",
    "Auto",
    "parse_policy",
    "SPECS",
    # writing a policy
    "HaloPolicy",
    "HaloRows",
    "PolicyState",
    "FetchContext",
    "HaloCache",
    "HaloChannel",
    "HaloPlan",
    "SendOperator",
    "transient",
    "Codec",
    "get_codec",
    # per graph: every layer's halo state, and the record of traffic
    "LayerHalo",
    "HaloRegistry",
    "Ledger",
]

#: How specs spell the policies above (``"stale:K"``, ...), for help texts;
#: ``pyg_dist.halo.spec.spellings()`` adds policies registered since.
SPECS = spellings()
