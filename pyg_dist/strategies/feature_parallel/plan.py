"""The plan: which order each layer runs in, from a simulation of the
program's events (all-to-alls and halo exchanges, by width)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from pyg_dist.strategies.feature_parallel.program import (
    AGGREGATE_FIRST,
    COLUMNS,
    ROWS,
    TRANSFORM_FIRST,
)

#: Layers above which :func:`choose_orders` stops weighing every combination
#: of orders and picks layer by layer.
MAX_EXHAUSTIVE = 12



@dataclass(frozen=True)
class Event:
    """One communication of a training step (:func:`simulate`).

    Attributes:
        kind: ``"a2a"`` (an all-to-all among a part's ranks), ``"halo"``
            (a halo exchange among a slice's ranks), or, for logits left on
            the columns, ``"labels"`` (the part's labels gathered by its
            ranks, once) and ``"loss"`` (the loss's row statistics summed
            over a part's ranks).
        width: The whole width of the rows moved (each rank moves its share;
            for ``"loss"`` the statistics per row).
        grad: Whether gradients flow back the same way.
        once: Made at the first ``steps`` steps of a run only, then kept: a
            static input's rows, the aggregate of a static input (its halo
            and its all-to-all, one step), or the halo of a static input
            dropped out before a layer (two steps: exchanged, then fetched
            once and kept, the mask applied to it).
        steps: The steps a ``once`` event runs at.
    """

    kind: str
    width: int
    grad: bool
    once: bool = False
    steps: int = 1


def loss_on_columns(classes: int, slices: int) -> bool:
    r"""Whether the loss of logits left on the columns is taken there
    (:meth:`FeatureParallelModel.loss`): where the classes outnumber twice
    the slices, :math:`C > 2T`, so that two values per row in ring
    all-reduces (:math:`4 N (T-1)` values sent, all ranks) move less than
    the logits' all-to-all to rows and its gradient back (:math:`2 C N
    (T-1)/T`).

    Args:
        classes (int): :math:`C`, the logits' width.
        slices (int): :math:`T`.
    """
    return slices > 1 and classes > 2 * slices


def needs(spec: list[Any], order: str) -> set[str]:
    """The layouts step ``spec`` reads its input in, under ``order``:
    aggregating reads columns (and rows where the layer adds its root's
    transform), transforming first reads rows, norms and the logits rows.

    Args:
        spec (list): The step (:meth:`Op.spec`, or ``["end"]`` for the logits).
        order (str): :data:`AGGREGATE_FIRST` or :data:`TRANSFORM_FIRST`.
    """
    kind = spec[0]
    if kind == "norm" or kind == "end":
        return {ROWS}
    _, layer, _, _, root, project = spec
    if layer == "linear":
        return {COLUMNS, ROWS}
    if order == TRANSFORM_FIRST or project:
        return {ROWS}
    return {COLUMNS, ROWS} if layer == "sage" and root else {COLUMNS}


def orders_of(spec: list[Any]) -> tuple[str, ...]:
    """The orders a conv step can run in: both for GCN and for SAGE without
    a projection (linear aggregations commute with the transform), else
    aggregating first.

    Args:
        spec (list): The conv step (:meth:`Op.spec`).
    """
    _, layer, _, _, _, project = spec
    if layer == "gcn" or (layer == "sage" and not project):
        return AGGREGATE_FIRST, TRANSFORM_FIRST
    return (AGGREGATE_FIRST,)


def simulate(program: list[list[Any]], orders: list[str], slices: int = 1) -> list[Event]:
    """The communications of one training step as
    :class:`FeatureParallelModel` runs it.

    Args:
        program (list): The :meth:`Op.spec` of each step.
        orders (list[str]): The order of each conv step.
        slices (int, optional): :math:`T`. (default: :obj:`1`)
    """
    steps = [*program, ["end"]]
    order_at, convs = {}, iter(orders)
    for i, spec in enumerate(steps):
        if spec[0] == "conv":
            order_at[i] = next(convs)
    events: list[Event] = []
    width = next((int(spec[2]) for spec in steps if spec[0] == "conv"), 0)
    layouts, grad, static, dropped = {COLUMNS}, False, True, False
    for i, spec in enumerate(steps):
        consumer = next(j for j in range(i, len(steps)) if steps[j][0] not in ("dropout", "act"))
        wanted = needs(steps[consumer], order_at.get(consumer, AGGREGATE_FIRST))
        if (spec[0] == "end" and layouts == {COLUMNS} and not static
                and loss_on_columns(width, slices)):
            # the loss on the columns (ColumnLoss): the labels once, two statistics per row
            events += [Event("labels", 1, False, once=True), Event("loss", 2, False)]
            break
        for _ in sorted(wanted - layouts):
            events.append(Event("a2a", width, grad and not static, once=static))
        layouts = set(wanted)
        kind = spec[0]
        if kind in ("dropout", "act"):
            dropped, static = static and kind == "dropout", False
        elif kind == "norm":
            grad = True
        elif kind == "conv":
            events += _conv_events(spec, order_at[i], grad, static, dropped)
            _, layer, _, width, _, _ = spec
            layouts = {COLUMNS} if layer == "gcn" and order_at[i] == TRANSFORM_FIRST else {ROWS}
            grad, static, dropped = True, False, False
    return events


def _conv_events(spec: list[Any], order: str, grad: bool, static: bool,
                 dropped: bool) -> list[Event]:
    """The communications of conv step ``spec`` in ``order``: its input
    ``static`` (the graph's features, unchanged: its aggregate in rows is
    made at the first step and kept) or ``dropped`` (dropped out from them:
    its halo is kept, the aggregate moved every step)."""
    _, layer, f_in, f_out, _, project = spec
    if order == TRANSFORM_FIRST:
        out = [Event("a2a", f_out, True), Event("halo", f_out, True)]
        return out + ([Event("a2a", f_out, True)] if layer == "sage" else [])
    if project:
        return [Event("a2a", f_in, True), Event("halo", f_in, True), Event("a2a", f_in, True)]
    if static:
        return [Event("halo", f_in, False, once=True), Event("a2a", f_in, False, once=True)]
    return [Event("halo", f_in, grad, once=dropped, steps=2), Event("a2a", f_in, grad)]


def choose_orders(program: list[list[Any]], a2a_rows: float, halo_rows: float,
                  slices: int = 1) -> list[str]:
    """Each conv's order, the combination whose step moves the fewest rows
    × width: ``a2a_rows`` per all-to-all, ``halo_rows`` per halo exchange
    and :math:`2 T` ``a2a_rows`` per statistic of a loss on the columns
    (the values ring all-reduces of one value per row send, :math:`2 N
    (T-1)`; all ranks, per unit of width; twice where gradients flow back;
    nothing for what a static input or the labels move once). Ties go to
    aggregating first.

    Args:
        program (list): The :meth:`Op.spec` of each step.
        a2a_rows (float): Rows an all-to-all moves per unit of width, :math:`N (T-1)/T`.
        halo_rows (float): Halo rows of the grid's cut, :math:`\\sum_d h_d`.
        slices (int, optional): :math:`T`. (default: :obj:`1`)
    """
    choices = [orders_of(spec) for spec in program if spec[0] == "conv"]

    def cost(orders: list[str]) -> float:
        total = 0.0
        for e in simulate(program, orders, slices):
            if not e.once:
                rows = {"a2a": a2a_rows, "halo": halo_rows,
                        "loss": 2 * slices * a2a_rows}[e.kind]
                total += rows * e.width * (2 if e.grad else 1)
        return total

    if len(choices) > MAX_EXHAUSTIVE:  # layer by layer: the cheaper order given the ones before
        picked: list[str] = []
        for options in choices:
            rest = [o[0] for o in choices[len(picked) + 1:]]
            picked.append(min(options, key=lambda o: cost([*picked, o, *rest])))
        return picked
    return list(min(itertools.product(*choices), key=lambda c: cost(list(c))))


def a2a_rows(num_nodes: int, slices: int) -> float:
    """Rows an all-to-all moves per unit of width, all ranks: :math:`N (T-1)/T`."""
    return num_nodes * (slices - 1) / slices
