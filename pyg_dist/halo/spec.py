"""Policies from their CLI spelling: ``exact``, ``cached``, ``stale:K``,
``pipelined``, ``adaptive:TOL``, ``sampled:P``, ``isolated``."""
from __future__ import annotations

from pyg_dist.halo.adaptive import Adaptive
from pyg_dist.halo.cached import Cached
from pyg_dist.halo.exact import Exact
from pyg_dist.halo.isolated import Isolated
from pyg_dist.halo.pipelined import Pipelined
from pyg_dist.halo.policy import HaloPolicy
from pyg_dist.halo.sampled import Sampled
from pyg_dist.halo.stale import Stale

__all__ = ["parse_policy", "SPECS"]

SPECS = ("exact", "cached", "stale:K", "pipelined", "adaptive:TOL", "sampled:P", "isolated")


def parse_policy(spec: str, compress: str | None = None, cache_inputs: bool = True) -> HaloPolicy:
    """``parse_policy("stale:4", compress="int8")`` is ``Stale(every=4, compress="int8")``."""
    name, _, arg = spec.partition(":")
    fix = f"use one of {', '.join(SPECS)}"
    try:
        if name == "exact" and not arg:
            return Exact(compress=compress, cache_inputs=cache_inputs)
        if name == "cached" and not arg:
            return Cached(compress=compress, cache_inputs=cache_inputs)
        if name == "stale" and arg:
            return Stale(every=int(arg), compress=compress, cache_inputs=cache_inputs)
        if name == "pipelined":
            smoothing = float(arg) if arg else None
            return Pipelined(smoothing, compress=compress, cache_inputs=cache_inputs)
        if name == "adaptive" and arg:
            return Adaptive(tol=float(arg), compress=compress, cache_inputs=cache_inputs)
        if name == "sampled" and arg:
            return Sampled(p=float(arg), compress=compress, cache_inputs=cache_inputs)
        if name == "isolated" and not arg:
            if compress is not None:
                raise ValueError("'isolated' sends no halo, so it takes no compression")
            return Isolated()
    except ValueError as exc:
        raise ValueError(f"bad halo policy '{spec}': {exc}") from exc
    raise ValueError(f"unknown halo policy '{spec}'; {fix}")
