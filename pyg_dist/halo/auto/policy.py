r""":class:`Auto`, the policy: per layer, from warm-up through the decision to
the chosen policy (the cost model is :mod:`~pyg_dist.halo.auto.cost`, the
measurements :mod:`~pyg_dist.halo.auto.probes`)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from pyg_dist.halo.auto import probes
from pyg_dist.halo.auto.cost import CostModel
from pyg_dist.halo.choices import HaloChoices, LayerChoice, Link
from pyg_dist.halo.exact import Exact
from pyg_dist.halo.isolated import Isolated
from pyg_dist.halo.policy import FetchContext, HaloPolicy, HaloRows, PolicyState, transient
from pyg_dist.halo.reuse import ReuseState
from pyg_dist.halo.spec import parse_policy
from pyg_dist.halo.stale import Stale
from pyg_dist.runtime import distributed

__all__ = ["Auto", "AutoState", "DEFAULT_EPOCHS"]

#: Planned steps when neither :func:`~pyg_dist.train.train` nor ``epochs`` says.
DEFAULT_EPOCHS = 200


@dataclass
class AutoState(PolicyState):
    """One layer under :class:`Auto`: the width of the rows it exchanged
    while warming up, the width of its static input (0 if none), the chosen
    policy's spec (empty while warming up), whether the static input's halo
    is cached, the spec of the policy fetching now (the warm-up's, then the
    choice) with its state, and the policy of the decision step, which
    refreshes every row and delivers the warm-up's collected gradients
    (:obj:`None` when the choice continues the warm-up's state)."""

    width: int = 0
    static_width: int = 0
    choice: str = ""
    cache_input: bool = False
    running: str = ""
    inner: HaloPolicy | None = transient()
    inner_state: PolicyState | None = transient()
    handover: HaloPolicy | None = transient()

    def start(self, policy: HaloPolicy, state: PolicyState | None = None) -> None:
        """Fetches with ``policy`` from now on, with ``state`` (default: a new one)."""
        self.inner, self.running = policy, policy.spec()
        self.inner_state = policy.init_state() if state is None else state

    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()
        out["inner_state"] = None if self.inner_state is None else self.inner_state.state_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.running:
            self.start(parse_policy(self.running))
            assert self.inner_state is not None, "start() made it"
            if state.get("inner_state") is not None:
                self.inner_state.load_state_dict(state["inner_state"])


class Auto(HaloPolicy):
    r"""Chooses, per layer, between caching a static input's halo and
    exchanging transformed rows, the staleness and the compression, from the
    partition's halo sizes, the layer widths, the planned steps and the
    bandwidth and compute measured in the first steps (see
    ``pyg_dist.halo.auto`` for the cost model). The choice is the same on
    every rank, and is recorded in the graph's ledger
    (:attr:`Ledger.choices <pyg_dist.halo.Ledger.choices>`).

    Args:
        epochs (int, optional): Planned training steps; :obj:`None` takes them
            from :func:`~pyg_dist.train.train` (else :obj:`200`).
            (default: :obj:`None`)
        warmup (int, optional): Steps measured before choosing
            (:math:`\ge 2`), run with the compression and reused rows (see
            ``pyg_dist.halo.auto``). (default: :obj:`3`)
        max_staleness (int, optional): Largest staleness it may choose
            (1: never stale). (default: :obj:`4`)
        negligible (float, optional): Exchange time, as a fraction of a step's
            compute, that counts as free: a layer below it is left exact, and
            compression and staleness are added until it is below it.
            (default: :obj:`0.01`)
        compress (str, optional): The compression it may choose; :obj:`None`
            for none. (default: :obj:`"int8"`)
        cache_inputs (bool, optional): Whether it may cache the halo of static
            inputs. (default: :obj:`True`)
        isolate_below (float, optional): Share of the average node's
            in-neighbours that live on other ranks under which the whole graph
            is trained :class:`Isolated`, except the layers that need every
            halo row (``complete_halo``, e.g.
            :class:`~pyg_dist.nn.DistHGTConv`), which choose as on any other
            graph; :obj:`0` never isolates. (default: :obj:`0.05`)
    """

    name = "auto"

    def __init__(self, epochs: int | None = None, warmup: int = 3, max_staleness: int = 4,
                 negligible: float = 0.01, compress: str | None = "int8",
                 cache_inputs: bool = True, isolate_below: float = 0.05) -> None:
        super().__init__(compress, cache_inputs)
        if not 0.0 <= isolate_below < 1.0:
            raise ValueError(f"'Auto' needs 0 <= isolate_below < 1 (got {isolate_below}); "
                             f"0 never isolates")
        if warmup < 2:
            raise ValueError(f"'Auto' needs warmup >= 2 (got {warmup}): the first step is not "
                             f"representative, the second is measured")
        if max_staleness < 1:
            raise ValueError(f"'Auto' needs max_staleness >= 1 (got {max_staleness})")
        if epochs is not None and epochs < 1:
            raise ValueError(f"'Auto' needs epochs >= 1 or None (got {epochs})")
        self.epochs, self.warmup = epochs, warmup
        self.max_staleness, self.negligible = max_staleness, negligible
        self.isolate_below = float(isolate_below)
        #: The cost model with this policy's arguments.
        self.cost = CostModel(negligible, max_staleness, self.codec)

    def init_state(self) -> AutoState:
        return AutoState()

    def caches_input(self, x: Tensor, ctx: FetchContext, out_width: int | None = None) -> bool:
        state: AutoState = ctx.state
        state.static_width = x.size(-1)
        if (not state.choice and self.cache_inputs and out_width is not None
                and state.static_width <= out_width and ctx.direction == "fwd"):
            self.cache_from_start(ctx)  # aggregating first costs the same: no trade-off
        return state.cache_input

    def cache_from_start(self, ctx: FetchContext) -> None:
        """Caches the static input of a layer no narrower than it at once, and
        books the choice (collective, like :meth:`decide`)."""
        state: AutoState = ctx.state
        state.cache_input, state.choice = True, "exact"
        state.start(Exact())
        rows = probes.halo_rows(ctx)
        _book(ctx, cache_input=True, steps=1,  # the link is not measured yet: no seconds
              predicted_bytes=int(rows["sent_fwd"] * self.cost.static_row(state.static_width)),
              predicted_seconds=0.0)

    def fetch(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        state: AutoState = ctx.state
        record = _record(ctx)
        if ctx.direction == "fwd" and record.link is None:
            record.starts.setdefault(ctx.step, time.perf_counter())
        if not state.choice:
            if ctx.direction != "fwd":
                return Exact(cache_inputs=False).fetch(x, ctx)
            if state.inner is None and not ctx.complete and self.isolates(ctx):
                self.isolate(ctx)
            elif ctx.step < self.warmup:
                if state.inner is None or state.inner_state is None:
                    state.start(self.warmup_policy(x.size(-1)))
                state.width = x.size(-1)
            else:
                self.decide(ctx)
        assert state.inner is not None and state.inner_state is not None, "started above"
        policy = state.inner
        if state.handover is not None and ctx.direction == "fwd":
            policy, state.handover = state.handover, None
        inner = FetchContext(ctx.channel, ctx.layer, state.inner_state, ctx.static, ctx.step,
                             ctx.direction, ctx.graph, ctx.planned_steps, ctx.complete)
        rows = policy.fetch(x, inner)
        if policy is not state.inner:  # the decision step refreshed through the warm-up state
            state.start(state.inner)
        return rows

    def isolates(self, ctx: FetchContext) -> bool:
        """Whether the graph's halo is under ``isolate_below`` of the average
        node's in-neighbours (collective the first time per graph: every rank
        asks at its first layer's first step)."""
        if self.isolate_below <= 0.0:
            return False
        record = _record(ctx)
        if record.halo_share is None:
            record.halo_share = probes.halo_share(ctx)
        return record.halo_share < self.isolate_below

    def isolate(self, ctx: FetchContext) -> None:
        """Trains this layer :class:`Isolated` from now on, and books the choice."""
        state: AutoState = ctx.state
        state.start(Isolated())
        state.choice = state.running
        share = _record(ctx).halo_share
        assert share is not None, "isolates() measured it"
        _book(ctx, cache_input=False, steps=self.remaining(ctx), halo_share=round(share, 6),
              predicted_bytes=0, predicted_seconds=0.0)

    def remaining(self, ctx: FetchContext) -> int:
        """Planned training steps from this one on (at least 1)."""
        return max(1, (ctx.planned_steps or self.epochs or DEFAULT_EPOCHS) - ctx.step)

    def warmup_policy(self, width: int) -> Stale:
        """What a layer exchanging rows of ``width`` runs while warming up."""
        return Stale(min(self.warmup, self.max_staleness), compress=self.cost.codec_for(width),
                     cache_inputs=False)

    def fetch_static(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        # fetched once, with the compression where it makes rows smaller
        return Exact(compress=self.cost.codec_for(x.size(-1))).fetch_static(x, ctx)

    def flush(self, state: PolicyState) -> None:
        assert isinstance(state, AutoState), "Auto keeps an AutoState"
        if state.inner is not None and state.inner_state is not None:
            state.inner.flush(state.inner_state)

    def decide(self, ctx: FetchContext) -> None:
        """Chooses this layer's policy (collective: every rank decides the
        same layer at the same step) and books the choice in the ledger."""
        state: AutoState = ctx.state
        link = self.measure(ctx)
        steps = self.remaining(ctx)
        rows = probes.halo_rows(ctx)
        codec, every = self.cost.exchange_plan(state.width, rows, link)
        cache = False
        if self.cache_inputs and state.static_width > 0:
            widths = sorted({state.static_width, state.width})
            spmm = probes.time_spmm(ctx, widths) if len(widths) > 1 else {}
            cache = self.cost.cache_pays(state.static_width, state.width, rows, link, codec,
                                         every, steps, spmm)
        state.cache_input = cache
        caching = cache or not state.static_width  # the option matters for static inputs only
        chosen: HaloPolicy
        if cache:
            chosen = Exact()
        elif every == 1:
            chosen = Exact(compress=codec, cache_inputs=caching)
        else:
            chosen = Stale(every, compress=codec, cache_inputs=caching)
        warm = state.inner_state
        first = 0  # steps until the chosen policy's first refresh
        if (isinstance(chosen, Stale) and isinstance(warm, ReuseState)
                and warm.halo.rows is not None):
            state.start(chosen, warm)  # the warm-up's rows and collected gradients carry on
            first = max(0, every - warm.age(ctx.step, every))
        else:  # this step refreshes every row through the warm-up's state, then the choice
            state.handover = Stale(1, compress=None if cache else codec, cache_inputs=False)
            state.inner = chosen
        state.choice = chosen.spec()
        if cache:  # this step still exchanges transformed rows, then the input's halo once
            this_step = self.cost.predict(rows, state.width, None, 1, 1, link, once=False)
            once = self.cost.predict(rows, state.static_width,
                                     self.cost.codec_for(state.static_width), 1, steps, link,
                                     once=True)
            predicted = {k: this_step[k] + once[k] for k in once}
        else:
            predicted = self.cost.predict(rows, state.width, codec, every, steps, link,
                                          once=False, first=first)
        _book(ctx, cache_input=cache, steps=steps, **predicted)

    def measure(self, ctx: FetchContext) -> dict[str, float]:
        """Latency (s per exchange), bandwidth (bytes/s) and compute (s per
        step), reduced over the ranks; measured once per graph (the first
        layer to decide measures, the others reuse it). Collective."""
        record = _record(ctx)
        if record.link is None:
            latency, bandwidth = probes.probe_link(ctx, ctx.state.width)
            wall, moved, exchanges = probes.warmup_steps(ctx.channel.ledger, record.starts,
                                                         ctx.step)
            busy = wall - exchanges * latency - moved / bandwidth
            compute = distributed.all_reduce_values([busy], "max", ctx.channel.group)[0]
            record.link = Link(latency, bandwidth, max(compute, 1e-6), ctx.step)
        return record.link.model()

    def options(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        defaults = {"epochs": None, "warmup": 3, "max_staleness": 4, "negligible": 0.01}
        for key, default in defaults.items():
            if getattr(self, key) != default:
                out[key] = getattr(self, key)
        codec = None if self.codec is None else self.codec.name
        if codec != "int8":
            out["compress"] = codec
        if not self.cache_inputs:
            out["cache_inputs"] = False
        if self.isolate_below != 0.05:
            out["isolate_below"] = self.isolate_below
        return out


def _record(ctx: FetchContext) -> HaloChoices:
    """The graph's record of choices (one per graph, shared by its layers)."""
    return ctx.channel.ledger.choices


def _book(ctx: FetchContext, **choice: Any) -> None:
    """Books the layer's choice (``ctx.state.choice``, from this step) with
    the fields of :class:`~pyg_dist.halo.choices.LayerChoice` in ``choice``."""
    _record(ctx).layers[ctx.layer] = LayerChoice(ctx.state.choice, ctx.step, **choice)
