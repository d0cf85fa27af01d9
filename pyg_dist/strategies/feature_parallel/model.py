"""The model on the grid: runs the compiled program step by step, each
node matrix in its layout, keeping what does not change between steps."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pyg_dist.data.dist_data import DistEdgeIndex
from pyg_dist.grads.sync import LAYER as GRADIENTS_LAYER
from pyg_dist.halo import Exact, LayerHalo
from pyg_dist.halo.ledger import ALL_TO_ALL, GRADIENTS
from pyg_dist.metrics import global_loss
from pyg_dist.nn.preaggregate import owned_only, pre_aggregated, pre_aggregates, weights_reason
from pyg_dist.ops import spmm
from pyg_dist.runtime import distributed
from pyg_dist.strategies.feature_parallel.load import FeatureParallelData
from pyg_dist.strategies.feature_parallel.ops import (
    ColumnLoss,
    GCNCoefficients,
    Mover,
    Redistribute,
    SumCoefficients,
)
from pyg_dist.strategies.feature_parallel.plan import (
    a2a_rows,
    choose_orders,
    loss_on_columns,
    needs,
)
from pyg_dist.strategies.feature_parallel.program import (
    AGGREGATE_FIRST,
    COLUMNS,
    LINEAR_MESSAGES,
    ROWS,
    RUNS,
    Op,
    compile_model,
)
from pyg_dist.utils.dropout import DroppedInput, next_call


@dataclass
class _Value:
    """A node matrix in one or both layouts; ``static``: the graph's input
    features, unchanged."""

    tensors: dict[str, Tensor]
    width: int
    static: bool = False


@dataclass
class _Kept:
    """A value kept with what it was made from (tensors, or :obj:`None`):
    it serves a later call whose sources are the same, unchanged tensors
    (identity and in-place version). A static input's rows, a layer's
    aggregate of it (input and edge weights), the part's labels (classes
    and mask)."""

    sources: tuple[Tensor | None, ...]
    versions: tuple[int, ...]
    value: Tensor

    @classmethod
    def of(cls, sources: tuple[Tensor | None, ...], value: Tensor) -> _Kept:
        return cls(sources, _versions(sources), value)

    def serves(self, sources: tuple[Tensor | None, ...]) -> bool:
        return (len(sources) == len(self.sources)
                and all(a is b for a, b in zip(sources, self.sources))
                and _versions(sources) == self.versions)


def _versions(sources: tuple[Tensor | None, ...]) -> tuple[int, ...]:
    return tuple(-1 if t is None else t._version for t in sources)


class FeatureParallelModel:
    r"""``model`` run on the grid: calling it gives the logits of this
    rank's row block (``[row block, classes]``). Each step of the model
    (:func:`compile_model`) runs in the layout its plan says
    (:func:`choose_orders`: the orders that move the fewest bytes), the
    halos of column slices under the graph's policies, the all-to-alls booked
    in the graph's ledger apart (direction ``"all_to_all"``; ``"eval"`` in
    evaluation). A static input's rows layout is made once and kept, and so
    is the rows layout of a layer's aggregate of it (``_aggregate_rows``).

    Args:
        model (torch.nn.Module): The model (every rank holds all of it).
        data (FeatureParallelData): This rank's share of the graph.

    Attributes:
        ops (list[Op]): The model's steps.
        orders (list[str]): Each conv's order.
    """

    def __init__(self, model: nn.Module, data: FeatureParallelData) -> None:
        self.model, self.data, self.grid = model, data, data.grid
        self.graph: DistEdgeIndex = data.edge_index
        self.ops = compile_model(model, data.num_features)
        self.program = [op.spec() for op in self.ops]
        slices = self.grid.slices
        halo = distributed.all_reduce_values([float(self.graph.num_halo)])[0] / slices
        self.orders = choose_orders(self.program, a2a_rows(data.meta.num_nodes, slices), halo,
                                    slices)
        self._needs, self._names = self._plan_needs()
        self._mover = Mover(self.grid, self.graph)
        self._static: dict[str, _Kept] = {}
        self._aggregates: dict[tuple[str, str], _Kept] = {}
        self._targets: _Kept | None = None
        self._empty = torch.empty(2, 0, dtype=torch.long, device=data.x.device)

    def _plan_needs(self) -> tuple[list[set[str]], list[str]]:
        """Per step, the layouts its input is wanted in (those of the next
        step that is no elementwise one), and the name layout changes before
        it are booked under (that step's layer, or ``"logits"``)."""
        steps = [*self.program, ["end"]]
        orders, at = iter(self.orders), {}
        for i, spec in enumerate(steps):
            if spec[0] == "conv":
                at[i] = next(orders)
        wanted, names = [], []
        for i in range(len(steps)):
            consumer = next(j for j in range(i, len(steps))
                            if steps[j][0] not in ("dropout", "act"))
            wanted.append(needs(steps[consumer], at.get(consumer, AGGREGATE_FIRST)))
            names.append(self._name(self.ops[consumer]) if consumer < len(self.ops)
                         else "logits")
        return wanted, names

    def __call__(self, edge_weight: Tensor | None = None) -> Tensor:
        """This rank's row block of the model's output (collective).

        Args:
            edge_weight (torch.Tensor, optional): ``[part edges]`` weights of
                the part's edges, given to the layers that take them (as the
                model would pass them). (default: :obj:`None`)
        """
        return self.rows(self.output(edge_weight))

    def rows(self, value: _Value) -> Tensor:
        """The row block of an :meth:`output` (collective)."""
        return self._materialize(value, {ROWS}, "logits").tensors[ROWS]

    def output(self, edge_weight: Tensor | None = None) -> _Value:
        """The model's output in the layout its last step leaves it in
        (collective; the arguments of :meth:`__call__`)."""
        value = _Value({COLUMNS: self.data.x}, self.data.num_features, static=True)
        orders = iter(self.orders)
        for i, op in enumerate(self.ops):
            value = self._materialize(value, self._needs[i], self._names[i])
            if op.kind == "dropout":
                value = self._dropout(value, op.p)
            elif op.kind == "act":
                value = _Value({k: op.module(t) for k, t in value.tensors.items()}, value.width)
            elif op.kind == "norm":
                value = _Value({ROWS: op.module(value.tensors[ROWS])}, value.width)
            else:
                value = self._conv(op, next(orders), value, edge_weight)
        return value

    def loss(self, value: _Value, y: Tensor, mask: Tensor) -> tuple[Tensor, float]:
        """The training loss of an :meth:`output` (as
        :func:`~pyg_dist.train.global_loss` gives it): on the columns
        where the output is there alone and :func:`loss_on_columns` says so
        (two statistics per row cross instead of the logits), else on the
        rows. Collective.

        Args:
            value: The model's :meth:`output`.
            y (torch.Tensor): ``[row block]`` classes.
            mask (torch.Tensor): ``[row block]`` the nodes the loss counts.
        """
        if ROWS in value.tensors or value.static or not loss_on_columns(value.width,
                                                                         self.grid.slices):
            return global_loss(self.rows(value), y, mask)
        kept = self._targets
        if kept is None or not kept.serves((y, mask)):
            kept = self._targets = _Kept.of((y, mask), self._gather_targets(y, mask))
        return ColumnLoss.of(value.tensors[COLUMNS], kept.value, value.width, self.grid,
                              self.graph.ledger, self._direction)

    def _gather_targets(self, y: Tensor, mask: Tensor) -> Tensor:
        """``[part rows]`` each row's class where the mask counts it, else
        -1, from every row block of the part (an all-to-all, booked as
        ``logits/labels``)."""
        slices = self.grid.slices
        mine = torch.where(mask, y, torch.full_like(y, -1)).view(-1, 1).expand(-1, slices)
        with torch.no_grad():
            out = self._mover.move(mine.contiguous(), False, slices, "logits/labels",
                                   self._direction)
        return out.view(-1)

    def _name(self, op: Op) -> str:
        return self.graph.registry.name(op.module) if op.kind in ("conv", "norm") else "input"

    @property
    def _direction(self) -> str:
        return ALL_TO_ALL if self.model.training else "eval"

    def _move(self, x: Tensor, layout: str, width: int, name: str) -> Tensor:
        return Redistribute.apply(x, self._mover, layout == ROWS, width, f"{name}/{layout}",
                                   self._direction)

    def _materialize(self, value: _Value, wanted: set[str], name: str) -> _Value:
        """``value`` in the ``wanted`` layouts only (a static input's rows
        made once and kept)."""
        for layout in sorted(wanted - value.tensors.keys()):
            source = next(iter(value.tensors.values()))
            if value.static:
                kept = self._static.get(layout)
                if kept is None or not kept.serves((source,)):
                    with torch.no_grad():
                        moved = self._move(source, layout, value.width, "input")
                    kept = self._static[layout] = _Kept.of((source,), moved)
                value.tensors[layout] = kept.value
            else:
                value.tensors[layout] = self._move(source, layout, value.width, name)
        return _Value({k: t for k, t in value.tensors.items() if k in wanted}, value.width,
                      value.static)

    def _rows_of(self, layout: str) -> Tensor:
        ids = self.graph.global_id
        return ids if layout == COLUMNS else ids[self.data.rows[0] : self.data.rows[1]]

    def _columns_of(self, layout: str, width: int) -> Tensor | None:
        if layout == ROWS:
            return None
        lo, hi = self.grid.bounds(width)
        return torch.arange(lo, hi, device=self.graph.device)

    def _dropout(self, value: _Value, p: float) -> _Value:
        """Dropout drawn from the graph's hash of (global node, global
        column): the masks of one process, in every layout."""
        if not self.model.training or p == 0.0:
            return value
        state = self.graph.registry.dropout
        if state.seed is None:  # rank 0's draw, on every rank of the grid
            state.seed = int(distributed.broadcast(
                torch.randint(0, 2**31 - 1, (1,), dtype=torch.int64)))
        seed, call = next_call(self.graph)
        out = {layout: DroppedInput(t, p, seed, call, self.graph,
                                    self._columns_of(layout, value.width)).apply(
                                        self._rows_of(layout))
               for layout, t in value.tensors.items()}
        return _Value(out, value.width)

    def _conv(self, op: Op, order: str, value: _Value, edge_weight: Tensor | None) -> _Value:
        weight = edge_weight if op.weighted else None
        if op.layer == "gcn":
            return self._gcn(op, order, value, weight)
        if op.layer == "sage":
            return self._sage(op, order, value, weight)
        return self._linear(op, value, weight)

    def _gcn(self, op: Op, order: str, value: _Value, weight: Tensor | None) -> _Value:
        conv, f_out, name = op.module, op.widths[1], self._name(op)
        coefficients = GCNCoefficients(bool(conv.normalize), bool(conv.improved),
                                        bool(conv.add_self_loops))
        if order == AGGREGATE_FIRST:
            agg = self._aggregate_rows(conv, name, value, coefficients, weight, f_out)
            out = F.linear(agg, conv.lin.weight)
            return _Value({ROWS: out if conv.bias is None else out + conv.bias}, f_out)
        z = self._move(F.linear(value.tensors[ROWS], conv.lin.weight), COLUMNS, f_out, name)
        out = self._aggregate(conv, z, coefficients, weight, f_out)
        if conv.bias is not None:
            lo, hi = self.grid.bounds(f_out)
            out = out + conv.bias[lo:hi]
        return _Value({COLUMNS: out}, f_out)

    def _sage(self, op: Op, order: str, value: _Value, weight: Tensor | None) -> _Value:
        conv, f_out, name = op.module, op.widths[1], self._name(op)
        coefficients = SumCoefficients(conv.aggr == "mean", weighted_mean=True)
        if order == AGGREGATE_FIRST:
            if conv.project:
                width = int(conv.lin.out_channels)
                source = self._move(conv.lin(value.tensors[ROWS]).relu(), COLUMNS, width, name)
                agg = self._aggregate_rows(conv, name, _Value({COLUMNS: source}, width),
                                           coefficients, weight, f_out)
            else:
                agg = self._aggregate_rows(conv, name, value, coefficients, weight, f_out)
            out = conv.lin_l(agg)
        else:
            z = self._move(F.linear(value.tensors[ROWS], conv.lin_l.weight), COLUMNS, f_out,
                           name)
            agg = self._aggregate(conv, z, coefficients, weight, f_out)
            out = self._move(agg, ROWS, f_out, name)
            if conv.lin_l.bias is not None:
                out = out + conv.lin_l.bias
        if conv.root_weight:
            out = out + conv.lin_r(value.tensors[ROWS])
        if conv.normalize:
            out = F.normalize(out, p=2.0, dim=-1)
        return _Value({ROWS: out}, f_out)

    def _linear(self, op: Op, value: _Value, weight: Tensor | None) -> _Value:
        """A generic-path layer whose message is ``x_j`` times an optional
        edge weight: its own ``forward`` on rows, its ``propagate`` the
        aggregation of its input's column slice."""
        conv, f_out, name = op.module, op.widths[1], self._name(op)
        rows = value.tensors[ROWS]
        coefficients = SumCoefficients(conv.aggr == "mean", weighted_mean=False)
        weight_arg = LINEAR_MESSAGES[conv.pyg_class]

        def propagate(edge_index: Any, size: Any = None, **kwargs: Any) -> Tensor:
            x = kwargs.get("x")
            source = x[0] if isinstance(x, tuple) else x
            if source is not rows:
                raise ValueError(f"'{type(conv).__name__}' propagates something else than its "
                                 f"input; feature-parallel training runs {RUNS}")
            w = kwargs.get(weight_arg) if weight_arg is not None else None
            return self._aggregate_rows(conv, name, value, coefficients, w, f_out)

        extra = {weight_arg: weight} if weight_arg is not None and weight is not None else {}
        with _propagating(conv, propagate):
            out = conv(rows, self._empty, **extra)
        return _Value({ROWS: out}, f_out)

    def _aggregate_rows(self, layer: Any, name: str, value: _Value, coefficients: Any,
                        weight: Tensor | None, out_width: int) -> Tensor:
        """The layer's aggregation of ``value``'s columns, in the rows
        layout. The aggregate of a static input (the graph's features,
        unchanged) under edge weights that need no gradient is made at the
        first call and kept while input and weights stay the same unchanged
        tensors, per halo policy the layer runs (training's and evaluation's
        apart when they differ): its halo and its all-to-all are not run
        again. Kept only where the policy's halo of such an input is the
        one exact exchange (:class:`~pyg_dist.halo.Exact` caching inputs;
        any policy on one graph part, without halo)."""
        columns = value.tensors[COLUMNS]
        policy = self._kept_under(layer, value, weight)
        kept = None if policy is None else self._aggregates.get((name, policy))
        if kept is not None and kept.serves((columns, weight)):
            return kept.value
        agg = self._aggregate(layer, columns, coefficients, weight, out_width)
        rows = self._move(agg, ROWS, value.width, name)
        if policy is not None:
            self._aggregates[name, policy] = _Kept.of((columns, weight), rows.detach())
        return rows

    def _kept_under(self, layer: Any, value: _Value, weight: Tensor | None) -> str | None:
        """The key (the halo policy's spec) under which the layer's
        aggregate of ``value`` is kept, :obj:`None` where it is not."""
        if not value.static or (weight is not None and weight.requires_grad):
            return None
        if self.grid.parts == 1:
            return ""
        policy = LayerHalo.policy_of(self.graph, layer.halo, layer.training)
        if type(policy) is not Exact or not policy.cache_inputs:
            return None
        return policy.spec()

    def _aggregate(self, layer: Any, h: Tensor, coefficients: Any, weight: Tensor | None,
                   out_width: int) -> Tensor:
        """The layer's aggregation of ``h`` (a column slice of the part's
        rows) over the graph: its halo under the layer's policy (this
        slice's columns, among the slice's ranks), pre-aggregated where the
        layer or graph asks."""
        graph = self.graph
        if h.size(1) == 0:  # a slice without columns (fewer columns than slices): the
            return h.clone()  # same autograd graph as the other slices' ranks, no exchange
        if pre_aggregates(layer, graph, weights_reason(weight), h):
            covered, value = pre_aggregated(graph, coefficients.key(h.dtype, weight), weight,
                                            lambda: coefficients.whole(graph, weight, h.dtype))
            halo, static = LayerHalo.open(layer, covered, h, out_width)
            fetched = halo.fetch(h, static)
            if fetched.mask is None:
                return spmm(covered.rowptr, covered.col, h, value.to(h.dtype), "sum",
                            x_halo=fetched.rows)
            fetched, halo = owned_only(fetched, graph), None
        else:
            halo, static = LayerHalo.open(layer, graph, h, out_width)
            fetched = halo.fetch(h, static)
        rowptr, col, coefficient = coefficients.local(graph, weight, fetched, halo, h.dtype)
        coefficient = None if coefficient is None else coefficient.to(h.dtype)
        return spmm(rowptr, col, h, coefficient, "sum", x_halo=fetched.rows)

    def sum_gradients(self) -> None:
        """Sums every parameter's gradient over :attr:`FeatureGrid.gradient_group`
        (booked as ``gradients``). Collective."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        start = time.perf_counter()
        distributed.all_reduce_gradients(params, self.grid.gradient_group)
        if distributed.is_distributed():
            sent = sum(p.numel() * p.element_size() for p in params)
            self.graph.ledger.record(GRADIENTS_LAYER, GRADIENTS, bytes_sent=sent,
                                     bytes_recv=sent, exchanges=1,
                                     seconds=time.perf_counter() - start)


@contextmanager
def _propagating(layer: Any, propagate: Callable[..., Tensor]) -> Iterator[None]:
    """``layer.propagate`` is ``propagate`` for the block."""
    had = "propagate" in layer.__dict__
    before = layer.__dict__.get("propagate")
    layer.propagate = propagate
    try:
        yield
    finally:
        if had:
            layer.propagate = before
        else:
            del layer.propagate
