r"""Choosing the whole training strategy: a short probe on the ranks, then a
prediction of every strategy's epoch time and bytes, and the fastest whose
accuracy risk the user accepts.

:func:`probe` (collective) runs a few exact training steps of the model on
the partition (on a ledger of its own, the parameters untouched, the random
state restored) and measures, reduced over the ranks:

* **compute** :math:`C`: the slowest rank's median step with no halo
  exchanged (every layer isolated), less the gradients' all-reduce by the
  link model;
* **the link**: latency :math:`\alpha` and bandwidth :math:`\beta`, from
  timed exchanges along the halo plan (as :class:`~pyg_dist.halo.Auto` measures it);
* **the traffic**: each layer's exchanged rows and width (from what it
  booked: a :class:`Traffic` each), which layers fetched a static input once,
  and the gradients' bytes;
* **the cover**: the same steps again with the graph pre-aggregated on a
  minimum vertex cover (:meth:`~pyg_dist.DistEdgeIndex.pre_aggregated`),
  where a layer can: its rows, its compute and its one setup exchange.

:func:`predict` is pure arithmetic on a :class:`Probe`. Per layer exchanging
rows of width :math:`F` under compression :math:`c`, one step's exchanges
(rows forward, gradients backward) take
:math:`\tau = 2\alpha + R\,b(F, c)/\beta` (:math:`R`: rows the busiest rank
sends and receives, :math:`b`: bytes per row), and

=============================  =============================================
strategy                       seconds per training step
=============================  =============================================
``exact`` (+ compression)      :math:`C + \sum_l \tau_l + G`
``stale:k``                    :math:`C + \sum_l \tau_l / k + G`
``pipelined``                  :math:`C + (1 - h) \sum_l \tau_l + G`, :math:`h`
                               the share hidden (:data:`PIPELINED_HIDDEN`)
``sampled:q``                  :math:`C + \sum_l (2\alpha + q R b / \beta) + G`
``isolated``, gradient-only    :math:`C + G`
=============================  =============================================

with :math:`G = 2(P-1)(\alpha + g / (P \beta))` the ring all-reduce of
:math:`g` gradient bytes per rank over :math:`P` ranks (halved with fp16),
and a static input's one fetch spread over the epochs. Bytes (all ranks,
training traffic) count what the ledger will book: rows and gradients per
refresh (every step, or ``ceil(E / k)`` times under ``stale:k``), the static
inputs' rows once, the gradients every step. Every exact-spelled option (not
``sampled`` or ``isolated``) is also predicted pre-aggregated, with the
cover's rows, compute and setup, unless the cover saves under
:data:`MIN_COVER_SAVING` of the rows.

Each strategy carries the accuracy risk it takes (:data:`RISKS`, in order):
``exact`` (the same steps as single-process training), ``compressed`` (lossy
compression of halo rows or gradients), ``stale`` (halo rows up to a few
steps old) and ``approximate`` (edges dropped: sampling, isolation,
gradient-only training). :func:`choose` takes the fastest prediction at the
accepted risk or below, the one with fewer bytes when two are within 1%.
:class:`~pyg_dist.config.Planned` (``strategy="auto"``, CLI ``--strategy
auto``) runs all of this at the start of :func:`~pyg_dist.train.train`, and
``pyg-dist plan`` prints the table.
"""
from __future__ import annotations

import copy
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from pyg_dist.config import RISKS, GradientOnly, GradSync, GraphParallel
from pyg_dist.grads import GradientSync
from pyg_dist.halo import Exact, Isolated
from pyg_dist.halo.auto import probes
from pyg_dist.halo.auto.cost import row_bytes
from pyg_dist.halo.cache import HaloCache
from pyg_dist.halo.cover import COVER
from pyg_dist.halo.layer import InputTracker
from pyg_dist.halo.ledger import Ledger
from pyg_dist.halo.policy import FetchContext
from pyg_dist.metrics import evaluate, global_loss
from pyg_dist.runtime import distributed

__all__ = ["RISKS", "TIE", "MIN_COVER_SAVING", "PIPELINED_HIDDEN", "Traffic", "Probe",
           "Candidate", "Plan", "probe", "predict", "choose", "plan"]

