r"""``Auto()``: each layer's halo policy chosen by a cost model from what the
first training steps measure.

A graph cut so well that its halo holds under ``isolate_below`` (5%) of the
average node's in-neighbours (over all ranks; known from the partition, before
anything is sent) is trained :class:`Isolated`: every exchange would cost
latency and a wait for the slowest rank for a few percent of each
neighbourhood. (Cora's METIS cuts at 2 and 4 parts leave 2.8% and 4.3% of the
neighbours remote, and isolated training stays within a point of exact.)
Otherwise every layer chooses for itself, as follows.

A layer whose static input (layer 0's features) is no wider than its output
caches that input's halo from the first step: aggregating first costs the
same, and nothing crosses the network after the one fetch. For ``warmup``
steps every other layer runs the most frugal option it may choose: the halo
exchanged at step 0 with the compression, then reused (:class:`Stale` with
``every = min(warmup, max_staleness)``; a layer with a wider static input
exchanges its transformed rows), so measuring costs a short run nothing and
the compute of a step is timed without exchanges in it. Then, at the same step
on every rank and from numbers reduced over all ranks:

* **the link**: latency :math:`\alpha` per exchange and bandwidth
  :math:`\beta`, from timed exchanges of narrow and wide rows along the halo
  plan, all ranks starting together (booked in the ledger as ``auto/probe``);
* **compute**: the wall time of a warm-up step minus what its exchanges take
  by that link model, on the slowest rank;
* **aggregation**: one timed :func:`~pyg_dist.ops.spmm` over the rank's own
  graph per width in question.

For every layer, the exchanges of one step (rows forward, gradients backward)
cost :math:`\tau = 2\alpha + R\, b(F, c) / \beta`: :math:`R` the rows the
busiest rank sends and receives, :math:`b` the bytes of a row of width
:math:`F` under compression :math:`c`. A layer whose :math:`\tau` is under
``negligible`` of the step's compute stays exact. Otherwise it gets the
compression (``compress``, int8 by default, when it makes rows smaller) and the
smallest staleness :math:`k \le` ``max_staleness`` with
:math:`\tau / k` under ``negligible`` of compute (:class:`Stale` with
``every=k``).

A layer with a static input chooses between fetching that input's halo once
(width :math:`F_{in}`) and aggregating it every step, or exchanging its
transformed rows (width :math:`F_{out}`) every step with the staleness and
compression above; over the :math:`E` remaining planned steps:

.. math::
    T_{cache} = \alpha + \frac{R_{fwd} \cdot 4 F_{in}}{\beta} + E\, t_{spmm}(F_{in}),
    \qquad
    T_{exchange} = E \left(\frac{\tau(F_{out})}{k} + 2\, t_{spmm}(F_{out})\right)

and picks the smaller. A chosen staleness continues the warm-up's schedule
(the rows reused at the decision are as old as they would be under the chosen
:class:`Stale` from step 0); a choice that exchanges every step refreshes the
rows at the decision, and the halo gradients collected in warm-up reach their
owners with that step's exchange or the next refresh. The choice, with
predicted bytes (all ranks) and waiting time (average rank), goes into the
ledger's notes (``data.ledger.notes``); :func:`~pyg_dist.train.train` adds
what was measured.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pyg_dist.halo.exact import Exact
from pyg_dist.halo.isolated import Isolated
from pyg_dist.halo.ledger import APART
from pyg_dist.halo.policy import FetchContext, HaloPolicy, HaloRows, PolicyState, transient
from pyg_dist.halo.reuse import ReuseState
from pyg_dist.halo.stale import Stale

__all__ = ["Auto", "AutoState", "DEFAULT_EPOCHS"]

#: Planned steps when neither :func:`~pyg_dist.train.train` nor ``epochs`` says.
DEFAULT_EPOCHS = 200
_NOTE = "auto"  # the graph-wide note; per layer: "auto/<layer>"
#: Most bytes the busiest rank moves in the wide probe exchange (~8 ms at
#: 1 Gbit/s); below it the probe is one forward exchange of the layer. The
#: probe's traffic counts, and should stay small next to a short run's frugal
#: choice: on Cora's 200 epochs the probes add 5% to ``stale:4`` + int8's bytes.
_PROBE_BYTES = 2**20


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
            from pyg_dist.halo.spec import parse_policy

            self.start(parse_policy(self.running))
            assert self.inner_state is not None, "start() made it"
            if state.get("inner_state") is not None:
                self.inner_state.load_state_dict(state["inner_state"])


class Auto(HaloPolicy):
    r"""Chooses, per layer, between caching a static input's halo and
    exchanging transformed rows, the staleness and the compression, from the
    partition's halo sizes, the layer widths, the planned steps and the
    bandwidth and compute measured in the first steps (see the module
    docstring for the cost model). The choice is the same on every rank.

    Args:
        epochs (int, optional): Planned training steps; :obj:`None` takes them
            from :func:`~pyg_dist.train.train` (else :obj:`200`).
            (default: :obj:`None`)
        warmup (int, optional): Steps measured before choosing
            (:math:`\ge 2`), run with the compression and reused rows (see
            the module docstring). (default: :obj:`3`)
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
            is trained :class:`Isolated`; :obj:`0` never isolates.
            (default: :obj:`0.05`)
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
        rows = _rows(ctx)
        _book(ctx, cache_input=True, steps=1,  # the link is not measured yet: no seconds
              predicted_bytes=int(rows["sent_fwd"] * self._static_row(state.static_width)),
              predicted_seconds=0.0)

    def fetch(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        state: AutoState = ctx.state
        if ctx.direction == "fwd":
            _note(ctx).setdefault("starts", {}).setdefault(ctx.step, time.perf_counter())
        if not state.choice:
            if ctx.direction != "fwd":
                return Exact(cache_inputs=False).fetch(x, ctx)
            if state.inner is None and self.isolates(ctx):
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
                             ctx.direction, ctx.graph, ctx.planned_steps)
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
        note = _note(ctx)
        if "halo_share" not in note:
            note["halo_share"] = _halo_share(ctx)
        return note["halo_share"] < self.isolate_below

    def isolate(self, ctx: FetchContext) -> None:
        """Trains this layer :class:`Isolated` from now on, and books the choice."""
        state: AutoState = ctx.state
        state.start(Isolated())
        state.choice = state.running
        _book(ctx, cache_input=False, steps=self.remaining(ctx),
              halo_share=round(_note(ctx)["halo_share"], 6), predicted_bytes=0,
              predicted_seconds=0.0)

    def remaining(self, ctx: FetchContext) -> int:
        """Planned training steps from this one on (at least 1)."""
        return max(1, (ctx.planned_steps or self.epochs or DEFAULT_EPOCHS) - ctx.step)

    def warmup_policy(self, width: int) -> Stale:
        """What a layer exchanging rows of ``width`` runs while warming up."""
        return Stale(min(self.warmup, self.max_staleness), compress=self._codec_for(width),
                     cache_inputs=False)

    def _codec_for(self, width: int) -> str | None:
        """The compression, where it makes rows of ``width`` smaller."""
        if self.codec is None or self.codec.row_bytes(width) >= 4 * width:
            return None
        return self.codec.name

    def fetch_static(self, x: Tensor, ctx: FetchContext) -> HaloRows:
        # fetched once, with the compression where it makes rows smaller
        return Exact(compress=self._codec_for(x.size(-1))).fetch_static(x, ctx)

    def _static_row(self, width: int) -> int:
        """Bytes of one row of a static input of ``width`` as it is fetched."""
        return _row_bytes(width, self._codec_for(width))

    def flush(self, state: PolicyState) -> None:
        assert isinstance(state, AutoState), "Auto keeps an AutoState"
        if state.inner is not None and state.inner_state is not None:
            state.inner.flush(state.inner_state)

    # -- the cost model ----------------------------------------------------------------------

    def decide(self, ctx: FetchContext) -> None:
        """Chooses this layer's policy (collective: every rank decides the
        same layer at the same step) and books the choice in the ledger."""
        state: AutoState = ctx.state
        link = self.measure(ctx)
        steps = self.remaining(ctx)
        rows = _rows(ctx)
        codec, every = self.exchange_plan(state.width, rows, link)
        cache = False
        if self.cache_inputs and state.static_width > 0:
            widths = sorted({state.static_width, state.width})
            spmm = _time_spmm(ctx, widths) if len(widths) > 1 else {}
            cache = self.cache_pays(state.static_width, state.width, rows, link, codec, every,
                                    steps, spmm)
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
            this_step = self.predict(rows, state.width, None, 1, 1, link, once=False)
            once = self.predict(rows, state.static_width, self._codec_for(state.static_width),
                                1, steps, link, once=True)
            predicted = {k: this_step[k] + once[k] for k in once}
        else:
            predicted = self.predict(rows, state.width, codec, every, steps, link, once=False,
                                     first=first)
        _book(ctx, cache_input=cache, steps=steps, **predicted)

    def exchange_plan(self, width: int, rows: dict[str, float],
                      link: dict[str, float]) -> tuple[str | None, int]:
        """The compression and staleness for exchanging rows of ``width``."""
        budget = self.negligible * link["compute"]
        if _tau(rows["moved"], _row_bytes(width, None), link) <= budget:
            return None, 1
        codec = self._codec_for(width)
        tau = _tau(rows["moved"], _row_bytes(width, codec), link)
        needed = max(1, math.ceil(tau / max(budget, 1e-12)))
        return codec, min(self.max_staleness, 1 << (needed - 1).bit_length())

    def cache_pays(self, static_width: int, width: int, rows: dict[str, float],
                   link: dict[str, float], codec: str | None, every: int, steps: int,
                   spmm: dict[int, float]) -> bool:
        """Whether fetching a static input of ``static_width`` once and
        aggregating it every step beats exchanging transformed rows of
        ``width`` (with ``codec`` every ``every`` steps) for the remaining
        ``steps``; ``spmm`` holds seconds of one aggregation per width. A
        static input no wider than the transformed rows is always cached;
        when both take the same time, within ``negligible`` of the run's
        compute, the one that sends fewer bytes wins."""
        if static_width <= width:
            return True
        static_row = self._static_row(static_width)
        once = _tau(rows["fwd"], static_row, link, exchanges=1)
        cache = once + steps * spmm[static_width]
        tau = _tau(rows["moved"], _row_bytes(width, codec), link)
        exchange = steps * (tau / every + 2 * spmm[width])
        if abs(cache - exchange) > self.negligible * link["compute"] * steps:
            return cache < exchange
        # as fast either way, within the negligible share of the run: fewer bytes
        cached_bytes = rows["sent_fwd"] * static_row
        exchanged_bytes = (math.ceil(steps / every) * (rows["sent_fwd"] + rows["sent_bwd"])
                           * _row_bytes(width, codec))
        return cached_bytes <= exchanged_bytes

    def predict(self, rows: dict[str, float], width: int, codec: str | None, every: int,
                steps: int, link: dict[str, float], once: bool,
                first: int = 0) -> dict[str, float]:
        """Bytes all ranks will send and seconds the average rank will wait
        over ``steps`` steps whose first refresh is ``first`` steps away."""
        if once:
            sent = rows["sent_fwd"] * _row_bytes(width, codec)
            seconds = _tau(rows["fwd"], _row_bytes(width, codec), link, exchanges=1)
            return {"predicted_bytes": int(sent), "predicted_seconds": round(seconds, 6)}
        refreshes = math.ceil(max(0, steps - first) / every)
        row = _row_bytes(width, codec)
        sent = refreshes * (rows["sent_fwd"] + rows["sent_bwd"]) * row
        return {"predicted_bytes": int(sent),
                "predicted_seconds": round(refreshes * _tau(rows["moved"], row, link), 6)}

    def measure(self, ctx: FetchContext) -> dict[str, float]:
        """Latency (s per exchange), bandwidth (bytes/s) and compute (s per
        step), reduced over the ranks; measured once per graph (the first
        layer to decide measures, the others reuse it). Collective."""
        note = _note(ctx)
        if "bandwidth" not in note:
            from pyg_dist import distributed

            latency, bandwidth = _probe_link(ctx)
            wall, moved, exchanges = _warmup_steps(ctx, note["starts"])
            busy = wall - exchanges * latency - moved / bandwidth
            compute = distributed.all_reduce_values([busy], "max", ctx.channel.group)[0]
            note.update(latency=latency, bandwidth=bandwidth, compute=max(compute, 1e-6),
                        decided_at=ctx.step)
        return {k: note[k] for k in ("latency", "bandwidth", "compute")}

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


