r"""Choosing the whole training strategy: a short probe on the ranks, then a
prediction of every registered strategy's epoch time and bytes, and the
fastest whose accuracy risk the user accepts.

:func:`probe` (collective) runs a few exact training steps of the model on
the partition (in a trial of the graph's, :meth:`~pyg_dist.DistEdgeIndex.trial`:
its own ledger, fresh halo state, the random state restored; the
parameters untouched) and measures, reduced over the ranks:

* **compute** :math:`C`: the slowest rank's median step with no halo
  exchanged (every layer isolated), less the gradients' all-reduce by the
  link model;
* **the link**: latency :math:`\alpha` and bandwidth :math:`\beta`, from
  timed exchanges along the halo plan (as :class:`~pyg_dist.halo.Auto` measures it);
* **the traffic**: each layer's exchanged rows and width (from what it
  booked: a :class:`~pyg_dist.strategies.Traffic` each), which layers
  fetched a static input once, and the gradients' bytes;
* **the cover**: the same steps again with the graph pre-aggregated on a
  minimum vertex cover (:meth:`~pyg_dist.DistEdgeIndex.pre_aggregated`),
  where a layer can: its rows, its compute and its one setup exchange;
* **what strategies ask for**: each registered strategy's
  ``Strategy.measure`` (sizes its own
  predictions need);
* **the gather** of a link task (:class:`~pyg_dist.strategies.link_task.LinkTask`):
  its seconds per step, and its bytes in each planned epoch worked out
  exactly from the epochs' pairs (:meth:`~pyg_dist.strategies.link_task.LinkTask.gather_bytes`:
  the ids each rank asks and the rows other ranks own, counted before any
  row moves), the same for every strategy.

:func:`predict` asks every strategy of
:data:`~pyg_dist.strategies.STRATEGIES` for its candidates
(:meth:`~pyg_dist.strategies.Strategy.candidates`: pure arithmetic on the
:class:`~pyg_dist.strategies.Probe`, each strategy's formulas in its own
module) and ranks them; for a link task only the strategies that train
edges, each with the gather's seconds and bytes added. Bytes (all ranks,
training traffic) count what the ledger will book. :func:`choose` takes the
fastest prediction at the accepted risk or below (:data:`~pyg_dist.strategies.RISKS`), the one
with fewer bytes when two are within :data:`TIE` of each other.
:class:`~pyg_dist.config.Planned` (``strategy="auto"``, CLI ``--strategy
auto``) runs all of this at the start of :func:`~pyg_dist.train.train`, and
``pyg-dist plan`` prints the table.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from pyg_dist.grads import GradientSync
from pyg_dist.halo import Exact, Isolated
from pyg_dist.halo.auto import probes
from pyg_dist.halo.cache import HaloCache
from pyg_dist.halo.cover import COVER
from pyg_dist.halo.ledger import Ledger
from pyg_dist.halo.policy import FetchContext
from pyg_dist.runtime import distributed
from pyg_dist.strategies.base import STRATEGIES, take_step
from pyg_dist.strategies.cost import RISKS, Candidate, Probe, Traffic, risk_level
from pyg_dist.strategies.task import Task

__all__ = ["RISKS", "TIE", "STEADY", "Plan", "probe", "predict", "choose", "plan"]

#: Two predictions this close (relative) count as equally fast.
TIE = 0.01
#: The probe's first step without warm-up effects: step 0 sees every input
#: for the first time, step 1 fetches the static inputs' halos.
STEADY = 2


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

    @property
    def eval_seconds(self) -> float:
        """Seconds of evaluation per epoch (the same for every strategy)."""
        return self.probe.eval_seconds / self.eval_every

    def summary(self) -> dict[str, Any]:
        """The choice and its predictions, for a run's JSON line (its
        training step, and its epoch with the evaluations' share, as every
        row of :meth:`table` has them)."""
        return {"choice": self.choice.label, "accept": self.accept,
                **self.choice.row(self.eval_seconds),
                "probe_seconds": round(self.probe_seconds, 3),
                "link": {"latency_s": self.probe.latency,
                         "bandwidth_bytes_s": round(self.probe.bandwidth),
                         "compute_s": round(self.probe.compute, 6)}}

    def table(self) -> list[dict[str, Any]]:
        """Every candidate's row, fastest first, marking the choice."""
        return [{**c.row(self.eval_seconds), "chosen": c is self.choice}
                for c in self.candidates]