#: Halo options the planner ranks: (policy spec, risk).
HALO_OPTIONS = [
    ("exact", "exact"),
    ("exact,compress=fp16", "compressed"),
    ("exact,compress=int8", "compressed"),
    ("exact,compress=int4", "compressed"),
    ("stale:2", "stale"),
    ("stale:4", "stale"),
    ("stale:2,compress=int8", "stale"),
    ("stale:4,compress=int8", "stale"),
    ("stale:8,compress=int8", "stale"),
    ("pipelined", "stale"),
    ("pipelined,compress=int8", "stale"),
    ("sampled:0.1", "approximate"),
    ("isolated", "approximate"),
]
#: Gradient compressions the planner ranks: (spec, bytes per plain byte, risk).
GRAD_OPTIONS = [(None, 1.0, "exact"), ("fp16", 0.5, "compressed")]
#: Two predictions this close (relative) count as equally fast.
TIE = 0.01
#: Share of a pipelined exchange's time hidden behind compute. Measured on
#: the namespace testbed (2 hosts, links shaped to a 10 Gbit/s GPU cluster's
#: share): about a quarter, as sending and receiving compete with compute
#: for the cores; a GPU, computing apart from the CPU, hides more.
PIPELINED_HIDDEN = 0.25
#: Below this share of rows saved, pre-aggregation is not ranked (its setup
#: and the senders' sums cost more than the rows save).
MIN_COVER_SAVING = 0.05
#: The probe's first step without warm-up effects: step 0 sees every input
#: for the first time, step 1 fetches the static inputs' halos.
STEADY = 2


@dataclass
class Traffic:
    """One layer's halo traffic in the probe: rows of one exchange summed
    over the ranks (the gradients backward are as many), and the busiest
    rank's rows moved (sent plus received, both directions).

    Attributes:
        name: The layer's name in the ledger.
        width: Width of the rows it exchanges every step (0: none, its input
            is static).
        rows: Rows of one exchange every step (all ranks).
        moved: The busiest rank's rows of one step's exchanges.
        static_width: Width of its static input, fetched once (0: none).
        fill_rows: Rows of that one fetch (all ranks).
        fill_fwd: The busiest rank's rows of that fetch (sent plus received).
        first_width: Width of the rows it exchanged at the first step,
            before its input was known static (0: none).
        first_rows: Rows of that exchange, forward and backward (all ranks;
            none backward when the input takes no gradient).
    """

    name: str
    width: int = 0
    rows: float = 0.0
    moved: float = 0.0
    static_width: int = 0
    fill_rows: float = 0.0
    fill_fwd: float = 0.0
    first_width: int = 0
    first_rows: float = 0.0


@dataclass
class Probe:
    """What :func:`probe` measured, the same on every rank.

    Attributes:
        world_size: Ranks :math:`P`.
        latency: Seconds per exchange :math:`\\alpha`.
        bandwidth: Bytes per second :math:`\\beta`.
        compute: Seconds of a step's compute :math:`C` (slowest rank).
        layers: Each exchanging layer's :class:`Traffic`.
        grad_bytes: Gradient bytes each rank hands the all-reduce per step.
        clusters: Whether the partition has clusters (gradient-only training).
        step_seconds: The slowest rank's median probed step, waits included.
        eval_seconds: The slowest rank's evaluation (an exact forward).
        cover: The layers' traffic on the graph pre-aggregated on a minimum
            vertex cover (:obj:`None`: not probed, no layer can).
        cover_setup: Bytes of the pre-aggregation's one setup exchange (all ranks).
        cover_compute: :math:`C` with pre-aggregation.
    """

    world_size: int
    latency: float
    bandwidth: float
    compute: float
    layers: list[Traffic]
    grad_bytes: float
    clusters: bool
    step_seconds: float = 0.0
    eval_seconds: float = 0.0
    cover: list[Traffic] | None = None
    cover_setup: float = 0.0
    cover_compute: float = 0.0

    @property
    def cover_saving(self) -> float:
        """Share of the rows of one step's exchanges the cover saves (0 when
        not probed)."""
        if self.cover is None:
            return 0.0
        plain = sum(t.rows for t in self.layers)
        return 1.0 - sum(t.rows for t in self.cover) / plain if plain else 0.0


