r"""The planner's arithmetic, shared by the strategies' predictions: what a
probe measured (:class:`Probe`, a :class:`Traffic` per exchanging layer), one
strategy with its predicted step and bytes (:class:`Candidate`), the accuracy
risks in order (:data:`RISKS`), and the link model every prediction uses:
per layer exchanging rows of width :math:`F` under compression :math:`c`, one
step's exchanges (rows forward, gradients backward) take
:math:`\tau = 2\alpha + R\,b(F, c)/\beta` (:math:`R`: rows the busiest rank
sends and receives, :math:`b`: bytes per row; :func:`halo_cost`), and the
ring all-reduce of :math:`g` gradient bytes per rank over :math:`P` ranks
:math:`G = 2(P-1)(\alpha + g / (P \beta))` (:func:`grad_seconds`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pyg_dist.halo.auto.cost import row_bytes
from pyg_dist.strategies.settings import GradSync

__all__ = ["RISKS", "GRAD_OPTIONS", "Traffic", "Probe", "Candidate", "risk_level",
           "halo_options", "halo_cost", "grad_seconds"]

#: Accuracy risks a strategy may take, from none to the most: ``"exact"`` (the
#: steps of single-process training), ``"compressed"`` (lossy compression of
#: halo rows or gradients), ``"stale"`` (halo rows a few steps old) and
#: ``"approximate"`` (edges dropped: sampling, isolation, gradient-only
#: training).
RISKS = ("exact", "compressed", "stale", "approximate")

#: Gradient compressions the planner ranks: (spec, bytes per plain byte, risk).
GRAD_OPTIONS = [(None, 1.0, "exact"), ("fp16", 0.5, "compressed")]


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
    """What :func:`~pyg_dist.strategies.planner.probe` measured, the same on every rank.

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
        exact_compute: The slowest rank's median exact step less its waits
            (every halo edge aggregated).
        measured: What strategies measured for their own predictions
            (``Strategy.measure``), by name.
        links: Whether the task scores edges (only strategies that train
            them are ranked).
        gather_seconds: The slowest rank's median wait of a step's gathers
            (a link task's pairs' rows).
        gather_bytes: Bytes the gathers book in each planned epoch, from
            the first (all ranks, worked out exactly from the epochs' pairs).
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
    exact_compute: float = 0.0
    measured: dict[str, Any] = field(default_factory=dict)
    links: bool = False
    gather_seconds: float = 0.0
    gather_bytes: list[int] = field(default_factory=list)

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

    def row(self, eval_seconds: float = 0.0) -> dict[str, Any]:
        """The candidate as a row of plain values: ``predicted_step_s`` its
        training step, ``predicted_epoch_s`` the step and the evaluations'
        share ``eval_seconds`` of an epoch (the same for every strategy).

        Args:
            eval_seconds (float, optional): Seconds of evaluation per epoch.
                (default: :obj:`0.0`)
        """
        return {"strategy": self.label, "risk": self.risk,
                "predicted_step_s": round(self.seconds, 6),
                "predicted_epoch_s": round(self.seconds + eval_seconds, 6),
                "predicted_bytes_per_epoch": int(self.bytes / max(self.epochs, 1))}


def risk_level(risk: str) -> int:
    """The rank of ``risk`` in :data:`RISKS` (0: exact); raises on an unknown one.

    Args:
        risk (str): One of :data:`RISKS`.
    """
    if risk not in RISKS:
        raise ValueError(f"unknown accuracy risk '{risk}'; use one of {', '.join(RISKS)}")
    return RISKS.index(risk)


def halo_options(spec: str) -> tuple[str, str | None, int, float]:
    """``(kind, codec, every, fraction)`` of a halo spec the planner ranks
    (``"stale:4,compress=int8"``: stale, int8, 4, 1.0).

    Args:
        spec (str): The policy's spec.
    """
    name, _, rest = spec.partition(",")
    codec = rest.split("=", 1)[1] if rest.startswith("compress=") else None
    kind, _, arg = name.partition(":")
    every = int(arg) if kind == "stale" else 1
    fraction = float(arg) if kind == "sampled" else 1.0
    return kind, codec, every, fraction


def halo_cost(probe: Probe, layers: list[Traffic], spec: str,
              epochs: int) -> tuple[float, float]:
    """Seconds per step and bytes over ``epochs`` (all ranks) of the halo
    exchanges of ``layers`` under ``spec``; a static input's one fetch and
    its layer's first exchange spread over the epochs.

    Args:
        probe (Probe): The link's latency and bandwidth.
        layers (list[Traffic]): The exchanging layers.
        spec (str): The halo policy's spec.
        epochs (int): The planned epochs.
    """
    kind, codec, every, fraction = halo_options(spec)
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


def grad_seconds(probe: Probe, nbytes: float) -> float:
    """Seconds of the ring all-reduce of ``nbytes`` gradient bytes per rank.

    Args:
        probe (Probe): The ranks, the link's latency and bandwidth.
        nbytes (float): Bytes each rank hands the all-reduce.
    """
    p = probe.world_size
    if p < 2:
        return 0.0
    return 2 * (p - 1) * (probe.latency + nbytes / (p * probe.bandwidth))