def predict(probe: Probe, epochs: int) -> list[Candidate]:
    """Every registered strategy's candidates with their predicted step and
    bytes over ``epochs`` (pure arithmetic), fastest first; for a link task
    those of the strategies that train edges, each with the gather's step
    seconds and bytes of the epochs added.

    Args:
        probe (Probe): The measurements.
        epochs (int): The planned epochs :math:`E`.
    """
    if probe.links and len(probe.gather_bytes) < epochs:
        raise ValueError(f"'predict' got a probe of a link task with the gather's bytes of "
                         f"{len(probe.gather_bytes)} epochs for {epochs} planned epochs; "
                         f"probe with epochs={epochs}")
    gathered = sum(probe.gather_bytes[:epochs])
    out = [dataclasses.replace(c, seconds=c.seconds + probe.gather_seconds,
                               bytes=c.bytes + gathered)
           for cls in STRATEGIES.values() if not (probe.links and cls.links_refusal)
           for c in cls.candidates(probe, epochs)]
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
    level = risk_level(accept)
    allowed = [c for c in candidates if risk_level(c.risk) <= level]
    if not allowed:
        raise ValueError(f"no strategy takes at most the '{accept}' risk")
    fastest = min(c.seconds for c in allowed)
    close = [c for c in allowed if c.seconds <= fastest * (1 + TIE)]
    return min(close, key=lambda c: (c.bytes, c.seconds))


def probe(model: nn.Module, data: Any, steps: int = 3, epochs: int = 0) -> Probe:
    """Measures what :func:`predict` needs by ``steps`` exact training steps
    (after the steps that fill the caches) and timed exchanges, and the same
    pre-aggregated where a layer can; collective. Every measurement runs in a
    trial of the graph's (:meth:`~pyg_dist.DistEdgeIndex.trial`), so the
    parameters, the random state, the graph's ledger and its halo state are
    as they were before.

    Args:
        model (torch.nn.Module): The model, called on the task's inputs.
        data (DistData or Task): This rank's part (trained on its node
            labels), or the task that trains on it (a
            :class:`~pyg_dist.strategies.link_task.LinkTask`).
        steps (int, optional): Steps measured. (default: :obj:`3`)
        epochs (int, optional): The planned epochs, whose gather's bytes a
            link task predicts (epochs 1 to ``epochs``). (default: :obj:`0`)
    """
    if steps < 1:
        raise ValueError(f"'probe' needs steps >= 1 (got {steps})")
    task = data if isinstance(data, Task) else Task(data)
    data, graph = task.data, task.data.edge_index
    ranks = distributed.world_size()
    with graph.trial(default=Exact(), fixed=False) as ledger:
        waited, step_seconds, gathered = _probe_steps(model, task, steps, ledger)
        layers = _traffic(ledger)
        ctx = FetchContext(graph.channel, "plan", None, HaloCache(), 0, graph=graph)
        widest = max([max(t.width, t.static_width) for t in layers], default=1)
        latency, bandwidth = probes.probe_link(ctx, widest)
        grad = distributed.all_reduce_values([ledger.totals(STEADY)["bytes_grad"]], "max")[0]
    # compute: steps that exchange no halo rows, less the gradients' all-reduce
    with graph.trial(default=Isolated(), fixed=True) as ledger:
        _, alone, gathered_alone = _probe_steps(model, task, steps, ledger)
    compute = alone - gathered_alone - (2 * (ranks - 1) * (latency + grad / (ranks * bandwidth))
                                        if ranks > 1 else 0.0)
    with graph.trial(default=Exact(), fixed=False), torch.no_grad():
        gather_bytes = _gather_bytes(model, task, epochs)
        evals = []
        for _ in range(2):  # the first fills the static inputs' halos
            start = time.perf_counter()
            task.evaluate(model)
            evals.append(time.perf_counter() - start)
    eval_seconds = distributed.all_reduce_values([evals[-1]], "max")[0]
    cover, setup, cover_compute = None, 0.0, 0.0
    if layers:  # the same steps pre-aggregated, where a layer can
        with graph.trial(pre_aggregate=True, default=Exact(), fixed=False) as ledger:
            cover_waited = _probe_steps(model, task, steps, ledger)[0]
            cover = _traffic(ledger)
            setup = distributed.all_reduce_values(
                [float(sum(e.bytes_sent for (_, name, d), e in ledger.entries.items()
                           if name == COVER))], "sum")[0]
        # the senders' sums: what the waits-less step adds (its bias, waits
        # that are not the link's, the same on both graphs); never less,
        # since on small graphs the difference is noise
        cover_compute = compute + max(0.0, cover_waited - waited)
    measured = {name: m for name, cls in STRATEGIES.items()
                if not (task.links and cls.links_refusal)
                and (m := cls.measure(model, data)) is not None}
    return Probe(ranks, latency, bandwidth, max(compute, 1e-6), layers, grad,
                 data.meta.clusters_per_part > 1, step_seconds, eval_seconds, cover, setup,
                 max(cover_compute, 1e-6), max(waited, 1e-6), measured, task.links,
                 gathered, gather_bytes)


