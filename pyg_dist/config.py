r"""What :func:`pyg_dist.train.train` and ``pyg-dist train`` are told, as typed
option objects: one training strategy and the settings every strategy shares.

======================================  ==========================================
strategy                                what crosses the network each step
======================================  ==========================================
:class:`GraphParallel` (the default)    halo rows and their gradients, under a
                                        halo policy; the parameter gradients
:class:`GradientOnly`                   the parameter gradients alone: each rank
                                        trains on a group of clusters, regrouped
                                        every few epochs
:class:`LayerPipeline`                  activations between layer stages and
                                        halo rows within a stage (deep models)
:class:`Planned` (``"auto"``)           what the strategy it chooses sends: the
                                        fastest predicted at the accepted risk
======================================  ==========================================

Beside the strategy: :class:`GradSync` (how gradients are summed),
:class:`Adam` (the default optimizer's settings and its :class:`LRSchedule`),
:class:`Evaluation` (when to evaluate, and when to stop) and
:class:`Checkpoint`. Each object checks its own fields when it is made, with
an error that names the fix, and reads and writes itself as a dictionary of
plain values (:meth:`Options.to_dict`, :meth:`Options.from_dict`), which is
also what ``pyg-dist train --config FILE`` reads. The command line is built
from the same fields: their ``help`` metadata is the one description of each
option.
"""
from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

from torch.optim import lr_scheduler

from pyg_dist.grads.spec import GRAD_COMPRESS_CHOICES, parse_grad_compress
from pyg_dist.halo import SPECS, HaloPolicy, parse_policy
from pyg_dist.halo.compress import CODECS
from pyg_dist.pipeline.pipeline import INITIAL_ROWS
from pyg_dist.regroup.correction import CORRECTIONS
from pyg_dist.regroup.schedule import SCHEMES
from pyg_dist.regroup.trainer import SOURCES

__all__ = ["Options", "GraphParallel", "GradientOnly", "LayerPipeline", "Planned", "RISKS",
           "Strategy", "GradSync",
           "Adam", "LRSchedule", "Evaluation", "Checkpoint", "STRATEGIES", "SCHEDULES", "STOPS",
           "option", "strategy_from_dict", "parse_phases"]


def option(default: Any, help: str, *, type: Any = None, choices: tuple[str, ...] | None = None,
           metavar: str | None = None) -> Any:
    """A dataclass field that is also a command-line option: ``help`` is its
    one description, ``type`` converts the command line's text (:obj:`None`:
    the type of ``default``), ``choices`` the allowed values (the package's
    own constants).

    Args:
        default (Any): The field's default value.
        help (str): The field's one description, shown by ``--help``.
        type (Callable, optional): Converts the command line's text;
            :obj:`None` for the type of ``default``. (default: :obj:`None`)
        choices (tuple[str, ...], optional): The allowed values.
            (default: :obj:`None`)
        metavar (str, optional): The value's name in ``--help``; :obj:`None`
            for the field's name in upper case. (default: :obj:`None`)
    """
    return field(default=default, metadata={"help": help, "type": type, "choices": choices,
                                            "metavar": metavar})


class Options:
    """Base of the option objects: validation in ``check``, and a dictionary
    of plain values both ways. Before ``check`` runs, every field annotated
    with plain types only (``bool``, ``int``, ``float``, ``str``, ``None``)
    is checked to hold one of them (an ``int`` is a ``float`` too, a ``bool``
    is no ``int``)."""

    def __post_init__(self) -> None:
        _check_types(self)
        self.check()

    def check(self) -> None:
        """Raises :class:`ValueError`, naming the field and the fix, on a bad field."""

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values (policies as their spec strings)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Any:
        """The object :meth:`to_dict` wrote; unknown keys are refused by name
        (``"name"`` is known to the classes that have one, the strategies)."""
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        if not isinstance(values, dict):
            raise ValueError(f"{cls.__name__} is read from a JSON object of its fields "
                             f"({', '.join(sorted(names))}), not {values!r}")
        known = names | ({"name"} if isinstance(getattr(cls, "name", None), str) else set())
        unknown = sorted(set(values) - known, key=str)
        if unknown:
            raise ValueError(f"{cls.__name__} has no field {', '.join(map(repr, unknown))}; "
                             f"its fields are {', '.join(sorted(names))}")
        return cls(**{k: v for k, v in values.items() if k in names})


