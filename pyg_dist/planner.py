r"""Choosing the whole training strategy: a short probe on the ranks, then a
prediction of every strategy's epoch time and bytes, and the fastest whose
accuracy risk the user accepts.

:func:`probe` (collective) runs a few exact training steps of the model on
the partition (on a ledger of its own, the parameters untouched, the random
state restored) and measures, reduced over the ranks:

* **compute** :math:`C`: the slowest rank's median step, less what it waited
  for halo rows and for the gradient all-reduce;
* **the link**: latency :math:`\alpha` and bandwidth :math:`\beta`, from
  timed exchanges along the halo plan (:func:`~pyg_dist.halo.auto.probes.probe_link`);
* **the traffic**: each layer's exchanged width (from the bytes it booked),
  which layers fetched a static input once, the halo rows (the busiest
  rank's, and the sums over ranks) and the gradients' bytes.

:func:`predict` is pure arithmetic on a :class:`Probe`. Per layer exchanging
rows of width :math:`F` under compression :math:`c`, one step's exchanges
(rows forward, gradients backward) take
:math:`\tau = 2\alpha + R\,b(F, c)/\beta` (:math:`R`: rows the busiest rank
sends and receives, :math:`b`: bytes per row), and

==========================  ================================================
strategy                    seconds per epoch
==========================  ================================================
``exact`` (+ compression)   :math:`C + \sum_l \tau_l + G`
``stale:k``                 :math:`C + \sum_l \tau_l / k + G`
``pipelined``               :math:`\max(C, \sum_l \tau_l) + G` (hidden
                            behind the next step's compute)
``sampled:q``               :math:`C + \sum_l (2\alpha + q R b / \beta) + G`
``isolated``, gradient-only :math:`C + G`
==========================  ================================================

with :math:`G = 2(P-1)(\alpha + g / (P \beta))` the ring all-reduce of
:math:`g` gradient bytes per rank over :math:`P` ranks (halved with fp16),
and a static input's one fetch spread over the epochs. Bytes (all ranks,
training traffic) count what the ledger will book: rows and gradients per
refresh (every step, or ``ceil(E / k)`` times under ``stale:k``), the static
inputs' rows once, the gradients every step.

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

from pyg_dist import distributed
from pyg_dist.config import RISKS, GradientOnly, GradSync, GraphParallel
from pyg_dist.halo import Exact
from pyg_dist.halo.auto import probes
from pyg_dist.halo.auto.cost import row_bytes
from pyg_dist.halo.cache import HaloCache
from pyg_dist.halo.layer import InputTracker
from pyg_dist.halo.ledger import Ledger
from pyg_dist.halo.policy import FetchContext
from pyg_dist.metrics import evaluate

__all__ = ["RISKS", "Probe", "Candidate", "Plan", "probe", "predict", "choose", "plan"]

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
#: The probe's first step without warm-up effects: step 0 sees every input
#: for the first time, step 1 fetches the static inputs' halos.
STEADY = 2


@dataclass
class Probe:
    """What :func:`probe` measured, the same on every rank.

    Attributes:
        world_size: Ranks :math:`P`.
        latency: Seconds per exchange :math:`\\alpha`.
        bandwidth: Bytes per second :math:`\\beta`.
        compute: Seconds of a step's compute :math:`C` (slowest rank).
        layers: ``(name, width)`` of each layer exchanging rows every step.
        static: ``(name, width, first)`` of each layer fetching a static
            input once: the input's width, and the width of the rows it
            exchanged at the first step (before the input was known static).
        rows: Halo rows: ``moved`` (the busiest rank, both directions),
            ``fwd`` (the busiest rank, forward), ``sent_fwd`` and ``sent_bwd``
            (sums over ranks).
        grad_bytes: Gradient bytes each rank hands the all-reduce per step.
        clusters: Whether the partition has clusters (gradient-only training).
        step_seconds: The slowest rank's median probed step, waits included.
        eval_seconds: The slowest rank's evaluation (an exact forward).
    """

    world_size: int
    latency: float
    bandwidth: float
    compute: float
    layers: list[tuple[str, int]]
    static: list[tuple[str, int, int]]
    rows: dict[str, float]
    grad_bytes: float
    clusters: bool
    step_seconds: float = 0.0
    eval_seconds: float = 0.0


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


def _halo_seconds(probe: Probe, spec: str) -> float:
    """Seconds per step of the halo exchanges under ``spec`` (a static
    input's one fetch not included)."""
    name, _, rest = spec.partition(",")
    codec = rest.split("=", 1)[1] if rest.startswith("compress=") else None
    kind, _, arg = name.partition(":")
    if kind == "isolated":
        return 0.0
    alpha, beta, moved = probe.latency, probe.bandwidth, probe.rows["moved"]
    fraction = float(arg) if kind == "sampled" else 1.0
    every = int(arg) if kind == "stale" else 1
    seconds = sum(2 * alpha + fraction * moved * row_bytes(w, codec) / beta
                  for _, w in probe.layers) / every
    return seconds


def _grad_seconds(probe: Probe, nbytes: float) -> float:
    p = probe.world_size
    if p < 2:
        return 0.0
    return 2 * (p - 1) * (probe.latency + nbytes / (p * probe.bandwidth))


def predict(probe: Probe, epochs: int) -> list[Candidate]:
    """Every strategy's predicted epoch time and bytes over ``epochs``
    (pure arithmetic; see the module's documentation), fastest first.

    Args:
        probe (Probe): The measurements.
        epochs (int): The planned epochs :math:`E`.
    """
    out = []
    rows = probe.rows
    for spec, halo_risk in HALO_OPTIONS:
        kind = spec.partition(",")[0].partition(":")[0]
        codec = spec.split("compress=", 1)[1] if "compress=" in spec else None
        every = int(spec.partition(",")[0].partition(":")[2] or 1) if kind == "stale" else 1
        exchanges = _halo_seconds(probe, spec)
        # a static input: its layer's rows exchanged at the first step, then
        # the input's halo fetched once
        static_bytes = sum(rows["sent_fwd"] * row_bytes(w, codec)
                           + (rows["sent_fwd"] + rows["sent_bwd"]) * row_bytes(first, codec)
                           for _, w, first in probe.static)
        static_seconds = sum(3 * probe.latency + rows["fwd"] * row_bytes(w, codec) / probe.bandwidth
                             + rows["moved"] * row_bytes(first, codec) / probe.bandwidth
                             for _, w, first in probe.static) / max(epochs, 1)
        if kind == "isolated":
            halo_bytes, static_bytes, static_seconds = 0.0, 0.0, 0.0
        elif kind == "sampled":  # the expected share of the rows
            fraction = float(spec.partition(",")[0].partition(":")[2])
            halo_bytes = epochs * fraction * sum(
                (rows["sent_fwd"] + rows["sent_bwd"]) * row_bytes(w, codec)
                for _, w in probe.layers)
        else:
            refreshes = math.ceil(epochs / every)
            halo_bytes = refreshes * sum((rows["sent_fwd"] + rows["sent_bwd"]) * row_bytes(w, codec)
                                         for _, w in probe.layers)
        compute = (max(probe.compute, exchanges) if kind == "pipelined"
                   else probe.compute + exchanges)
        for grad, scale, grad_risk in GRAD_OPTIONS:
            risk = RISKS[max(_risk_level(halo_risk), _risk_level(grad_risk))]
            grad_bytes = probe.grad_bytes * scale
            seconds = compute + static_seconds + _grad_seconds(probe, grad_bytes)
            total = (halo_bytes + static_bytes
                     + epochs * probe.world_size * grad_bytes)
            label = f"graph-parallel {spec}" + (f", grad {grad}" if grad else "")
            out.append(Candidate(label, GraphParallel(halo=spec), GradSync(grad), risk, seconds,
                                 int(total), epochs))
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
    (after one that fills the caches) and timed exchanges; collective. The
    parameters, the random state, the graph's ledger and its halo state are
    as they were before.

    Args:
        model (torch.nn.Module): The model, called as ``model(data.x, data.edge_index)``.
        data (DistData): This rank's part.
        steps (int, optional): Steps measured. (default: :obj:`3`)
    """
    from pyg_dist.train import GradientSync, _step

    if steps < 1:
        raise ValueError(f"'probe' needs steps >= 1 (got {steps})")
    graph = data.edge_index
    channel, registry = graph.channel, graph.registry
    saved = (channel.ledger, registry.default, registry.fixed, torch.get_rng_state(),
             copy.deepcopy(registry.dropout))
    ledger = channel.ledger = Ledger()
    registry.default, registry.fixed = Exact(), False
    try:
        sync = GradientSync(model, None, ledger)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # steps change nothing
        walls = []
        for _ in range(steps + STEADY):
            start = time.perf_counter()
            _step(model, data, optimizer, sync)
            walls.append(time.perf_counter() - start)
            ledger.next_step()
        optimizer.zero_grad(set_to_none=True)
        computes = []
        for step, wall in enumerate(walls[STEADY:], start=STEADY):
            totals = ledger.totals(step)
            computes.append(wall - totals["seconds"] - totals["seconds_grad"])
        compute, step_seconds = distributed.all_reduce_values(
            [statistics.median(computes), statistics.median(walls[STEADY:])], "max")
        layers, static = _widths(ledger, channel)
        ctx = FetchContext(channel, "plan", None, HaloCache(), 0, graph=graph)
        widest = max([w for _, w in layers] + [w for _, w, _ in static], default=1)
        latency, bandwidth = probes.probe_link(ctx, widest)
        rows = probes.halo_rows(ctx)
        grad = distributed.all_reduce_values([ledger.totals(STEADY)["bytes_grad"]], "max")[0]
        with torch.no_grad():
            evals = []
            for _ in range(2):  # the first fills the static inputs' halos
                start = time.perf_counter()
                evaluate(model, data)
                evals.append(time.perf_counter() - start)
        eval_seconds = distributed.all_reduce_values([evals[-1]], "max")[0]
    finally:
        channel.ledger, registry.default, registry.fixed = saved[:3]
        torch.set_rng_state(saved[3])
        registry.dropout = saved[4]
        registry.layers.clear()
        registry.tracker = InputTracker()
    return Probe(distributed.world_size(), latency, bandwidth, max(compute, 1e-6), layers,
                 static, rows, grad, data.meta.clusters_per_part > 1, step_seconds,
                 eval_seconds)


def _widths(ledger: Ledger, channel: Any
            ) -> tuple[list[tuple[str, int]], list[tuple[str, int, int]]]:
    """Each exchanging layer's width (from the bytes booked at step 2, over
    all ranks) and each static input's width (its fill at step 1) with the
    width its layer exchanged at step 0, before the input was known static."""
    names = sorted({layer for (s, layer, d) in ledger.entries
                    if d == "fwd" and s <= STEADY and not layer.endswith("degree")})
    values = [float(channel.plan.num_send)]
    for name in names:
        for step in range(STEADY + 1):
            entry = ledger.entries.get((step, name, "fwd"))
            values.append(float(entry.bytes_sent) if entry is not None else 0.0)
    totals = distributed.all_reduce_values(values, "sum")
    sent, layers, static = totals[0], [], []
    if sent <= 0:  # no rank has halo rows: nothing is ever exchanged
        return [], []
    for i, name in enumerate(names):
        first, fill, steady = totals[1 + 3 * i : 4 + 3 * i]
        if steady > 0:
            layers.append((name, round(steady / (4 * sent))))
        elif fill > 0:
            static.append((name, round(fill / (4 * sent)), round(first / (4 * sent))))
    return layers, static


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