def _gather_bytes(model: nn.Module, task: Task, epochs: int) -> list[int]:
    """A link task's gather bytes of epochs 1 to ``epochs`` (all ranks), the
    rows as wide as the model's output (:obj:`[]` for a node task)."""
    if not task.links:
        return []
    model.eval()
    out = model(*task.inputs)
    return task.gather_bytes(range(1, epochs + 1), math.prod(out.shape[1:]) * out.element_size())


def _probe_steps(model: nn.Module, task: Task, steps: int,
                 ledger: Ledger) -> tuple[float, float, float]:
    """``steps`` measured training steps after :data:`STEADY` warm ones,
    booked in ``ledger`` (the trial's): the compute (a step less its waits,
    the gather's included), the step and the gather's wait (a link task's),
    each the slowest rank's median."""
    sync = GradientSync(model, None, ledger)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # steps change nothing
    walls = []
    for _ in range(steps + STEADY):
        start = time.perf_counter()
        take_step(model, task, optimizer, sync)
        walls.append(time.perf_counter() - start)
        ledger.next_step()
    optimizer.zero_grad(set_to_none=True)
    computes, gathers = [], []
    for step, wall in enumerate(walls[STEADY:], start=STEADY):
        totals = ledger.totals(step)
        gathers.append(totals["seconds_gather"])
        computes.append(wall - totals["seconds"] - totals["seconds_grad"] - gathers[-1])
    compute, step_seconds, gathered = distributed.all_reduce_values(
        [statistics.median(computes), statistics.median(walls[STEADY:]),
         statistics.median(gathers)], "max")
    return compute, step_seconds, gathered


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
    backs = [ledger.entries.get((0, name, "bwd")) for name in names]
    first_back = distributed.all_reduce_values(
        [float(e.rows_sent + e.partial_sums_sent) if e is not None else 0.0
         for e in backs], "sum") if names else []
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
        data (DistData or Task): This rank's part, or the task that trains
            on it (:func:`probe`).
        epochs (int): The planned epochs.
        accept (str, optional): The accuracy risk accepted, one of
            :data:`RISKS`. (default: :obj:`"exact"`)
        steps (int, optional): Steps the probe measures. (default: :obj:`3`)
        eval_every (int, optional): Epochs between evaluations, for the
            predicted epoch. (default: :obj:`1`)
    """
    risk_level(accept)
    start = time.perf_counter()
    measured = probe(model, data, steps, epochs)
    candidates = predict(measured, epochs)
    return Plan(measured, candidates, choose(candidates, accept), accept,
                time.perf_counter() - start, eval_every)