def _note(ctx: FetchContext) -> dict[str, Any]:
    return ctx.channel.ledger.notes.setdefault(_NOTE, {})


def _book(ctx: FetchContext, **note: Any) -> None:
    """Books the layer's choice (``ctx.state.choice``, from this step) with
    ``note`` (``cache_input``, ``steps``, predicted bytes and seconds, ...)."""
    ctx.channel.ledger.notes[f"{_NOTE}/{ctx.layer}"] = {
        "choice": ctx.state.choice, "from_step": ctx.step, **note}


def _halo_share(ctx: FetchContext) -> float:
    """The share of a node's in-neighbours held as halo, averaged over the
    nodes of all ranks that have any (from the graph alone: nothing is
    exchanged but the two sums)."""
    from pyg_dist import distributed

    graph = ctx.graph
    remote = (graph.col >= graph.num_owned).to(torch.float64).cumsum(0)
    remote = torch.cat([remote.new_zeros(1), remote])
    halo = remote[graph.rowptr[1:]] - remote[graph.rowptr[:-1]]
    degree = (graph.rowptr[1:] - graph.rowptr[:-1]).to(torch.float64)
    some = degree > 0
    total, nodes = distributed.all_reduce_values(
        [float((halo[some] / degree[some]).sum()), float(some.sum())], "sum", ctx.channel.group)
    return total / max(nodes, 1.0)