#: The plain types a field may be annotated with, as an error names them.
_PLAIN = {bool: "True or False", int: "an integer", float: "a number", str: "a string",
          type(None): "None"}


_PLAIN_FIELDS: dict[type, list[tuple[str, tuple[type, ...]]]] = {}


def _plain_fields(cls: type) -> list[tuple[str, tuple[type, ...]]]:
    """``(name, types)`` of each field of ``cls`` annotated with plain types only."""
    if cls not in _PLAIN_FIELDS:
        hints = typing.get_type_hints(cls)
        kinds = {f.name: typing.get_args(hints[f.name]) or (hints[f.name],)
                 for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        _PLAIN_FIELDS[cls] = [(name, k) for name, k in kinds.items() if set(k) <= set(_PLAIN)]
    return _PLAIN_FIELDS[cls]


def _check_types(options: Options) -> None:
    """Raises naming the field when a plain-typed field holds another type
    (policies, paths, schedules and phases are read by the class's ``check``)."""
    for name, kinds in _plain_fields(type(options)):
        value = getattr(options, name)
        if isinstance(value, bool):
            fits = bool in kinds
        elif isinstance(value, int):
            fits = int in kinds or float in kinds
        else:
            fits = isinstance(value, tuple(k for k in kinds if k not in (bool, int)))
        if not fits:
            raise ValueError(f"{type(options).__name__}({name}={value!r}): {name} must be "
                             f"{' or '.join(_PLAIN[k] for k in kinds)}, not "
                             f"{type(value).__name__}")


def _plain(value: Any) -> Any:
    if isinstance(value, HaloPolicy):
        return value.spec()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def _int(cls: Any, name: str, value: Any, low: int, fix: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{cls.__name__}({name}={value!r}): {name} must be an integer "
                         f">= {low}; {fix}")


def _choice(cls: Any, name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{cls.__name__}({name}={value!r}): use one of {', '.join(choices)}")


def _policy(cls: Any, name: str, value: Any) -> None:
    """A halo policy given as a :class:`~pyg_dist.halo.HaloPolicy` or its spec."""
    if value is None or isinstance(value, HaloPolicy):
        return
    if not isinstance(value, str):
        raise ValueError(f"{cls.__name__}({name}={value!r}): give a halo policy or its spec, "
                         f"e.g. 'exact', 'stale:4,compress=int8'")
    try:
        parse_policy(value)
    except ValueError as exc:
        raise ValueError(f"{cls.__name__}({name}={value!r}): {exc}") from None


def as_policy(value: HaloPolicy | str | None) -> HaloPolicy | None:
    """A policy from a policy or its spec (:obj:`None` stays)."""
    return parse_policy(value) if isinstance(value, str) else value


@dataclass(frozen=True)
class GraphParallel(Options):
    """Graph parallel training (the default): every rank trains the model on
    its own part; its layers fetch the halo rows of remote neighbours under a
    halo policy, so with :class:`~pyg_dist.halo.Exact` every step equals
    single-process training on the whole graph.

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
        pre_aggregate (bool, optional): Layers whose aggregation is linear
            with fixed coefficients (GCN, GCN2, SAGE with sum or mean, GIN)
            exchange partial sums on a minimum vertex cover of each pair of
            ranks' cut edges instead of every halo row: exact, fewer rows
            (see :meth:`~pyg_dist.DistEdgeIndex.pre_aggregated`); other
            layers exchange rows. (default: :obj:`False`)
    """

    name: ClassVar[str] = "graph-parallel"
    halo: HaloPolicy | str | None = option(
        None, f"{'|'.join(SPECS)}, each [,compress={'|'.join(CODECS)}]", type=str,
        metavar="POLICY")
    phases: tuple[tuple[int, HaloPolicy | str], ...] = option(
        (), "then policies by epoch: E=POLICY[;E=...]", type=str, metavar="SCHEDULE")
    pre_aggregate: bool = option(False, "send partial sums on a vertex cover (exact)")

    def check(self) -> None:
        _policy(type(self), "halo", self.halo)
        object.__setattr__(self, "phases", parse_phases(self.phases))

    def policy_at(self, epoch: int) -> HaloPolicy | str | None:
        """The default policy of ``epoch`` (1-based): the last phase started
        by then, else ``halo``."""
        current = self.halo
        for start, policy in self.phases:
            if start <= epoch:
                current = policy
        return current

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["phases"] = ";".join(f"{start}={_plain(policy)}" for start, policy in self.phases)
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
        _policy(GraphParallel, "phases", policy)
        if policy is None:
            raise ValueError(f"GraphParallel(phases={value!r}): every phase names a policy")
        out.append((start, policy))
    starts = [start for start, _ in out]
    if starts != sorted(set(starts)):
        raise ValueError(f"GraphParallel(phases={value!r}): phases start at increasing, "
                         f"distinct epochs")
    return tuple(out)


@dataclass(frozen=True)
class GradientOnly(Options):
    r"""Gradient-only training: each rank trains on a group of clusters of
    the partition folder (cut with ``clusters_per_part`` :math:`m \ge 2`) with
    no halo exchange at all; the groups change every ``regroup_every`` epochs
    and a coverage correction weighs what each group misses (see
    :mod:`pyg_dist.regroup`). Only gradients cross the network. Under
    ``correction="node"`` the model is called with edge weights,
    ``model(x, edge_index, edge_weight)``. Evaluation runs on the whole part.

    Args:
        clusters_per_rank (int, optional): :math:`m`, checked against the
            folder's ``clusters_per_part``; :obj:`None` takes the folder's
            (``pyg-dist train`` partitions with 4). (default: :obj:`None`)
        regroup_every (int, optional): Epochs between regroupings. (default: :obj:`50`)
        regroup (str, optional): How clusters move between ranks: ``"sweep"``,
            ``"random"`` or ``"home"`` (never). (default: :obj:`"sweep"`)
        correction (str, optional): ``"node"``, ``"batch"`` or ``"none"``.
            (default: :obj:`"node"`)
        shrinkage (float, optional): Pulls the correction's weights toward
            their mean, in [0, 1]. (default: :obj:`0.0`)
        regroup_from (str, optional): Where a new group comes from:
            ``"folder"`` (read again) or ``"peers"`` (sent by the ranks that
            held its clusters). (default: :obj:`"folder"`)
    """

    name: ClassVar[str] = "gradient-only"
    clusters_per_rank: int | None = option(None, "clusters per rank (cuts 4 if no folder)",
                                           type=int, metavar="M")
    regroup_every: int = option(50, "epochs between regroupings", metavar="N")
    regroup: str = option("sweep", "|".join(SCHEMES), choices=SCHEMES,
                          metavar="HOW")
    correction: str = option("node", f"correction: {'|'.join(CORRECTIONS)}",
                             choices=CORRECTIONS, metavar="KIND")
    shrinkage: float = option(0.0, "pull weights to their mean, 0..1", metavar="L")
    regroup_from: str = option("folder", f"groups come from: {'|'.join(SOURCES)}",
                               choices=SOURCES, metavar="SRC")

    def check(self) -> None:
        cls = type(self)
        if self.clusters_per_rank is not None:
            _int(cls, "clusters_per_rank", self.clusters_per_rank, 1,
                 "or None to take the partition folder's")
        _int(cls, "regroup_every", self.regroup_every, 1, "it counts epochs")
        _choice(cls, "regroup", self.regroup, SCHEMES)
        _choice(cls, "correction", self.correction, CORRECTIONS)
        _choice(cls, "regroup_from", self.regroup_from, SOURCES)
        if isinstance(self.shrinkage, bool) or not isinstance(self.shrinkage, (int, float)) \
                or not 0.0 <= self.shrinkage <= 1.0:
            raise ValueError(f"GradientOnly(shrinkage={self.shrinkage!r}): use a value in "
                             f"[0, 1]: 0 keeps the correction, 1 gives every weight their mean")


@dataclass(frozen=True)
class LayerPipeline(Options):
    """A layer pipeline for deep models (:class:`~pyg_dist.models.DeepGNN`):
    the ranks form a grid of world size / ``stages`` graph parts × ``stages``
    layer stages; ``data`` must be loaded with :func:`pyg_dist.pipeline.load`.

    Args:
        stages (int, optional): Layer stages. (default: :obj:`2`)
        chunks (int, optional): Chunks per graph part flowing through the
            pipeline; above 1, layers read other chunks' rows from history
            tables (at most one epoch old). (default: :obj:`1`)
        initial_rows (str, optional): How later stages get GCNII's initial
            rows: ``"send"`` or ``"recompute"`` (half the bytes).
            (default: :obj:`"send"`)
        halo (HaloPolicy or str, optional): The policy within a stage (its
            compression applies to the rows exchanged there), as
            :class:`GraphParallel`'s. (default: :obj:`None`)
    """

    name: ClassVar[str] = "layer-pipeline"
    halo: HaloPolicy | str | None = option(None, "", type=str, metavar="POLICY")
    stages: int = option(2, "layer stages (grid: parts/S x S)", metavar="S")
    chunks: int = option(1, "chunks per part (>1: history tables)", metavar="K")
    initial_rows: str = option("send", f"initial rows: {'|'.join(INITIAL_ROWS)}",
                               choices=INITIAL_ROWS, metavar="HOW")

    def check(self) -> None:
        _policy(type(self), "halo", self.halo)
        for name in ("stages", "chunks"):
            _int(type(self), name, getattr(self, name), 1, "a pipeline has at least one")
        _choice(type(self), "initial_rows", self.initial_rows, INITIAL_ROWS)


#: Accuracy risks :class:`~pyg_dist.config.Planned` may accept, from none to the most.
RISKS = ("exact", "compressed", "stale", "approximate")


@dataclass(frozen=True)
class Planned(Options):
    """The strategy chosen at the start of training (``strategy="auto"``):
    a short probe measures compute, the link and the traffic, every strategy's
    epoch time and bytes are predicted, and the fastest whose accuracy risk
    is ``accept`` or below trains (see :mod:`pyg_dist.strategies.planner`). The run's
    result carries the prediction beside what was measured.

    Args:
        accept (str, optional): The accuracy risk accepted: ``"exact"`` (the
            steps of single-process training), ``"compressed"`` (lossy
            compression of halo rows or gradients), ``"stale"`` (halo rows a
            few steps old) or ``"approximate"`` (edges dropped: sampling,
            isolation, gradient-only training on a folder with clusters).
            (default: :obj:`"exact"`)
        probe_steps (int, optional): Training steps the probe measures
            (the parameters are left as they were). (default: :obj:`3`)
    """

    name: ClassVar[str] = "auto"
    accept: str = option("exact", "|".join(RISKS),
                         choices=RISKS, metavar="RISK")
    probe_steps: int = option(3, "training steps the probe measures", metavar="N")

    def check(self) -> None:
        _choice(type(self), "accept", self.accept, RISKS)
        _int(type(self), "probe_steps", self.probe_steps, 1, "the probe measures steps")


Strategy = GraphParallel | GradientOnly | LayerPipeline | Planned
#: The strategies by name (``pyg-dist train --strategy NAME``).
STRATEGIES: dict[str, type[Options]] = {
    cls.name: cls  # type: ignore[attr-defined]
    for cls in (GraphParallel, GradientOnly, LayerPipeline, Planned)
}


def strategy_from_dict(values: dict[str, Any]) -> Strategy:
    """The strategy ``{"name": ..., **fields}`` spells (what ``to_dict`` of a
    strategy wrote, with its name).

    Args:
        values (dict): The strategy's fields and its ``"name"`` (a key of
            :data:`~pyg_dist.config.STRATEGIES`; :class:`GraphParallel`'s
            when missing).
    """
    if not isinstance(values, dict):
        raise ValueError(f"a strategy is read from a JSON object of its fields and its name, "
                         f"e.g. {{'name': 'graph-parallel', 'halo': 'exact'}}, not {values!r}")
    name = values.get("name", GraphParallel.name)
    cls = STRATEGIES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"unknown strategy '{name}'; use one of {', '.join(STRATEGIES)}")
    return cls.from_dict(values)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class GradSync(Options):
    """How the ranks sum parameter gradients.

    Args:
        compress (str, optional): :obj:`None` (one exact all-reduce after
            backward), ``"fp16"``, ``"powersgd:R"``, ``"covap:K"`` or
            ``"covap:auto"`` (DDP hooks overlapping with backward; see
            :mod:`pyg_dist.grads`). Booked as ``grad_bytes``. (default: :obj:`None`)
    """

    compress: str | None = option(None, "none|fp16|powersgd:R|covap:K|covap:auto",
                                  type=str, metavar="SPEC")

    def check(self) -> None:
        try:
            parse_grad_compress(self.compress)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"GradSync(compress={self.compress!r}): {exc}; use "
                             f"{GRAD_COMPRESS_CHOICES}") from None

    @property
    def spec(self) -> str:
        """The compression's spelling (``"none"`` for an exact sum)."""
        parsed = parse_grad_compress(self.compress)
        return "none" if parsed is None else parsed.spec()


