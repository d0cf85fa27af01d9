"""What every halo policy shares: the interface, per-layer state, and caching
the halo of static inputs.

A policy is a small, stateless description (``Stale(every=4)``); the state it
keeps for one layer on one graph (cached rows, ages, exchanges in flight) lives
in a dict the caller hands it, so one policy object can serve every layer and
the state can be checkpointed.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pyg_dist.halo.compress import Codec, get_codec
from pyg_dist.halo.exchange import HaloChannel, exchange_halo

__all__ = ["HaloPolicy", "HaloRows", "FetchContext", "InputTracker", "fingerprint"]


@dataclass
class HaloRows:
    """What a policy hands the layer.

    Attributes:
        rows: ``[num_halo, F]`` halo rows (rows not present this step are zeros).
        mask: ``[num_halo]`` bool, which halo rows are present; :obj:`None` when
            all are. Layers drop the edges of absent rows and renormalise.
        remote: Whether the policy talks to other ranks at all (``False``: the
            layer must not exchange anything else either, e.g. degrees).
    """

    rows: Tensor
    mask: Tensor | None = None
    remote: bool = True


@dataclass
class FetchContext:
    """One call of a policy: the channel, the layer's ledger name, the
    layer's state on this graph, the training step and whether gradients are wanted."""

    channel: HaloChannel
    layer: str
    state: dict[str, Any]
    step: int
    direction: str = "fwd"

    def skip(self, staleness: int = 0) -> None:
        """Books an exchange the policy did not do."""
        self.channel.ledger.record(self.layer, self.direction, skipped=1, staleness=staleness)

    def used(self, staleness: int) -> None:
        """Books the age of the halo rows in use."""
        self.channel.ledger.record(self.layer, self.direction, staleness=staleness)


class HaloPolicy:
    """Base of the halo policies.

    Args:
        compress (str, optional): Compress halo messages (forward rows and
            backward gradients): :obj:`"fp16"`, :obj:`"bf16"` or :obj:`"int8"`
            (see :mod:`pyg_dist.halo.compress`). (default: :obj:`None`)
        cache_inputs (bool, optional): When a layer's input does not require
            grad and is the same unchanged tensor as at its previous call (layer
            0's features), fetch its halo once and reuse it: exact, and free
            after the first fetch. (default: :obj:`True`)
    """

    #: Name in specs (``"stale"`` in ``"stale:4"``).
    name = ""

    def __init__(self, compress: str | Codec | None = None, cache_inputs: bool = True) -> None:
        self.codec = get_codec(compress)
        self.cache_inputs = cache_inputs

    def fetch(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        """The halo rows of ``x`` (``[num_owned, F]``) for this step."""
        raise NotImplementedError

    def fetch_static(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        """The halo of an input that has not changed since the previous call:
        exchanged once (exactly), then served from the cache."""
        cached = ctx.state.get("static_halo")
        if cached is not None and cached.shape[1:] == x.shape[1:]:
            ctx.skip()
            return HaloRows(cached)
        rows = exchange_halo(x.detach(), ctx.channel, ctx.layer, self.codec, ctx.direction)
        ctx.state["static_halo"] = rows
        ctx.state["static_fingerprint"] = fingerprint(x)
        return HaloRows(rows)

    def flush(self, state: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Completes exchanges still in flight (before checkpoints and at the end)."""

    def arguments(self) -> list[str]:
        """The constructor arguments that differ from their defaults, for repr."""
        args = []
        if self.codec is not None:
            args.append(f"compress='{self.codec.name}'")
        if not self.cache_inputs:
            args.append("cache_inputs=False")
        return args

    def spec(self) -> str:
        """The CLI spelling of this policy (``--halo`` value)."""
        return self.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self.arguments())})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and repr(self) == repr(other)

    def __hash__(self) -> int:
        return hash(repr(self))


class InputTracker:
    """Tells whether a layer's input is the same unchanged tensor as at the
    layer's previous call (held by weak reference; never checkpointed)."""

    def __init__(self) -> None:
        self._last: dict[Any, tuple[weakref.ref, int]] = {}

    def is_static(self, key: Any, x: Tensor) -> bool | None:
        """True/False for a seen key, :obj:`None` the first time a key is seen."""
        if x.requires_grad:
            self._last.pop(key, None)
            return False
        last = self._last.get(key)
        self._last[key] = (weakref.ref(x), x._version)
        if last is None:
            return None
        return last[0]() is x and last[1] == x._version


def fingerprint(x: Tensor) -> list[float]:
    """A content fingerprint of ``x`` (shape, dtype and two weighted sums):
    recognises a static input again after a restart, where identity cannot."""
    flat = x.detach().reshape(-1).double()
    weights = torch.arange(1, flat.numel() + 1, device=flat.device, dtype=torch.float64)
    return [float(flat.numel()), float(x.dim()), float(flat.sum()),
            float((flat * weights.remainder(9973)).sum()), float(hash(str(x.dtype)) % 9973)]