def _rows(ctx: FetchContext) -> dict[str, float]:
    """Halo rows per exchange: the most any rank moves (sends plus receives,
    forward and backward) or receives forward, and the sum sent over ranks."""
    from pyg_dist import distributed

    plan, group = ctx.channel.plan, ctx.channel.group
    top = distributed.all_reduce_values([2.0 * (plan.num_send + plan.num_halo),
                                         float(plan.num_send + plan.num_halo)], "max", group)
    total = distributed.all_reduce_values([float(plan.num_send), float(plan.num_halo)],
                                          "sum", group)
    return {"moved": top[0], "fwd": top[1], "sent_fwd": total[0], "sent_bwd": total[1]}


def _warmup_steps(ctx: FetchContext, starts: dict[int, float]) -> tuple[float, float, float]:
    """This rank's wall seconds, bytes moved (sent and received) and
    exchanges per step, over the warm-up steps after the first."""
    first, last = 1, ctx.step
    moved = exchanges = 0.0
    for (step, _, direction), e in ctx.channel.ledger.entries.items():
        if first <= step < last and direction not in APART:
            moved += e.bytes_sent + e.bytes_recv
            exchanges += e.exchanges
    steps = last - first
    return (starts[last] - starts[first]) / steps, moved / steps, exchanges / steps