@dataclass
class Candidate:
    """One strategy with its predictions.

    Attributes:
        label: How tables name it (``"graph-parallel stale:4,compress=int8"``).
        strategy: The strategy option object.
        grad_sync: The gradient synchronisation.
        risk: Its accuracy risk (one of :data:`RISKS`).
        seconds: Predicted seconds of a training step (the evaluations,
            which every strategy runs alike, left out).
        bytes: Predicted training bytes over the planned epochs (all ranks).
        epochs: The planned epochs.
    """

    label: str
    strategy: Any
    grad_sync: GradSync
    risk: str
    seconds: float
    bytes: int
    epochs: int

    def row(self) -> dict[str, Any]:
        """The candidate as a table row of plain values (``predicted_epoch_s``:
        its training step)."""
        return {"strategy": self.label, "risk": self.risk,
                "predicted_epoch_s": round(self.seconds, 6),
                "predicted_bytes_per_epoch": int(self.bytes / max(self.epochs, 1))}


@dataclass
class Plan:
    """The probe, every candidate (fastest first) and the choice.

    Attributes:
        probe: The measurements.
        candidates: Every strategy ranked, fastest predicted first.
        choice: The chosen candidate.
        accept: The accepted risk.
        probe_seconds: Wall seconds the probe took.
        eval_every: Epochs between evaluations (each an exact forward).
    """

    probe: Probe
    candidates: list[Candidate]
    choice: Candidate
    accept: str
    probe_seconds: float = 0.0
    eval_every: int = 1

    def summary(self) -> dict[str, Any]:
        """The choice and its predictions, for a run's JSON line: its training
        step, and its epoch with the evaluations' share."""
        row = self.choice.row()
        step = row.pop("predicted_epoch_s")
        epoch = step + self.probe.eval_seconds / self.eval_every
        return {"choice": self.choice.label, "accept": self.accept, **row,
                "predicted_step_s": step, "predicted_epoch_s": round(epoch, 6),
                "probe_seconds": round(self.probe_seconds, 3),
                "link": {"latency_s": self.probe.latency,
                         "bandwidth_bytes_s": round(self.probe.bandwidth),
                         "compute_s": round(self.probe.compute, 6)}}

    def table(self) -> list[dict[str, Any]]:
        """Every candidate's row, fastest first, marking the choice."""
        return [{**c.row(), "chosen": c is self.choice} for c in self.candidates]


def _risk_level(risk: str) -> int:
    if risk not in RISKS:
        raise ValueError(f"unknown accuracy risk '{risk}'; use one of {', '.join(RISKS)}")
    return RISKS.index(risk)


def _options(spec: str) -> tuple[str, str | None, int, float]:
    """``(kind, codec, every, fraction)`` of a halo spec of :data:`HALO_OPTIONS`."""
    name, _, rest = spec.partition(",")
    codec = rest.split("=", 1)[1] if rest.startswith("compress=") else None
    kind, _, arg = name.partition(":")
    every = int(arg) if kind == "stale" else 1
    fraction = float(arg) if kind == "sampled" else 1.0
    return kind, codec, every, fraction


def _halo(probe: Probe, layers: list[Traffic], spec: str, epochs: int) -> tuple[float, float]:
    """Seconds per step and bytes over ``epochs`` (all ranks) of the halo
    exchanges of ``layers`` under ``spec``; a static input's one fetch and
    its layer's first exchange spread over the epochs."""
    kind, codec, every, fraction = _options(spec)
    if kind == "isolated":
        return 0.0, 0.0
    alpha, beta = probe.latency, probe.bandwidth
    seconds = nbytes = 0.0
    for t in layers:
        if t.width:
            row = row_bytes(t.width, codec)
            seconds += (2 * alpha + fraction * t.moved * row / beta) / every
            refreshes = epochs * fraction if kind == "sampled" else math.ceil(epochs / every)
            nbytes += refreshes * 2 * t.rows * row
        if t.static_width:  # the first step's rows, then the input's halo once
            first = row_bytes(t.first_width, codec) if t.first_width else 0
            fill = row_bytes(t.static_width, codec)
            nbytes += t.first_rows * first + t.fill_rows * fill
            seconds += (3 * alpha + t.fill_fwd * fill / beta
                        + t.moved * first / beta) / max(epochs, 1)
    return seconds, nbytes


