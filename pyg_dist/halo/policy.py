"""What every halo policy shares: the interface, the state it keeps per layer,
and fetching the halo of static inputs.

A policy is a small, stateless description (``Stale(every=4)``); what it keeps
for one layer on one graph (cached rows, ages, exchanges in flight) is a
:class:`PolicyState` dataclass it creates with :meth:`HaloPolicy.init_state`,
so one policy object can serve every layer and the state can be checkpointed.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from pyg_dist.halo.cache import HaloCache
from pyg_dist.halo.compress import Codec, get_codec
from pyg_dist.halo.exchange import HaloChannel, exchange_halo
from pyg_dist.halo.shared import shared_key

__all__ = ["HaloPolicy", "HaloRows", "FetchContext", "PolicyState", "transient", "POLICIES"]


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


def transient(default: Any = None) -> Any:
    """A :class:`PolicyState` field that is not checkpointed (exchanges in flight).

    Args:
        default (Any, optional): The field's value in a new state (and after a
            checkpoint is loaded). (default: :obj:`None`)
    """
    return dataclasses.field(default=default, metadata={"transient": True})


@dataclass
class PolicyState:
    """What a policy keeps for one layer between steps. Subclasses add fields:
    :class:`HaloCache` and tensors are checkpointed, :func:`transient` ones are not."""

    def state_dict(self) -> dict[str, Any]:
        out = {}
        for f in dataclasses.fields(self):
            if f.metadata.get("transient"):
                continue
            value = getattr(self, f.name)
            out[f.name] = value.state_dict() if isinstance(value, HaloCache) else value
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for f in dataclasses.fields(self):
            if f.metadata.get("transient") or f.name not in state:
                continue
            value = getattr(self, f.name)
            if isinstance(value, HaloCache):
                value.load_state_dict(state[f.name])
            else:
                setattr(self, f.name, state[f.name])


@dataclass
class FetchContext:
    """One call of a policy: the channel, the layer's ledger name, the
    policy's state for the layer, the cache of the layer's static input, the
    training step, the ledger direction (``"fwd"`` or ``"eval"``), the graph
    (:class:`~pyg_dist.DistEdgeIndex`), the training steps planned in all
    (:obj:`None` when unknown) and whether the layer needs every halo row.

    Args:
        channel (HaloChannel): The graph's channel.
        layer (str): The layer's name in the ledger.
        state (Any): The policy's state for the layer (its
            :class:`PolicyState`).
        static (HaloCache): The cache of the layer's static input.
        step (int): The training step.
        direction (str, optional): The ledger direction, :obj:`"fwd"` or
            :obj:`"eval"`. (default: :obj:`"fwd"`)
        graph (DistEdgeIndex, optional): The graph. (default: :obj:`None`)
        planned_steps (int, optional): The training steps planned in all;
            :obj:`None` when unknown. (default: :obj:`None`)
        complete (bool, optional): Whether the layer needs every halo row
            (a policy that chooses may not choose one that leaves rows out,
            such as :class:`~pyg_dist.halo.Isolated` or
            :class:`~pyg_dist.halo.Sampled`). (default: :obj:`False`)
    """

    channel: HaloChannel
    layer: str
    state: Any
    static: HaloCache
    step: int
    direction: str = "fwd"
    graph: Any = None
    planned_steps: int | None = None
    complete: bool = False

    def exchange(self, x: Tensor, codec: Codec | None, detach: bool = False) -> Tensor:
        """Every halo row of ``x`` (of ``x.detach()`` with ``detach``),
        exchanged exactly and differentiably; on a channel whose node type
        several relations read, once per input for all of them
        (``pyg_dist.halo.shared.SharedExchange``, keyed by ``x``).

        Args:
            x (torch.Tensor): ``[num_owned, F]`` rows.
            codec (Codec, optional): Compression on the wire.
            detach (bool, optional): Exchange ``x.detach()`` (a static
                input's halo, cached by the caller). (default: :obj:`False`)
        """
        source = x.detach() if detach else x
        shared = self.channel.shared
        if shared is None:
            return exchange_halo(source, self.channel, self.layer, codec, self.direction)
        key = shared_key(self.direction, codec) + ("|detached" if detach else "")
        rows = shared.lookup(x, self.layer, key)
        if rows is None:
            rows = exchange_halo(source, self.channel, shared.ledger_name(self.layer), codec,
                                 self.direction)
            shared.remember(x, self.layer, key, rows)
        return rows

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
            backward gradients): :obj:`"fp16"`, :obj:`"bf16"`, :obj:`"int8"`,
            :obj:`"int4"` or :obj:`"int2"` (see :func:`~pyg_dist.halo.get_codec`).
            (default: :obj:`None`)
        cache_inputs (bool, optional): When a layer's input does not require
            grad and is the same unchanged tensor as at its previous call (layer
            0's features), fetch its halo once and reuse it: exact, and free
            after the first fetch. (default: :obj:`True`)
    """

    #: Name in specs (``"stale"`` in ``"stale:4"``).
    name = ""
    #: The argument a spec gives after the colon (``every`` in ``"stale:4"``).
    primary: str | None = None
    #: How help and errors spell the spec (``"stale:K"``); empty: the name,
    #: with ``:PRIMARY`` if it takes one.
    usage = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Registers a subclass that names itself in :data:`POLICIES`, so that
        :func:`~pyg_dist.halo.parse_policy` reads its spelling."""
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")
        if not name:
            return
        known = POLICIES.get(name)
        if known is not None and (known.__module__, known.__qualname__) != (cls.__module__,
                                                                           cls.__qualname__):
            raise ValueError(f"halo policy '{cls.__qualname__}' takes the spec name '{name}' of "
                             f"'{known.__qualname__}'; give it another name")
        POLICIES[name] = cls

    def __init__(self, compress: str | Codec | None = None, cache_inputs: bool = True) -> None:
        self.codec = get_codec(compress)
        self.cache_inputs = cache_inputs

    def init_state(self) -> PolicyState:
        """A new, empty state for one layer on one graph."""
        return PolicyState()

    def fetch(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        """The halo rows of ``x`` (``[num_owned, F]``) for this step."""
        raise NotImplementedError

    def caches_input(self, x: Tensor, ctx: FetchContext, out_width: int | None = None) -> bool:
        """Whether a layer whose input ``x`` did not change since its previous
        call (``out_width``: the layer's output width, if it tells) fetches that
        input's halo once (:meth:`fetch_static`) instead of exchanging rows
        every step: ``cache_inputs``, the same for every layer."""
        return self.cache_inputs

    def fetch_static(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        """The halo of an input that has not changed since the previous call:
        exchanged once (exactly), then served from ``ctx.static``."""
        if ctx.static.matches(x):
            ctx.skip()
            return HaloRows(ctx.static.pull())
        rows = ctx.exchange(x, self.codec, detach=True)
        ctx.static.push(rows, ctx.step)
        return HaloRows(rows)

    def flush(self, state: PolicyState) -> None:  # noqa: B027 - optional hook
        """Completes exchanges still in flight (before checkpoints and at the end)."""

    def options(self) -> dict[str, Any]:
        """The constructor arguments that differ from their defaults, in
        constructor order (what :meth:`__repr__` and
        :meth:`~pyg_dist.halo.HaloPolicy.spec` show)."""
        out: dict[str, Any] = {}
        if self.codec is not None:
            out["compress"] = self.codec.name
        if not self.cache_inputs:
            out["cache_inputs"] = False
        return out

    def spec(self) -> str:
        """The spelling :func:`~pyg_dist.halo.parse_policy` (and the CLI's
        ``--halo``) reads back into an equal policy, every argument included:
        ``name[:primary][,key=value...]``, e.g. ``"adaptive:0.05,max_staleness=4"``."""
        options = self.options()
        head = self.name
        if self.primary is not None and self.primary in options:
            head += f":{_spell(options.pop(self.primary))}"
        return ",".join([head, *(f"{k}={_spell(v)}" for k, v in options.items())])

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and repr(self) == repr(other)

    def __hash__(self) -> int:
        return hash(repr(self))


#: Policy classes by spec name, filled by every subclass of :class:`HaloPolicy`
#: that sets :attr:`HaloPolicy.name`.
POLICIES: dict[str, type[HaloPolicy]] = {}


def _spell(value: Any) -> str:
    """A spec value: ``none``, ``true``/``false``, numbers and bare words."""
    if value is None or isinstance(value, bool):
        return str(value).lower()
    return str(value)
