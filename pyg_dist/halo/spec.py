"""Policies from their spelling (the CLI's ``--halo``, the JSON line's ``halo``):
``NAME[:PRIMARY][,KEY=VALUE...]``, e.g. ``exact``, ``cached``, ``stale:4``,
``stale:4,stale_grads=drop``, ``pipelined:0.5``, ``adaptive:0.05,max_staleness=4``,
``sampled:0.1,seed=3``, ``isolated``, ``exact,compress=int8``, ``auto``,
``auto,max_staleness=2``.
:meth:`HaloPolicy.spec` writes this spelling; :func:`parse_policy` reads it back
into an equal policy. Every :class:`HaloPolicy` subclass that sets a ``name``
registers itself (:data:`~pyg_dist.halo.policy.POLICIES`), so a policy of
your own is read as soon as its class is defined."""
from __future__ import annotations

import inspect
from typing import Any

from pyg_dist.halo.policy import POLICIES, HaloPolicy

__all__ = ["parse_policy", "spellings"]


def spellings() -> tuple[str, ...]:
    """How a spec spells each registered policy, by name (``"stale:K"``,
    ``"pipelined[:SMOOTHING]"``, ...; :attr:`HaloPolicy.usage`)."""
    return tuple(cls.usage or (name if cls.primary is None else f"{name}:{cls.primary.upper()}")
                 for name, cls in sorted(POLICIES.items()))


def parse_policy(spec: str, compress: str | None = None, cache_inputs: bool = True) -> HaloPolicy:
    """The policy ``spec`` spells; ``compress`` and ``cache_inputs`` apply unless
    the spec sets them itself. ``parse_policy("stale:4", compress="int8")`` is
    ``Stale(every=4, compress="int8")``, and ``parse_policy(p.spec()) == p``.

    Args:
        spec (str): ``NAME[:PRIMARY][,KEY=VALUE...]``, e.g. ``"stale:4"`` or
            ``"cached,compress=int8"``.
        compress (str, optional): The wire compression of a policy that sends
            halo rows; refused by one that sends none. (default: :obj:`None`)
        cache_inputs (bool, optional): Whether a policy that takes the option
            caches the halo of static inputs. (default: :obj:`True`)
    """
    head, *pairs = spec.strip().split(",")
    name, _, primary = head.partition(":")
    cls = POLICIES.get(name)
    if cls is None:
        raise ValueError(f"unknown halo policy '{spec}'; use one of {', '.join(spellings())}")
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    kwargs: dict[str, Any] = {}
    if "compress" in accepted and compress is not None:
        kwargs["compress"] = compress
    if "cache_inputs" in accepted:
        if not cache_inputs:
            kwargs["cache_inputs"] = False
    elif compress is not None:
        raise ValueError(f"bad halo policy '{spec}': '{name}' sends no halo, so it takes no "
                         f"compression")
    if primary:
        if cls.primary is None:
            raise ValueError(f"bad halo policy '{spec}': '{name}' takes no ':' argument")
        kwargs[cls.primary] = _value(primary)
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or key not in accepted:
            raise ValueError(f"bad halo policy '{spec}': '{pair}' is not KEY=VALUE with KEY one "
                             f"of {', '.join(accepted) or '(none)'}")
        kwargs[key] = _value(value)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad halo policy '{spec}': {exc}; use one of {', '.join(spellings())}") \
            from exc


def _value(text: str) -> Any:
    """``none``, ``true``/``false``, an int, a float, or the word itself."""
    lowered = text.strip().lower()
    if lowered in ("none", "true", "false"):
        return {"none": None, "true": True, "false": False}[lowered]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()