#: Learning-rate schedules of :class:`LRSchedule`.
SCHEDULES = ("constant", "cosine", "plateau")


@dataclass(frozen=True)
class LRSchedule(Options):
    """A learning-rate schedule, built on :mod:`torch.optim.lr_scheduler` for
    the optimizer :func:`~pyg_dist.train.train` makes; spelled
    ``KIND[,KEY=VALUE...]`` on the command line (``"cosine,warmup=10"``).

    Args:
        kind (str, optional): ``"constant"``, ``"cosine"`` (annealed to
            ``min_lr`` at the last epoch) or ``"plateau"`` (the rate times
            ``factor`` after ``patience`` evaluations without a better
            validation accuracy). (default: :obj:`"constant"`)
        warmup (int, optional): Epochs of linear warm-up from
            ``lr / (warmup + 1)`` (not with ``"plateau"``). (default: :obj:`0`)
        min_lr (float, optional): The lowest rate. (default: :obj:`0.0`)
        factor (float, optional): ``"plateau"``'s factor. (default: :obj:`0.5`)
        patience (int, optional): ``"plateau"``'s evaluations to wait.
            (default: :obj:`10`)
    """

    kind: str = "constant"
    warmup: int = 0
    min_lr: float = 0.0
    factor: float = 0.5
    patience: int = 10

    def check(self) -> None:
        cls = type(self)
        _choice(cls, "kind", self.kind, SCHEDULES)
        _int(cls, "warmup", self.warmup, 0, "it counts epochs")
        _int(cls, "patience", self.patience, 0, "it counts evaluations")
        if self.kind == "plateau" and self.warmup:
            raise ValueError("LRSchedule('plateau', warmup=...): a plateau schedule takes no "
                             "warm-up; use 'cosine,warmup=N' or 'constant,warmup=N'")
        if not _number(self.min_lr) or self.min_lr < 0:
            raise ValueError(f"LRSchedule(min_lr={self.min_lr!r}): use a rate >= 0")
        if not _number(self.factor) or not 0 < self.factor < 1:
            raise ValueError(f"LRSchedule(factor={self.factor!r}): use a factor in (0, 1)")

    @classmethod
    def parse(cls, spec: str) -> LRSchedule:
        """The schedule ``"KIND[,KEY=VALUE...]"`` spells (:meth:`spec` reversed)."""
        kind, *pairs = [p.strip() for p in spec.split(",")]
        kinds = {f.name: f.type for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {"kind": kind}
        for pair in pairs:
            key, eq, text = pair.partition("=")
            if not eq or key not in kinds or key == "kind":
                raise ValueError(f"bad learning-rate schedule '{spec}': '{pair}' is not "
                                 f"KEY=VALUE with KEY one of warmup, min_lr, factor, patience")
            try:
                values[key] = int(text) if kinds[key] == "int" else float(text)
            except ValueError:
                raise ValueError(f"bad learning-rate schedule '{spec}': {key} takes a "
                                 f"number, got '{text}'") from None
        return cls(**values)

    def spec(self) -> str:
        """``"KIND[,KEY=VALUE...]"`` with the fields that differ from the defaults."""
        base = LRSchedule()
        return ",".join([self.kind, *(f"{f.name}={getattr(self, f.name)}"
                                      for f in dataclasses.fields(self)
                                      if f.name != "kind"
                                      and getattr(self, f.name) != getattr(base, f.name))])

    def build(self, optimizer: Any, epochs: int) -> Any:
        """The :mod:`torch.optim.lr_scheduler` object of this schedule for
        ``optimizer`` over ``epochs`` steps (:obj:`None` for a constant rate)."""
        if self.kind == "plateau":
            return lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=self.factor,
                                                  patience=self.patience, min_lr=self.min_lr)
        warm = (lr_scheduler.LinearLR(optimizer, start_factor=1.0 / (self.warmup + 1),
                                      total_iters=self.warmup) if self.warmup else None)
        if self.kind == "constant":
            return warm
        cosine = lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, epochs - self.warmup),
                                                eta_min=self.min_lr)
        if warm is None:
            return cosine
        return lr_scheduler.SequentialLR(optimizer, [warm, cosine], milestones=[self.warmup])


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def _schedule(value: Any) -> Any:
    """A schedule from a schedule or its spelling; raises naming the fix."""
    if value is None or isinstance(value, LRSchedule):
        return value
    if isinstance(value, str):
        try:
            return LRSchedule.parse(value)
        except ValueError as exc:
            raise ValueError(f"Adam(schedule={value!r}): {exc}") from None
    if isinstance(value, dict):
        try:
            return LRSchedule.from_dict(value)
        except ValueError as exc:
            raise ValueError(f"Adam(schedule={value!r}): {exc}") from None
    raise ValueError(f"Adam(schedule={value!r}): give an LRSchedule or its spelling, e.g. "
                     f"'cosine,warmup=10' or 'plateau,factor=0.5'")