def _grad_seconds(probe: Probe, nbytes: float) -> float:
    p = probe.world_size
    if p < 2:
        return 0.0
    return 2 * (p - 1) * (probe.latency + nbytes / (p * probe.bandwidth))


def predict(probe: Probe, epochs: int) -> list[Candidate]:
    """Every strategy's predicted epoch time and bytes over ``epochs``
    (pure arithmetic; see the module's documentation), fastest first. With
    a probed cover, each exact-spelled option also runs pre-aggregated
    (``GraphParallel(pre_aggregate=True)``), unless the cover saves under
    :data:`MIN_COVER_SAVING` of the rows.

    Args:
        probe (Probe): The measurements.
        epochs (int): The planned epochs :math:`E`.
    """
    out = []
    variants: list[tuple[list[Traffic], float, float, bool]] = [
        (probe.layers, probe.compute, 0.0, False)]
    if probe.cover is not None and probe.cover_saving >= MIN_COVER_SAVING:
        variants.append((probe.cover, probe.cover_compute, probe.cover_setup, True))
    for layers, compute, setup, covered in variants:
        for spec, halo_risk in HALO_OPTIONS:
            kind = _options(spec)[0]
            if covered and kind in ("sampled", "isolated"):
                continue  # sampled rows are refused, isolated sends none
            exchanges, halo_bytes = _halo(probe, layers, spec, epochs)
            step = compute + exchanges * (1 - PIPELINED_HIDDEN if kind == "pipelined" else 1)
            for grad, scale, grad_risk in GRAD_OPTIONS:
                risk = RISKS[max(_risk_level(halo_risk), _risk_level(grad_risk))]
                grad_bytes = probe.grad_bytes * scale
                label = (f"graph-parallel {spec}" + (" pre-aggregated" if covered else "")
                         + (f", grad {grad}" if grad else ""))
                out.append(Candidate(label, GraphParallel(halo=spec, pre_aggregate=covered),
                                     GradSync(grad), risk,
                                     step + _grad_seconds(probe, grad_bytes),
                                     int(halo_bytes + setup
                                         + epochs * probe.world_size * grad_bytes), epochs))
    if probe.clusters:  # approximate whatever the gradients' compression
        for grad, scale, _ in GRAD_OPTIONS:
            grad_bytes = probe.grad_bytes * scale
            out.append(Candidate("gradient-only" + (f", grad {grad}" if grad else ""),
                                 GradientOnly(), GradSync(grad), "approximate",
                                 probe.compute + _grad_seconds(probe, grad_bytes),
                                 int(epochs * probe.world_size * grad_bytes), epochs))
    out.sort(key=lambda c: (c.seconds, c.bytes))
    return out


def choose(candidates: list[Candidate], accept: str = "exact") -> Candidate:
    """The fastest candidate whose risk is ``accept`` or below; of those
    within :data:`TIE` of it, the one with the fewest bytes.

    Args:
        candidates (list[Candidate]): The predictions.
        accept (str, optional): The accepted risk, one of :data:`RISKS`.
            (default: :obj:`"exact"`)
    """
    level = _risk_level(accept)
    allowed = [c for c in candidates if _risk_level(c.risk) <= level]
    if not allowed:
        raise ValueError(f"no strategy takes at most the '{accept}' risk")
    fastest = min(c.seconds for c in allowed)
    close = [c for c in allowed if c.seconds <= fastest * (1 + TIE)]
    return min(close, key=lambda c: (c.bytes, c.seconds))


