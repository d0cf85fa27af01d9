r"""Graph-parallel training: every rank trains the model on its own part and
its layers fetch the halo rows of remote neighbours under a halo policy.

Predicted (see :mod:`pyg_dist.strategies.cost`), per halo option of
:data:`HALO_OPTIONS` and gradient compression, with :math:`C` the probed
compute, :math:`\tau_l` layer :math:`l`'s exchanges and :math:`G` the
gradients' all-reduce:

=============================  =============================================
halo policy                    seconds per training step
=============================  =============================================
``exact`` (+ compression)      :math:`C + \sum_l \tau_l + G`
``stale:k``                    :math:`C + \sum_l \tau_l / k + G`
``pipelined``                  :math:`C + (1 - h) \sum_l \tau_l + G`, :math:`h`
                               the share hidden (:data:`PIPELINED_HIDDEN`)
``sampled:q``                  :math:`C + \sum_l (2\alpha + q R b / \beta) + G`
``isolated``                   :math:`C + G`
=============================  =============================================

Every exact-spelled option is also predicted pre-aggregated, with the
probed cover's rows, compute and setup, unless the cover saves under
:data:`MIN_COVER_SAVING` of the rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from pyg_dist.halo import SPECS, Exact, HaloPolicy
from pyg_dist.halo.compress import CODECS
from pyg_dist.metrics import accuracies
from pyg_dist.runtime import distributed
from pyg_dist.strategies.base import Runner, Step, Strategy, take_step
from pyg_dist.strategies.cost import (
    GRAD_OPTIONS,
    RISKS,
    Candidate,
    Probe,
    Traffic,
    grad_seconds,
    halo_cost,
    halo_options,
    risk_level,
)
from pyg_dist.strategies.options import as_policy, check_policy, option, plain
from pyg_dist.strategies.settings import GradSync, Settings
from pyg_dist.strategies.task import Task

__all__ = ["GraphParallel", "parse_phases", "HALO_OPTIONS", "PIPELINED_HIDDEN",
           "MIN_COVER_SAVING"]

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
#: Share of a pipelined exchange's time hidden behind compute. Measured on
#: the namespace testbed (2 hosts, links shaped to a 10 Gbit/s GPU cluster's
#: share): about a quarter, as sending and receiving compete with compute
#: for the cores; a GPU, computing apart from the CPU, hides more.
PIPELINED_HIDDEN = 0.25
#: Below this share of rows saved, pre-aggregation is not ranked (its setup
#: and the senders' sums cost more than the rows save).
MIN_COVER_SAVING = 0.05


@dataclass(frozen=True)
class GraphParallel(Strategy):
    """Graph parallel training (the default): every rank trains the model on
    its own part; its layers fetch the halo rows of remote neighbours under a
    halo policy, so with :class:`~pyg_dist.halo.Exact` every step equals
    single-process training on the whole graph. The graph's settings the
    strategy changes (its default policy, pre-aggregation) hold for the run
    and are given back after it.

    Args:
        halo (HaloPolicy or str, optional): The policy of every layer that
            sets none (a policy or its spec, e.g. ``"stale:4,compress=int8"``
            or ``"auto"``); :obj:`None` keeps the graph's default (what
            :meth:`~pyg_dist.DistData.load` was given, else exact). (default: :obj:`None`)
        phases (tuple, optional): A schedule of policies: ``(epoch, policy)``
            pairs, each policy the default from that epoch on (every rank
            switches at the same step), e.g. ``((150, "exact"),)`` trains
            under ``halo`` until epoch 149 and exactly from epoch 150; or
            their spelling ``"150=exact"`` (``;`` between pairs).
            (default: :obj:`()`)
        pre_aggregate (bool, optional): :obj:`True`: layers whose aggregation
            is linear with fixed coefficients (GCN, GCN2, SAGE with sum or
            mean, GIN) exchange partial sums on a minimum vertex cover of each
            pair of ranks' cut edges instead of every halo row: exact, fewer
            rows (see :meth:`~pyg_dist.DistEdgeIndex.pre_aggregated`); other
            layers exchange rows. :obj:`False`: every layer exchanges rows.
            :obj:`None` keeps the graph's setting (what
            :meth:`~pyg_dist.DistData.load` was given). (default: :obj:`None`)
    """

    name: ClassVar[str] = "graph-parallel"
    hetero_refusal: ClassVar[str] = ""
    labels_refusal: ClassVar[str] = ""
    links_refusal: ClassVar[str] = ""
    halo: HaloPolicy | str | None = option(
        None, f"{'|'.join(SPECS)}, each [,compress={'|'.join(CODECS)}]", type=str,
        metavar="POLICY")
    phases: tuple[tuple[int, HaloPolicy | str], ...] = option(
        (), "then policies by epoch: E=POLICY[;E=...]", type=str, metavar="SCHEDULE")
    pre_aggregate: bool | None = option(None, "send partial sums on a vertex cover (exact)",
                                        type=bool)

    def check(self) -> None:
        check_policy(type(self), "halo", self.halo)
        object.__setattr__(self, "phases", parse_phases(self.phases))
        if self.pre_aggregate not in (None, True, False):
            raise ValueError(f"GraphParallel(pre_aggregate={self.pre_aggregate!r}): use True "
                             f"(on), False (off) or None (the graph's setting)")

    def policy_at(self, epoch: int) -> HaloPolicy | str | None:
        """The default policy of ``epoch`` (1-based): the last phase started
        by then, else ``halo``.

        Args:
            epoch (int): The epoch.
        """
        current = self.halo
        for start, policy in self.phases:
            if start <= epoch:
                current = policy
        return current

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["phases"] = ";".join(f"{start}={plain(policy)}" for start, policy in self.phases)
        return out

    def check_settings(self, settings: Settings) -> None:
        if settings.hetero and self.pre_aggregate:
            raise ValueError("'train' on a heterogeneous graph: pre-aggregation exchanges "
                             "partial sums, which relations do not; leave pre_aggregate off "
                             "and train it with strategy=GraphParallel(halo=...) (CLI: "
                             "--strategy graph-parallel --halo exact|stale:K|auto|...)")
        if settings.evaluation.from_training and self.phases:
            raise ValueError(f"Evaluation(from_training=True) reads the training forward of "
                             f"graph-parallel training under one exact policy (got {self}); "
                             f"evaluate with a forward of its own (from_training=False)")
        if settings.evaluation.from_training and settings.links:
            raise ValueError("Evaluation(from_training=True) reads node logits; link "
                             "prediction scores edges: evaluate with a forward of its own "
                             "(from_training=False)")
        if settings.evaluation.from_training and settings.labels_as_input:
            raise ValueError("Evaluation(from_training=True): a model that reads labels as "
                             "input reads half of them in training and all of them in "
                             "evaluation; evaluate with a forward of its own "
                             "(from_training=False)")

    def runner(self, model: nn.Module, task: Task, settings: Settings) -> Runner:
        return _GraphParallelRun(self, model, task, settings)

    @classmethod
    def candidates(cls, probe: Probe, epochs: int) -> list[Candidate]:
        variants: list[tuple[list[Traffic], float, float, bool]] = [
            (probe.layers, probe.compute, 0.0, False)]
        if probe.cover is not None and probe.cover_saving >= MIN_COVER_SAVING:
            variants.append((probe.cover, probe.cover_compute, probe.cover_setup, True))
        out = []
        for layers, compute, setup, covered in variants:
            for spec, halo_risk in HALO_OPTIONS:
                kind = halo_options(spec)[0]
                if covered and kind in ("sampled", "isolated"):
                    continue  # sampled rows are refused, isolated sends none
                exchanges, halo_bytes = halo_cost(probe, layers, spec, epochs)
                hidden = PIPELINED_HIDDEN if kind == "pipelined" else 0.0
                step = compute + exchanges * (1 - hidden)
                for grad, scale, grad_risk in GRAD_OPTIONS:
                    risk = RISKS[max(risk_level(halo_risk), risk_level(grad_risk))]
                    grad_bytes = probe.grad_bytes * scale
                    label = (f"graph-parallel {spec}" + (" pre-aggregated" if covered else "")
                             + (f", grad {grad}" if grad else ""))
                    out.append(Candidate(label, cls(halo=spec, pre_aggregate=covered),
                                         GradSync(grad), risk,
                                         step + grad_seconds(probe, grad_bytes),
                                         int(halo_bytes + setup
                                             + epochs * probe.world_size * grad_bytes),
                                         epochs))
        return out


def parse_phases(value: Any) -> tuple[tuple[int, HaloPolicy | str], ...]:
    """``(epoch, policy)`` pairs in increasing epoch order from pairs or
    their spelling ``"150=exact;180=stale:2"``; raises naming the fix.

    Args:
        value (Any): A sequence of ``(epoch, policy)`` pairs (epochs from
            :obj:`1`, increasing; a policy object or its spec string), or
            their string spelling.
    """
    fix = ("give (epoch, policy) pairs, e.g. ((150, 'exact'),), or '150=exact' "
           "(';' between pairs)")
    if isinstance(value, str):
        pairs: list[Any] = []
        for item in filter(None, (p.strip() for p in value.split(";"))):
            start, eq, spec = item.partition("=")
            if not eq or not start.strip().isdigit():
                raise ValueError(f"GraphParallel(phases={value!r}): '{item}' is not "
                                 f"EPOCH=POLICY; {fix}")
            pairs.append((int(start), spec.strip()))
        value = pairs
    if not isinstance(value, (tuple, list)):
        raise ValueError(f"GraphParallel(phases={value!r}): {fix}")
    out = []
    for pair in value:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"GraphParallel(phases={value!r}): {pair!r} is no pair; {fix}")
        start, policy = pair
        if isinstance(start, bool) or not isinstance(start, int) or start < 1:
            raise ValueError(f"GraphParallel(phases={value!r}): a phase starts at an epoch "
                             f">= 1 (got {start!r}); {fix}")
        check_policy(GraphParallel, "phases", policy)
        if policy is None:
            raise ValueError(f"GraphParallel(phases={value!r}): every phase names a policy")
        out.append((start, policy))
    starts = [start for start, _ in out]
    if starts != sorted(set(starts)):
        raise ValueError(f"GraphParallel(phases={value!r}): phases start at increasing, "
                         f"distinct epochs")
    return tuple(out)


class _GraphParallelRun(Runner):
    """A graph-parallel run: for the run, the graph's default policy is the
    strategy's (by phase) and it pre-aggregates as the strategy says;
    accuracies come from the training forward under
    ``Evaluation(from_training=True)``."""

    def __init__(self, strategy: GraphParallel, model: nn.Module, task: Task,
                 settings: Settings) -> None:
        super().__init__(strategy, model, task, settings)
        self.strategy: GraphParallel = strategy  # its phases, for mypy
        registry = task.registry
        if registry is not None:
            self.hold(registry.using(default=registry.default))  # phases switch it
        if strategy.pre_aggregate is not None and registry is not None:
            self.hold(task.graph.using(strategy.pre_aggregate))
        self.reuse = settings.evaluation.from_training
        self.phase: Any = None
        self.steps = 0

    def step(self, epoch: int, optimizer: torch.optim.Optimizer) -> Step:
        self._enter(epoch)
        expected = None
        if self.reuse and self.steps == 0:
            with torch.no_grad():
                self.model.eval()
                expected = self.task.logits(self.model(*self.task.inputs))
        step = take_step(self.model, self.task.for_epoch(epoch), optimizer, self.sync)
        if expected is not None:
            assert step.logits is not None, "the step's forward gave logits"
            differs = not torch.allclose(step.logits.detach(), expected, rtol=1e-4, atol=1e-5)
            if distributed.all_reduce_values([float(differs)], op="max")[0]:
                raise ValueError("Evaluation(from_training=True): the model's training "
                                 "forward differs from its evaluation forward (dropout or "
                                 "batch statistics in training); evaluate with a forward of "
                                 "its own (from_training=False)")
            self._check_exact_halos()
        self.steps += 1
        return step

    def evaluate(self, step: Step) -> tuple[float, float, float]:
        if self.reuse:
            assert step.logits is not None, "the step's forward gave logits"
            return accuracies(step.logits.detach().argmax(dim=-1), self.task)
        return super().evaluate(step)

    def _enter(self, epoch: int) -> None:
        """Switches the graph's default policy where the schedule says (the
        same epoch on every rank)."""
        policy = self.strategy.policy_at(epoch)
        registry = self.task.registry
        if registry is not None and policy is not None and policy is not self.phase:
            registry.default = as_policy(policy)
            self.phase = policy

    def _check_exact_halos(self) -> None:
        """Every layer trained under exact, uncompressed halos (the rows an
        evaluation would read), else an error naming the fix."""
        registry = self.task.registry
        layers = registry.layers.items() if registry is not None else ()
        inexact = sorted(f"{name} ({state.policy.spec()})" for (name, mode), state in layers
                         if mode == "train" and (not isinstance(state.policy, Exact)
                                                 or state.policy.codec is not None))
        if inexact:
            raise ValueError(f"Evaluation(from_training=True) needs exact, uncompressed halos "
                             f"in training; {', '.join(inexact)} differ; train with "
                             f"halo='exact' or evaluate with a forward of its own "
                             f"(from_training=False)")