@dataclass(frozen=True)
class Adam(Options):
    """The default optimizer, :class:`torch.optim.Adam` with these settings
    (``train`` also takes any :class:`torch.optim.Optimizer` instead, alone or
    with its scheduler as a pair).

    Args:
        lr (float, optional): Learning rate. (default: :obj:`0.01`)
        weight_decay (float, optional): L2 weight decay. (default: :obj:`5e-4`)
        schedule (LRSchedule or str, optional): The learning rate over the
            epochs, or its spelling (``"cosine,warmup=10"``); :obj:`None` is
            constant. (default: :obj:`None`)
    """

    lr: float = option(0.01, "Adam's learning rate", metavar="LR")
    weight_decay: float = option(5e-4, "Adam's weight decay", metavar="WD")
    schedule: LRSchedule | str | None = option(
        None, f"{'|'.join(SCHEDULES)}[,warmup=N,...]", type=str, metavar="SPEC")

    def check(self) -> None:
        for name in ("lr", "weight_decay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"Adam({name}={value!r}): use a number >= 0")
        object.__setattr__(self, "schedule", _schedule(self.schedule))

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        schedule = self.schedule
        out["schedule"] = schedule.spec() if isinstance(schedule, LRSchedule) else schedule
        return out


#: Why training stopped (``TrainResult.stopped``): the last epoch ran, the
#: target was reached, the patience or the time budget ran out.
STOPS = ("epochs", "target", "patience", "time_budget")


@dataclass(frozen=True)
class Evaluation(Options):
    """When and how the model is evaluated (global accuracies on the three
    masks), and the rules that stop training before its last epoch. Every rank
    takes the same decision: accuracies are global and the budget is checked
    on the slowest rank's clock.

    Args:
        every (int, optional): Evaluate every this many epochs (and after the
            last); epochs in between repeat the last accuracies and are not
            candidates for the best epoch. (default: :obj:`1`)
        halo (HaloPolicy or str, optional): Halo policy of evaluation (a
            policy or its spec); :obj:`None` is exact, whatever the training
            policy. Booked as ``halo_bytes_eval``. (default: :obj:`None`)
        target_acc (float, optional): Stop at the first evaluation whose
            validation accuracy reaches this, in (0, 1]. (default: :obj:`None`)
        patience (int, optional): Stop after this many evaluations in a row
            without a better validation accuracy. (default: :obj:`None`)
        time_budget (float, optional): Stop (after evaluating) at the end of
            the first epoch by which training has run this many seconds.
            (default: :obj:`None`)
        from_training (bool, optional): Take the accuracies from the training
            step's forward instead of a forward of their own: free, and
            honest only where the model computes the same in training as in
            evaluation (no dropout, no batch statistics) under exact halos,
            which :func:`~pyg_dist.train.train` checks at the first step. The
            accuracies of an epoch are then those of the weights it started
            from (one step behind). Graph-parallel training only.
            (default: :obj:`False`)
    """

    every: int = option(1, "evaluate every N epochs", metavar="N")
    halo: HaloPolicy | str | None = option(None, "policy of evaluation (default: exact)",
                                           type=str, metavar="POLICY")
    target_acc: float | None = option(None, "stop at this validation accuracy", type=float,
                                      metavar="A")
    patience: int | None = option(None, "stop after N evaluations without gain", type=int,
                                  metavar="N")
    time_budget: float | None = option(None, "stop after S seconds of training", type=float,
                                       metavar="S")
    from_training: bool = False

    def check(self) -> None:
        cls = type(self)
        _int(cls, "every", self.every, 1, "1 evaluates after every epoch")
        _policy(cls, "halo", self.halo)
        if self.target_acc is not None and (not _number(self.target_acc)
                                            or not 0 < self.target_acc <= 1):
            raise ValueError(f"Evaluation(target_acc={self.target_acc!r}): an accuracy is a "
                             f"fraction in (0, 1], e.g. 0.72 for 72%")
        if self.patience is not None:
            _int(cls, "patience", self.patience, 1, "or None to wait for the last epoch")
        if self.time_budget is not None and (not _number(self.time_budget)
                                             or not self.time_budget > 0):
            raise ValueError(f"Evaluation(time_budget={self.time_budget!r}): give seconds > 0, "
                             f"or None for no budget")
        if not isinstance(self.from_training, bool):
            raise ValueError(f"Evaluation(from_training={self.from_training!r}): use True or "
                             f"False")
        if self.from_training and self.halo is not None:
            raise ValueError("Evaluation(from_training=True) takes the training step's "
                             "accuracies, under its exact halos; leave halo=None")

    @property
    def stops_early(self) -> bool:
        return (self.target_acc, self.patience, self.time_budget) != (None, None, None)


@dataclass(frozen=True)
class Checkpoint(Options):
    """Checkpoints of every rank's model, optimizer, halo and policy state,
    RNG state, ledger and history (see :mod:`pyg_dist.train.checkpoint`).

    Args:
        dir (str): The folder (each machine of a multi-host job writes its
            own ranks' files into its own).
        every (int, optional): Write one every this many epochs (0: never).
            (default: :obj:`0`)
        resume (bool, optional): Continue from the last checkpoint in ``dir``
            when there is one, else start at epoch 1 (so the first start and
            every restart share one command); deterministic policies then end
            with the weights of an uninterrupted run. (default: :obj:`False`)
    """

    dir: str | os.PathLike = option(None, "folder for checkpoints", type=str, metavar="DIR")
    every: int = option(0, "write one every N epochs (0: never)", metavar="N")
    resume: bool = option(False, "continue from the last one, if any")

    def check(self) -> None:
        if not isinstance(self.dir, (str, os.PathLike)) or not os.fspath(self.dir):
            raise ValueError(f"Checkpoint(dir={self.dir!r}): name the folder for checkpoints")
        _int(type(self), "every", self.every, 0, "0 writes none")
        if not isinstance(self.resume, bool):
            raise ValueError(f"Checkpoint(resume={self.resume!r}): use True or False")