def probe(model: nn.Module, data: Any, steps: int = 3) -> Probe:
    """Measures what :func:`predict` needs by ``steps`` exact training steps
    (after the steps that fill the caches) and timed exchanges, and the same
    pre-aggregated where a layer can; collective. The parameters, the random
    state, the graph's ledger and its halo state are as they were before.

    Args:
        model (torch.nn.Module): The model, called as ``model(data.x, data.edge_index)``.
        data (DistData): This rank's part.
        steps (int, optional): Steps measured. (default: :obj:`3`)
    """
    if steps < 1:
        raise ValueError(f"'probe' needs steps >= 1 (got {steps})")
    graph = data.edge_index
    channel, registry = graph.channel, graph.registry
    saved = (channel.ledger, registry.default, registry.fixed, torch.get_rng_state(),
             copy.deepcopy(registry.dropout), graph.pre_aggregate)
    registry.default, registry.fixed = Exact(), False
    try:
        waited, step_seconds, layers, ledger = _probe_steps(model, data, steps)
        ctx = FetchContext(channel, "plan", None, HaloCache(), 0, graph=graph)
        widest = max([max(t.width, t.static_width) for t in layers], default=1)
        latency, bandwidth = probes.probe_link(ctx, widest)
        grad = distributed.all_reduce_values([ledger.totals(STEADY)["bytes_grad"]], "max")[0]
        # compute: steps that exchange no halo rows, less the gradients' all-reduce
        _reset(registry)
        registry.default, registry.fixed = Isolated(), True
        alone = _probe_steps(model, data, steps)[1]
        registry.default, registry.fixed = Exact(), False
        ranks = distributed.world_size()
        compute = alone - (2 * (ranks - 1) * (latency + grad / (ranks * bandwidth))
                           if ranks > 1 else 0.0)
        with torch.no_grad():
            evals = []
            for _ in range(2):  # the first fills the static inputs' halos
                start = time.perf_counter()
                evaluate(model, data)
                evals.append(time.perf_counter() - start)
        eval_seconds = distributed.all_reduce_values([evals[-1]], "max")[0]
        cover, setup, cover_compute = None, 0.0, 0.0
        if layers:  # the same steps pre-aggregated, where a layer can
            _reset(registry)
            graph.pre_aggregate = True
            cover_waited, _, cover, cover_ledger = _probe_steps(model, data, steps)
            # the senders' sums: what the waits-less step adds (its bias, waits
            # that are not the link's, the same on both graphs); never less,
            # since on small graphs the difference is noise
            cover_compute = compute + max(0.0, cover_waited - waited)
            setup = distributed.all_reduce_values(
                [float(sum(e.bytes_sent for (_, name, d), e in cover_ledger.entries.items()
                           if name == COVER))], "sum")[0]
    finally:
        channel.ledger, registry.default, registry.fixed = saved[:3]
        torch.set_rng_state(saved[3])
        registry.dropout = saved[4]
        graph.pre_aggregate = saved[5]
        _reset(registry)
        for key in [k for k in graph._cache if isinstance(k, tuple) and k[:1] == (
                "pre_aggregated",)]:
            del graph._cache[key]  # a run sets its graph up as without the probe
    return Probe(distributed.world_size(), latency, bandwidth, max(compute, 1e-6), layers,
                 grad, data.meta.clusters_per_part > 1, step_seconds, eval_seconds,
                 cover, setup, max(cover_compute, 1e-6))


def _reset(registry: Any) -> None:
    registry.layers.clear()
    registry.tracker = InputTracker()


def _probe_steps(model: nn.Module, data: Any, steps: int
                 ) -> tuple[float, float, list[Traffic], Ledger]:
    """``steps`` measured training steps after :data:`STEADY` warm ones on a
    fresh ledger: the compute and the step (slowest rank), each layer's
    traffic and the ledger."""
    channel = data.edge_index.channel
    ledger = channel.ledger = Ledger()
    sync = GradientSync(model, None, ledger)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # steps change nothing
    walls = []
    for _ in range(steps + STEADY):
        start = time.perf_counter()
        _train_step(model, data, optimizer, sync)
        walls.append(time.perf_counter() - start)
        ledger.next_step()
    optimizer.zero_grad(set_to_none=True)
    computes = []
    for step, wall in enumerate(walls[STEADY:], start=STEADY):
        totals = ledger.totals(step)
        computes.append(wall - totals["seconds"] - totals["seconds_grad"])
    compute, step_seconds = distributed.all_reduce_values(
        [statistics.median(computes), statistics.median(walls[STEADY:])], "max")
    return compute, step_seconds, _traffic(ledger), ledger