def _probe_link(ctx: FetchContext) -> tuple[float, float]:
    """Latency (s) and bandwidth (bytes/s) of the link, from timed exchanges
    of rows along the halo plan with all ranks starting together: one column
    wide (mostly latency) and as wide as the layer's (at most
    :data:`_PROBE_BYTES`), the better of two each, the slowest rank's.
    Booked in the ledger as ``auto/probe``."""
    from pyg_dist import distributed

    channel, plan = ctx.channel, ctx.channel.plan
    rows = distributed.all_reduce_values([float(plan.num_send + plan.num_halo)], "max",
                                         channel.group)[0]
    wide = max(2, int(min(ctx.state.width, _PROBE_BYTES / (4 * max(rows, 1.0)))))
    seconds = []
    for width in (1, wide):
        payload = torch.ones(plan.num_send, width, device=plan.send_idx.device)  # no RNG drawn
        best = math.inf
        for _ in range(2):
            distributed.barrier(channel.group)
            start = time.perf_counter()
            channel.move(payload, plan.send_counts, plan.recv_counts, f"{_NOTE}/probe", "fwd")
            best = min(best, time.perf_counter() - start)
        seconds.append(best)
    small, large = distributed.all_reduce_values(seconds, "max", channel.group)
    extra = 4.0 * (wide - 1) * rows
    bandwidth = extra / (large - small) if large > small else 4.0 * wide * rows / large
    return max(small - 4.0 * rows / bandwidth, 0.0), bandwidth


def _row_bytes(width: int, codec: str | None) -> int:
    from pyg_dist.halo.compress import get_codec

    found = get_codec(codec)
    return 4 * width if found is None else found.row_bytes(width)


def _tau(moved_rows: float, row_bytes: int, link: dict[str, float], exchanges: int = 2) -> float:
    """Seconds one step's ``exchanges`` (rows forward, gradients backward)
    moving ``moved_rows`` rows of ``row_bytes`` take."""
    return exchanges * link["latency"] + moved_rows * row_bytes / link["bandwidth"]


def _time_spmm(ctx: FetchContext, widths: list[int]) -> dict[int, float]:
    """Seconds of one forward :func:`~pyg_dist.ops.spmm` over this rank's
    graph per width (the best of two), the slowest rank's."""
    from pyg_dist import distributed
    from pyg_dist.ops import spmm

    graph = ctx.graph
    seconds = []
    for width in widths:
        x = torch.ones(graph.num_owned, width, device=graph.device)  # no RNG drawn
        halo = torch.ones(graph.num_halo, width, device=graph.device)
        best = math.inf
        for _ in range(2):
            start = time.perf_counter()
            spmm(graph.rowptr, graph.col, x, None, "sum", x_halo=halo)
            best = min(best, time.perf_counter() - start)
        seconds.append(best)
    top = distributed.all_reduce_values(seconds, "max", ctx.channel.group)
    return dict(zip(widths, top))
