"""The strategy interface: what every strategy offers the training loop, the
command line and the planner, and the one training step they share.

A strategy is an option dataclass (:class:`Strategy`, checked when made, read
and written as a dictionary) that registers itself by its ``name`` when its
class is defined, as halo policies do. Its hooks are the whole contract:

=================================  ============================================
hook                               asked by
=================================  ============================================
:meth:`Strategy.ranks_per_part`    the CLI, to start ranks for a folder's parts
:meth:`Strategy.graph_parts`       the CLI, to cut the graph for the ranks
:meth:`Strategy.clusters_per_part` the CLI, to cut clusters when it needs them
:meth:`Strategy.load`              the CLI's ranks, to load their part
:meth:`Strategy.check_model`       the CLI, before any rank starts
:meth:`Strategy.check_settings`    :func:`~pyg_dist.train.train` and the CLI
:meth:`Strategy.runner`            :func:`~pyg_dist.train.train`: one run
:meth:`Strategy.measure`           the planner's probe: what the predictions need
:meth:`Strategy.candidates`        the planner: predictions from a probe
=================================  ============================================

A :class:`Runner` is one run of a strategy on one rank. It owns every duty
of the run that depends on the strategy; the loop
(:func:`~pyg_dist.train.train`) owns the rest (the epochs, evaluation's
schedule, stop rules, signals, writing checkpoints):

================================  ===============================================
runner's duty                     hook
================================  ===============================================
a training step                   :meth:`Runner.step` (the base takes
                                  :func:`take_step`; a strategy whose step is
                                  not "forward, global loss, backward, sum
                                  gradients" brings its own, see below)
evaluation                        :meth:`Runner.evaluate`
what its resume needs             :meth:`Runner.state_dict` /
                                  :meth:`Runner.load_state_dict`: the strategy
                                  and gradient sum it trains (a plan's choice
                                  included), its graph's halo, dropout and
                                  ledger state, the gradient sum's state
the end of a run that succeeded   :meth:`Runner.finish` (collective)
the end of every run              :meth:`Runner.close` (local: never a
                                  collective, so one rank's error never waits
                                  for the others)
================================  ===============================================

The strategies that bring their own step, and why: feature parallelism and
the 3D grid (the model runs on a grid of layouts, its loss where the logits
end) share :func:`grid_step`; the layer pipeline (stages exchange
activations, chunk by chunk) has its own; gradient-only training takes
:func:`take_step` on its group of clusters. Every setting a
runner changes for the run is held in a context of the object that owns it
(:meth:`Runner.hold`) and given back on :meth:`Runner.close`.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from pyg_dist.data.dist_data import DistData
from pyg_dist.grads import GradientSync
from pyg_dist.halo.layer import registry_of
from pyg_dist.strategies.cost import Candidate, Probe
from pyg_dist.strategies.options import Options, as_policy
from pyg_dist.strategies.settings import Settings
from pyg_dist.strategies.task import Task, task_of

__all__ = ["Strategy", "Runner", "Step", "STRATEGIES", "as_strategy", "strategy_from_dict",
           "take_step", "grid_step", "train_step", "HETERO_INSTEAD"]

#: Every strategy, by name (``pyg-dist train --strategy NAME``), in the order
#: their classes were defined.
STRATEGIES: dict[str, type[Strategy]] = {}

#: What a strategy that cannot train a heterogeneous graph suggests instead.
HETERO_INSTEAD = ("train it with strategy=GraphParallel(halo=...) (CLI: --strategy "
                  "graph-parallel --halo exact|stale:K|auto|...)")


@dataclass(frozen=True)
class Step:
    """What one training step gives the loop.

    Attributes:
        loss (float): The global training loss.
        forward_seconds (float): Seconds of the step's forward (to the loss).
        logits (torch.Tensor, optional): The forward's logits of this rank's
            rows, where the strategy has them.
    """

    loss: float
    forward_seconds: float = 0.0
    logits: Tensor | None = None


@dataclass(frozen=True)
class Strategy(Options):
    """Base of the training strategies: an option dataclass whose subclasses
    register themselves by ``name`` and answer the hooks of the module's
    table. Every hook but :meth:`runner` has a default: one graph part per
    rank, no clusters, :meth:`~pyg_dist.DistData.load`, any model, no
    heterogeneous graph, evaluation by a forward of its own, no predictions.
    """

    #: The strategy's name (``--strategy NAME``, ``{"name": ...}`` in configs).
    name: ClassVar[str] = ""
    #: A few words on when to use it, for help texts (or an empty string).
    summary: ClassVar[str] = ""
    #: Why the strategy cannot train a heterogeneous graph; empty if it can.
    hetero_refusal: ClassVar[str] = "it trains homogeneous graphs only"
    #: Why the strategy cannot train a model that reads labels as input;
    #: empty if it can.
    labels_refusal: ClassVar[str] = "its steps read the graph's features alone"
    #: Why the strategy cannot train link prediction (supervision edges);
    #: empty if it can.
    links_refusal: ClassVar[str] = "its steps train node labels only"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")
        if name:
            known = STRATEGIES.get(name)
            if known is not None and known.__qualname__ != cls.__qualname__:
                raise ValueError(f"strategy name '{name}' is taken by {known.__name__}; give "
                                 f"{cls.__name__} another name")
            STRATEGIES[name] = cls

    def ranks_per_part(self) -> int:
        """Ranks that share one graph part (1: a part per rank)."""
        return 1

    def graph_parts(self, world_size: int) -> int:
        """The parts the graph is cut into when ``world_size`` ranks train;
        raises :class:`ValueError`, naming the fix, when they cannot.

        Args:
            world_size (int): The ranks.
        """
        share = self.ranks_per_part()
        if world_size % share:
            raise ValueError(f"{self} shares each graph part among {share} ranks, which "
                             f"does not divide the {world_size} ranks; train on a multiple "
                             f"of {share} ranks")
        return world_size // share

    def clusters_per_part(self) -> int:
        """Clusters each part is cut into for this strategy (1: none)."""
        return 1

    def load(self, folder: Any) -> Any:
        """This rank's part of the partition folder ``folder``, loaded as this
        strategy trains it. Collective.

        Args:
            folder (str or os.PathLike): The partition folder.
        """
        return DistData.load(folder)

    def check_model(self, kind: str, layers: int | None = None,
                    options: dict[str, Any] | None = None) -> None:
        """Raises :class:`ValueError`, naming the fix, when this strategy
        cannot train a model of ``kind`` (a name of :mod:`pyg_dist.models`).

        Args:
            kind (str): The model's name (``"gcn"``, ``"gcn2"``, ...).
            layers (int, optional): Its layers; :obj:`None` for its recipe's.
                (default: :obj:`None`)
            options (dict, optional): Its keyword arguments beyond the sizes
                (:class:`~pyg_dist.models.GNN`'s ``norm``, ``skip``, ...);
                :obj:`None` for none. (default: :obj:`None`)
        """

    def continues(self, saved: Strategy) -> bool:
        """Whether a run of this strategy resumes a checkpoint that ``saved``
        trained, and trains on as ``saved`` (the default: when they are the
        same; the planner continues its choice).

        Args:
            saved (Strategy): The strategy the checkpoint records.
        """
        return saved == self

    def check_settings(self, settings: Settings) -> None:
        """Raises :class:`ValueError`, naming the fix, on settings this
        strategy cannot train with.

        Args:
            settings (Settings): The run's settings.
        """
        if settings.hetero and self.hetero_refusal:
            raise ValueError(f"'train' on a heterogeneous graph: {self.hetero_refusal}; "
                             f"{HETERO_INSTEAD}")
        if settings.labels_as_input and self.labels_refusal:
            raise ValueError(f"{self} cannot train a model that reads labels as input: "
                             f"{self.labels_refusal}; train it with "
                             f"strategy=GraphParallel(halo=...) (CLI: --strategy "
                             f"graph-parallel)")
        if settings.links and self.links_refusal:
            able = ", ".join(f"--strategy {n}" for n, c in STRATEGIES.items()
                             if not c.links_refusal)
            raise ValueError(f"{self} cannot train link prediction: {self.links_refusal}; "
                             f"train it with strategy=GraphParallel(halo=...) (CLI: {able})")
        if settings.evaluation.from_training:
            raise ValueError(f"Evaluation(from_training=True) reads the training forward of "
                             f"graph-parallel training under one exact policy (got {self}); "
                             f"evaluate with a forward of its own (from_training=False)")

    def runner(self, model: nn.Module, task: Task, settings: Settings) -> Runner:
        """One run of this strategy on this rank (collective).

        Args:
            model (torch.nn.Module): The model.
            task (Task): What the model trains on.
            settings (Settings): The run's settings, checked.
        """
        raise NotImplementedError(f"{type(self).__name__} has no runner")

    @classmethod
    def measure(cls, model: nn.Module, data: Any) -> Any:
        """What this strategy's :meth:`candidates` need beyond the probe's
        common measurements, the same on every rank (plain values: the
        probe is printed as JSON); :obj:`None` for nothing (the default).
        Called by the planner's probe on every rank, collective.

        Args:
            model (torch.nn.Module): The model.
            data (DistData): This rank's part.
        """
        return None

    @classmethod
    def candidates(cls, probe: Probe, epochs: int) -> list[Candidate]:
        """This strategy's options with their predicted step and bytes
        (pure arithmetic on the probe; none by default).

        Args:
            probe (Probe): What the probe measured.
            epochs (int): The planned epochs.
        """
        return []

    def describe(self) -> dict[str, Any]:
        """The strategy as configs write it: ``{"name": ..., **fields}``."""
        return {"name": self.name, **self.to_dict()}


def as_strategy(value: Any) -> Strategy:
    """The strategy ``train`` was given: :obj:`None` is graph-parallel
    training under the graph's policies, ``"auto"`` the planner's choice.

    Args:
        value (Strategy or str, optional): A strategy, :obj:`None` or ``"auto"``.
    """
    if value is None:
        return STRATEGIES["graph-parallel"]()
    if value == "auto":
        return STRATEGIES["auto"]()
    if not isinstance(value, Strategy):
        spelled = ", ".join(f"{cls.__name__}(...)" for cls in STRATEGIES.values())
        raise TypeError(f"'train' got strategy={value!r}; pass {spelled} or \"auto\" from "
                        f"pyg_dist.config")
    return value


def strategy_from_dict(values: dict[str, Any]) -> Strategy:
    """The strategy ``{"name": ..., **fields}`` spells (what
    :meth:`~pyg_dist.strategies.Strategy.describe` wrote).

    Args:
        values (dict): The strategy's fields and its ``"name"`` (a key of
            :data:`STRATEGIES`; graph-parallel's when missing).
    """
    if not isinstance(values, dict):
        raise ValueError(f"a strategy is read from a JSON object of its fields and its name, "
                         f"e.g. {{'name': 'graph-parallel', 'halo': 'exact'}}, not {values!r}")
    name = values.get("name", "graph-parallel")
    cls = STRATEGIES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"unknown strategy '{name}'; use one of {', '.join(STRATEGIES)}")
    return cls.from_dict(values)  # type: ignore[no-any-return]


class Runner:
    """One run of a strategy on one rank, made by :meth:`Strategy.runner`
    and driven by :func:`~pyg_dist.train.train`: a step per epoch, evaluation
    on the evaluation's schedule, its state in checkpoints, :meth:`Runner.finish`
    after the last epoch and :meth:`Runner.close` at the end. This base
    trains ``model`` on the task's inputs with a
    :class:`~pyg_dist.grads.GradientSync` and evaluates with a forward of its
    own; for the run, the graph's halo registry evaluates under the
    evaluation's policy and knows the planned steps.

    Args:
        strategy (Strategy): The strategy it runs (what checkpoints record).
        model (torch.nn.Module): The model.
        task (Task): What it trains on.
        settings (Settings): The run's settings.
        sync (bool, optional): Whether gradients are summed by a
            :class:`~pyg_dist.grads.GradientSync` of the settings'
            compression. (default: :obj:`True`)

    Attributes:
        plan (Plan, optional): The planner's plan, where the run was chosen
            by one.
    """

    def __init__(self, strategy: Strategy, model: nn.Module, task: Task, settings: Settings,
                 sync: bool = True) -> None:
        self.strategy, self.model, self.task, self.settings = strategy, model, task, settings
        self.plan: Any = None
        self._held = ExitStack()
        registry = task.registry
        #: The halo policy of the graph's layers that set none, as the run
        #: found it (checkpoints record it: the saved halo state is of it).
        self.graph_halo = registry.policy(None).spec() if registry is not None else None
        if registry is not None:
            self.hold(registry.using(eval_default=as_policy(settings.evaluation.halo),
                                     planned_steps=settings.epochs))
        self.sync = (GradientSync(model, settings.grad_sync.compress, task.ledger,
                                  planned_steps=settings.epochs) if sync else None)

    def hold(self, context: AbstractContextManager[Any]) -> Any:
        """Enters ``context`` (a setting of the graph's, say) until :meth:`close`."""
        return self._held.enter_context(context)

    @property
    def ledger(self) -> Any:
        """The ledger the run books into (:obj:`None` in one process)."""
        return self.task.ledger

    def step(self, epoch: int, optimizer: torch.optim.Optimizer) -> Step:
        """Epoch ``epoch``'s training step (1-based). Collective.

        Args:
            epoch (int): The epoch.
            optimizer (torch.optim.Optimizer): The optimizer to step.
        """
        return take_step(self.model, self.task.for_epoch(epoch), optimizer, self.sync)

    def evaluate(self, step: Step) -> tuple[float, float, float]:
        """Global accuracies on the train, validation and test masks after
        ``step``. Collective.

        Args:
            step (Step): The epoch's training step.
        """
        return self.task.evaluate(self.model)

    def describe(self) -> dict[str, Any]:
        """How the run trains: the policy of layers that set none (its spec)
        and whether a static input's halo is fetched once."""
        registry = self.task.registry
        if registry is None:
            return {}
        policy = registry.policy(None)
        return {"halo": policy.spec(), "input_cache": bool(getattr(policy, "cache_inputs",
                                                                   True))}

    def plan_summary(self) -> dict[str, Any] | None:
        """The planner's predictions and choice, where a plan chose the run
        (also after a resume, from the checkpoint); else :obj:`None`."""
        return self.plan.summary() if self.plan is not None else None

    def state_dict(self) -> dict[str, Any]:
        """Everything the run's resume needs besides the model and optimizer:
        the strategy and gradient sum it trains, the policy of the graph's
        layers that set none (:attr:`graph_halo`), the plan that chose them,
        the halo and dropout state and the ledger of the graph it trains on,
        the gradient sum's state. Collective where halo exchanges are in
        flight (they complete first)."""
        registry, ledger = registry_of(self.task.data), self.ledger
        return {"strategy": self.strategy.describe(),
                "grad_sync": self.settings.grad_sync.to_dict(),
                "graph_halo": self.graph_halo, "plan": self.plan_summary(),
                "halo": registry.state_dict() if registry is not None else None,
                "ledger": ledger.state_dict() if ledger is not None else None,
                "grad_state": self.sync.state_dict() if self.sync is not None else {}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`.

        Args:
            state (dict): What :meth:`state_dict` returned.
        """
        registry, ledger = registry_of(self.task.data), self.ledger
        if registry is not None and state.get("halo") is not None:
            registry.load_state_dict(state["halo"])
        if ledger is not None and state.get("ledger") is not None:
            ledger.load_state_dict(state["ledger"])
        if self.sync is not None:
            self.sync.load_state_dict(state.get("grad_state", {}))
        if self.plan is None and state.get("plan") is not None:
            self.plan = _SavedPlan(state["plan"])

    def finish(self) -> None:
        """After the last epoch of a run that succeeded: completes halo
        exchanges still in flight. Collective."""
        if self.task.registry is not None:
            self.task.registry.flush()

    def close(self) -> None:
        """Gives the graph back the settings the run changed. Local (also
        after an error on this rank alone, when the others are not there)."""
        self._held.close()


@dataclass(frozen=True)
class _SavedPlan:
    """A plan as a checkpoint recorded it (the run resumed its choice)."""

    values: dict[str, Any]

    def summary(self) -> dict[str, Any]:
        return dict(self.values)


def take_step(model: nn.Module, task: Task, optimizer: torch.optim.Optimizer,
              sync: GradientSync | None = None, inputs: tuple[Any, ...] | None = None,
              loss_scale: float = 1.0) -> Step:
    """The training step every strategy takes: the model on ``inputs``
    (default: the task's), the loss averaged over the training nodes of all
    ranks, the gradients of this rank's share (times ``loss_scale``) summed
    over the ranks by ``sync``, one optimizer step. Collective.

    Args:
        model (torch.nn.Module): The model.
        task (Task): Its labels, training mask and inputs.
        optimizer (torch.optim.Optimizer): The optimizer to step.
        sync (GradientSync, optional): Runs the model and sums its gradients;
            :obj:`None` for a plain one. (default: :obj:`None`)
        inputs (tuple, optional): The model's arguments; :obj:`None` for the
            task's. (default: :obj:`None`)
        loss_scale (float, optional): Scales this rank's share of the loss.
            (default: :obj:`1.0`)
    """
    sync = sync or GradientSync(model)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    start = time.perf_counter()
    out = task.logits(sync(*(inputs or task.inputs)))
    loss, value = task.loss(out, model)
    forward = time.perf_counter() - start
    sync.backward(loss * loss_scale if loss_scale != 1.0 else loss)
    optimizer.step()
    return Step(value, forward, out)


def grid_step(model: nn.Module, optimizer: torch.optim.Optimizer,
              loss: Callable[[], tuple[Tensor, float]], sum_gradients: Callable[[], None]) -> Step:
    """The training step of a strategy whose model runs on a grid of its own
    (feature parallelism, the 3D grid): ``loss()`` runs the model on the grid
    and returns the loss to backpropagate and the global loss's value;
    ``sum_gradients()`` sums the parameters' gradients over the grid before
    one optimizer step. Collective.

    Args:
        model (torch.nn.Module): The model.
        optimizer (torch.optim.Optimizer): The optimizer to step.
        loss (Callable): The grid's forward and loss.
        sum_gradients (Callable): The grid's gradient sum.
    """
    model.train()
    optimizer.zero_grad(set_to_none=True)
    start = time.perf_counter()
    value, number = loss()
    forward = time.perf_counter() - start
    value.backward()
    sum_gradients()
    optimizer.step()
    return Step(number, forward)


def train_step(model: nn.Module, data: Any, optimizer: torch.optim.Optimizer,
               sync: GradientSync | None = None, inputs: tuple[Any, ...] | None = None,
               loss_scale: float = 1.0) -> float:
    """One optimisation step on the global loss (:func:`~pyg_dist.strategies.take_step`); returns
    the global loss. Collective.

    Args:
        model (torch.nn.Module): The model, called as
            ``model(data.x, data.edge_index)`` unless ``inputs`` say otherwise.
        data (DistData or torch_geometric.data.Data): The graph, with ``y``
            and ``train_mask``.
        optimizer (torch.optim.Optimizer): The optimizer to step.
        sync (GradientSync, optional): Runs the model and sums its gradients;
            :obj:`None` for a plain one. (default: :obj:`None`)
        inputs (tuple, optional): The model's arguments. (default: :obj:`None`)
        loss_scale (float, optional): Scales this rank's share of the loss.
            (default: :obj:`1.0`)
    """
    task = task_of(data, model, inputs)
    return take_step(model, task, optimizer, sync, inputs, loss_scale).loss