def _train_step(model: nn.Module, data: Any, optimizer: torch.optim.Optimizer,
                sync: GradientSync) -> None:
    """One training step as :func:`~pyg_dist.train.train` takes it: the
    global loss, gradients summed over the ranks, the optimizer's step."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    out = sync(data.x, data.edge_index)
    loss, _ = global_loss(out, data.y, data.train_mask)
    sync.backward(loss)
    optimizer.step()


def _traffic(ledger: Ledger) -> list[Traffic]:
    """Each layer's :class:`Traffic` from the probe's ledger: step 0 (the
    first exchange), step 1 (static inputs' halos fetched) and step
    :data:`STEADY` (every later step), reduced over the ranks."""
    names = sorted({layer for (s, layer, d) in ledger.entries
                    if d == "fwd" and s <= STEADY and layer != COVER
                    and not layer.endswith("degree")})
    entries = [[ledger.entries.get((step, name, "fwd")) for step in range(STEADY + 1)]
               for name in names]
    sums = distributed.all_reduce_values(
        [float(e.rows_sent + e.partial_sums_sent) if e is not None else 0.0
         for row in entries for e in row]
        + [float(e.bytes_sent) if e is not None else 0.0 for row in entries for e in row],
        "sum") if names else []
    count = len(names) * (STEADY + 1)
    rows_all, bytes_all = sums[:count], sums[count:]
    first_back = [ledger.entries.get((0, name, "bwd")) for name in names]
    first_back = distributed.all_reduce_values(
        [float(e.rows_sent + e.partial_sums_sent) if e is not None else 0.0
         for e in first_back], "sum") if names else []
    widths = [round(b / (4 * r)) if r else 0 for b, r in zip(bytes_all, rows_all)]
    # the busiest rank's rows sent plus received, per exchange
    tops = distributed.all_reduce_values(
        [float(e.rows_sent + e.partial_sums_sent) + e.bytes_recv / (4 * w)
         if e is not None and w else 0.0
         for e, w in zip([e for row in entries for e in row], widths)], "max") if names else []
    out = []
    n = STEADY + 1
    for i, name in enumerate(names):
        rows, width, moved = (rows_all[n * i : n * i + n], widths[n * i : n * i + n],
                              tops[n * i : n * i + n])
        if rows[STEADY] > 0:
            out.append(Traffic(name, width[STEADY], rows[STEADY], 2 * moved[STEADY]))
        elif rows[1] > 0:  # a static input: its halo fetched at step 1, then reused
            out.append(Traffic(name, static_width=width[1], fill_rows=rows[1],
                               fill_fwd=moved[1], first_width=width[0],
                               first_rows=rows[0] + first_back[i],
                               moved=2 * moved[0]))
    return out


def plan(model: nn.Module, data: Any, epochs: int, accept: str = "exact",
         steps: int = 3, eval_every: int = 1) -> Plan:
    """Probes (collective), predicts every strategy and chooses one.

    Args:
        model (torch.nn.Module): The model.
        data (DistData): This rank's part.
        epochs (int): The planned epochs.
        accept (str, optional): The accuracy risk accepted, one of
            :data:`RISKS`. (default: :obj:`"exact"`)
        steps (int, optional): Steps the probe measures. (default: :obj:`3`)
        eval_every (int, optional): Epochs between evaluations, for the
            predicted epoch. (default: :obj:`1`)
    """
    _risk_level(accept)
    start = time.perf_counter()
    measured = probe(model, data, steps)
    candidates = predict(measured, epochs)
    return Plan(measured, candidates, choose(candidates, accept), accept,
                time.perf_counter() - start, eval_every)
