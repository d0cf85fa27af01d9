r"""The model on the 3D grid: each step of the model (``program.py``) on
its layout, the aggregations on the adjacency blocks, the transforms on
blocks of the weights, the loss and the accuracies where the logits end.

Each sum is kept as ``sums`` says (``ops.py``): ``"scatter"``, each rank of
the summed axis keeps a piece of the rows (an :class:`Output` with
``split``, :math:`N W / P` a rank), gathered where an aggregation (a chunk
of columns at a time) or a transform (a range of rows at a time) reads it;
elementwise steps, the loss and the accuracies run on the pieces.
``"whole"``, the sum is replicated over its axis."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pyg_dist.metrics import mean_over_ranks
from pyg_dist.runtime import distributed
from pyg_dist.strategies.grid_3d.grid import INPUT, SUMS, Layout
from pyg_dist.strategies.grid_3d.load import Grid3DData
from pyg_dist.strategies.grid_3d.ops import (
    COLUMNS,
    ROWS,
    Aggregation,
    Coefficients,
    Dropping,
    ReLU,
    aggregate,
    gather_rows,
    products,
    sum_over,
    transform,
)
from pyg_dist.strategies.grid_3d.program import Step, compile_model, layouts
from pyg_dist.utils.dropout import DroppedInput, next_call

__all__ = ["Grid3DModel", "Output"]


@dataclass
class Output:
    """A node matrix on the grid.

    Args:
        tensor (torch.Tensor): This rank's block (its run of rows on
            ``layout.rows``, or its piece of that run, its block of columns
            on ``layout.cols``).
        layout (Layout): Where the matrix lies.
        width (int): Its columns in all.
        split (int, optional): The axis the run of rows is cut over further
            (``distributed.row_piece``, by this rank's coordinate there):
            a scattered sum's; :obj:`None`: the whole run. (default:
            :obj:`None`)
        dropout (optional): A dropout not applied yet (a ``DroppedInput``
            of ``pyg_dist.utils.dropout``): ``tensor`` is the matrix before
            it, and what reads the matrix applies it (a scattered aggregation
            a chunk at a time). (default: :obj:`None`)
    """

    tensor: Tensor
    layout: Layout
    width: int
    split: int | None = None
    dropout: DroppedInput | None = None


class Grid3DModel:
    r"""``model`` run on the 3D grid: ``output()`` gives this rank's block
    of the logits, ``loss()`` the global loss, ``logits()`` the whole rows
    of this rank's run where the logits end.

    Args:
        model (torch.nn.Module): The model (every rank holds all of it).
        data (Grid3DData): This rank's share of the graph.
        edge_weight (bool, optional): Whether GCN layers read the graph's
            edge weights. (default: :obj:`False`)
        sums (str, optional): How each sum is kept: ``"scatter"`` (a piece
            of its rows a rank, gathered where it is read) or ``"whole"``
            (all-reduced, replicated over its axis). (default:
            :obj:`"scatter"`)
        columns (int, optional): Scattered, the columns an aggregation
            gathers and sums at a time. (default: ``ops.COLUMNS``)
        rows (int, optional): Scattered, the rows a transform gathers and
            sums at a time. (default: ``ops.ROWS``)

    Attributes:
        steps (list[Step]): The model's steps.
        layouts (list[Layout]): The layout each step starts in, and the
            logits' last.
    """

    def __init__(self, model: nn.Module, data: Grid3DData, edge_weight: bool = False,
                 sums: str = "scatter", columns: int = COLUMNS, rows: int = ROWS) -> None:
        self.model, self.data, self.place = model, data, data.place
        self.edge_weight, self.sums = edge_weight, sums
        self.columns, self.rows_at_a_time = columns, rows
        if sums not in SUMS:
            raise ValueError(f"Grid3DModel(sums={sums!r}): use one of {', '.join(SUMS)}")
        if columns < 1 or rows < 1:
            raise ValueError(f"Grid3DModel(columns={columns}, rows={rows}): give each at "
                             f"least 1")
        if edge_weight and not data.weighted:
            raise ValueError("Grid3DModel(edge_weight=True) on a graph without edge weights; "
                             "load a graph with edge_weight or leave edge_weight out")
        self.steps = compile_model(model, data.num_features)
        self.layouts = layouts(self.steps)
        for step, layout in zip(self.steps, self.layouts):
            if step.kind == "conv":
                data.block(layout)  # read every block now, on every rank alike
        self._entry: dict[tuple[Any, ...], Tensor] = {}
        self._aggregations: dict[tuple[Any, ...], Aggregation] = {}

    @property
    def end(self) -> Layout:
        """The layout the logits end in."""
        return self.layouts[-1]

    def output(self) -> Output:
        """This rank's block of the model's output (collective)."""
        value = Output(self.data.x, INPUT, self.data.num_features, self._split(INPUT.spare))
        for step in self.steps:
            value = self._run(step, value)
        return self._dropped(value)

    def _run(self, step: Step, value: Output) -> Output:
        if value.dropout is not None and not (step.kind == "conv" and self.sums == "scatter"):
            value = self._dropped(value)
        if step.kind == "dropout":
            return self._dropout(value, step.p)
        if step.kind == "act":
            act = ReLU.apply if _is_relu(step.module) else step.module
            return Output(act(value.tensor), value.layout, value.width, value.split)
        if step.kind == "linear":
            return self._linear(value, [step.module.weight], step.module.bias, step.name)
        conv = step.module
        if step.layer == "gcn":
            agg = self._aggregate(value, Coefficients("gcn", self.edge_weight,
                                                     bool(conv.improved)), step.name)
            return self._linear(agg, [conv.lin.weight], conv.bias, step.name)
        if step.layer == "sage":
            return self._sage(step, value)
        return self._gin(step, value)

    def _sage(self, step: Step, value: Output) -> Output:
        conv = step.module
        kind = "mean" if conv.aggr == "mean" else "sum"
        both = self._aggregate(value, Coefficients(kind), step.name,
                               root_apart=bool(conv.root_weight))
        weights = [conv.lin_l.weight] + ([conv.lin_r.weight] if conv.root_weight else [])
        return self._linear(both, weights, conv.lin_l.bias, step.name)

    def _gin(self, step: Step, value: Output) -> Output:
        conv = step.module
        out = self._aggregate(value, Coefficients("sum"), step.name, root=1 + conv.eps)
        for inner in step.inner:
            out = self._run(inner, out)
        return out

    def _aggregate(self, value: Output, coefficients: Coefficients, name: str,
                   root: Tensor | None = None, root_apart: bool = False) -> Output:
        r""":math:`\mathbf{A}\mathbf{H}`, summed over the sources' axis;
        plus ``root`` times the diagonal block :math:`\mathbf{I}\mathbf{H}`
        (GIN's :math:`1 + \epsilon`), or with :math:`\mathbf{I}\mathbf{H}`
        beside it (``root_apart``: SAGE's root, in the same sum). Scattered, a
        chunk of :attr:`columns` columns at a time (``ops.aggregate``)."""
        layout = value.layout
        c, after = layout.rows, Layout(layout.spare, layout.cols)
        agg = self._aggregation(coefficients, layout, root_apart)
        ledger, training = self.data.ledger, self.model.training
        if self.sums == "scatter":
            drop = None
            if value.dropout is not None:
                lo, hi = self.piece(value)
                drop = Dropping(value.dropout, self.data.global_id(layout.rows), lo, hi)
            out = aggregate(value.tensor, agg, self.place, value.split, c, ledger, name,
                            training, root, self.columns, drop)
            return Output(out, after, value.width, self._split(c))
        value = self._dropped(value)
        h = value.tensor  # whole but for the input features, which take no gradient
        if value.split is not None:
            h = gather_rows(h, self.place, value.split, self._run_rows(value), ledger, name,
                            training)
        partial = agg.partial(h, root)  # autograd runs through spmm
        return Output(sum_over(partial, self.place, c, ledger, name, training), after,
                      value.width)

    def _aggregation(self, coefficients: Coefficients, layout: Layout,
                     apart: bool) -> Aggregation:
        """The block of the aggregation that starts in ``layout``, its entries
        and its diagonal (made once per kind and layout)."""
        key = (coefficients, layout, apart)
        if key not in self._aggregations:
            block = self.data.block(layout)
            rowptr, col, entry = self._entries(coefficients, layout)
            lo, hi = block.diagonal()
            diagonal = (coefficients.diagonal(self.data, layout.spare, lo, hi).float()
                        if coefficients.kind == "gcn" else None)
            # runs that do not meet (axes of unequal sizes): an empty diagonal at 0
            start, first = (lo - block.rows[0], lo - block.cols[0]) if hi > lo else (0, 0)
            self._aggregations[key] = Aggregation(
                rowptr, col, entry, block.cols[1] - block.cols[0], start, first, hi - lo,
                diagonal, apart)
        return self._aggregations[key]

    def _split(self, axis: int) -> int | None:
        """``axis`` when a scattered sum over it leaves pieces (more than one rank)."""
        return axis if self.place.shape[axis] > 1 else None

    def _run_rows(self, value: Output) -> int:
        lo, hi = self.data.run(value.layout.rows)
        return hi - lo

    def piece(self, value: Output) -> tuple[int, int]:
        """``[lo, hi)`` of ``value``'s rows within its run on
        ``value.layout.rows``."""
        rows = self._run_rows(value)
        if value.split is None:
            return 0, rows
        return distributed.row_piece(rows, self.place.shape[value.split],
                                     self.place.coords[value.split])

    def rows(self, value: Output) -> Tensor:
        """``[rows]`` global id of each of ``value``'s rows on this rank."""
        lo, hi = self.piece(value)
        return self.data.global_id(value.layout.rows)[lo:hi]

    def _entries(self, coefficients: Coefficients,
                 layout: Layout) -> tuple[Tensor, Tensor, Tensor]:
        """``(rowptr, col, entry)`` of the aggregation: the block's own CSR
        and its entries (made once per kind and layout)."""
        block = self.data.block(layout)
        key = (coefficients, layout)
        if key not in self._entry:
            self._entry[key] = coefficients.edges(self.data, block, layout.spare, layout.rows)
        return block.rowptr, block.col, self._entry[key]

    def _linear(self, value: Output, weights: list[Tensor], bias: Tensor | None,
                name: str) -> Output:
        r""":math:`\sum_j \mathbf{H}_j\mathbf{W}_j^\top (+ \mathbf{b})`
        with this rank's block of each :math:`\mathbf{W}_j` (its rows over
        the spare axis, its columns over the cols axis), summed over the cols
        axis; :math:`\mathbf{H}_j` are the equal column blocks of ``value``
        (SAGE's aggregate and root side by side). Scattered, a range of
        :attr:`rows_at_a_time` rows at a time (``ops.transform``)."""
        layout, place = value.layout, self.place
        f_out, f_in = weights[0].shape
        lo, hi = place.block(f_in, layout.cols)
        out_lo, out_hi = place.block(f_out, layout.spare)
        blocks = [weight[out_lo:out_hi, lo:hi] for weight in weights]
        ledger, training = self.data.ledger, self.model.training
        if self.sums == "scatter":
            tensor = transform(value.tensor, blocks, place, value.split, layout.cols,
                               self._run_rows(value), ledger, name, training,
                               self.rows_at_a_time)
            out = Output(tensor, layout.transformed(), f_out, self._split(layout.cols))
        else:
            out = Output(sum_over(products(value.tensor, blocks), place, layout.cols, ledger,
                                  name, training), layout.transformed(), f_out)
        if bias is not None:
            out.tensor = out.tensor + bias[out_lo:out_hi]
        return out

    def _dropout(self, value: Output, p: float) -> Output:
        """Dropout drawn from the hash of (global node, global column): one
        process's masks on every grid. Left pending (:class:`Output`'s
        ``dropout``) for what reads the matrix to apply."""
        if not self.model.training or p == 0.0:
            return value
        state = self.data.dropout
        if state.seed is None:  # rank 0's draw, on every rank
            state.seed = int(distributed.broadcast(
                torch.randint(0, 2**31 - 1, (1,), dtype=torch.int64)))
        seed, call = next_call(None, state)
        lo, hi = self.place.block(value.width, value.layout.cols)
        # no source kept: what reads the matrix holds it, the draw must not
        made = DroppedInput(value.tensor.new_empty(0), p, seed, call, None, torch.arange(lo, hi))
        return Output(value.tensor, value.layout, value.width, value.split, made)

    def _dropped(self, value: Output) -> Output:
        """``value`` with its pending dropout applied (the mask kept for the
        backward: a byte an entry)."""
        made = value.dropout
        if made is None:
            return value
        kept = made.keep(self.rows(value), value.tensor.size(1))
        out = (value.tensor * (1.0 / (1.0 - made.p))).mul_(kept)
        return Output(out, value.layout, value.width, value.split)

    def counts(self, value: Output) -> bool:
        """Whether this rank counts ``value``'s rows (the logits') in the loss
        and the accuracies: one rank of those that hold them, the first on
        the cols axis and, for a whole run, on the spare axis (each rank of
        the split axis holds its own piece)."""
        end, coords = value.layout, self.place.coords
        return coords[end.cols] == 0 and (value.split is not None or coords[end.spare] == 0)

    def labels(self, value: Output) -> dict[str, Tensor]:
        """``y`` and the masks of ``value``'s rows on this rank."""
        lo, hi = self.piece(value)
        return {key: labels[lo:hi] for key, labels in
                self.data.labels(value.layout.rows).items()}

    def logits(self, value: Output) -> Tensor:
        """``[rows, classes]`` the whole logits of ``value``'s rows on this
        rank (its run on the logits' rows axis, or its piece): the column
        blocks summed over the cols axis (differentiably: the backward gives
        each block its gradient)."""
        lo, hi = self.place.block(value.width, value.layout.cols)
        full = F.pad(value.tensor, (lo, value.width - hi))
        return sum_over(full, self.place, value.layout.cols, self.data.ledger, "logits",
                        self.model.training)

    def loss(self, value: Output) -> tuple[Tensor, float]:
        """The cross entropy averaged over the training nodes of the whole
        graph: this rank's differentiable share and the global value
        (collective)."""
        labels = self.labels(value)
        logits = self.logits(value)
        mask = labels["train_mask"] if self.counts(value) else torch.zeros_like(
            labels["train_mask"])
        share = F.cross_entropy(logits[mask], labels["y"][mask], reduction="sum")
        return mean_over_ranks(share, int(mask.sum()))

    def predictions(self) -> tuple[Tensor | None, dict[str, Tensor]]:
        """The predicted class of this rank's rows of the logits (:obj:`None`
        on ranks that do not count) and their labels (collective)."""
        value = self.output()
        pred = self.logits(value).argmax(dim=-1)
        return (pred if self.counts(value) else None), self.labels(value)

    def sum_gradients(self) -> None:
        """Sums every parameter's gradient over all ranks. Each rank's
        gradient is nonzero only in its blocks of the weights, from its run
        of rows; a block is used by every rank of the rows' axis (disjoint
        rows) and, for a bias or a replicated value, by replicas whose
        gradients are partial sums: the sum over the whole grid is the
        gradient of the whole graph (collective)."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        distributed.all_reduce_gradients(params)
        sent = sum(p.numel() * p.element_size() for p in params)
        if distributed.is_distributed():
            self.data.ledger.record("gradients", "grad", bytes_sent=sent, bytes_recv=sent,
                                    exchanges=1)


def _is_relu(module: Any) -> bool:
    """Whether ``module`` is ReLU (run as ``ops.ReLU``, which keeps a byte an
    entry for its backward)."""
    return module in (torch.relu, F.relu) or (isinstance(module, nn.ReLU)
                                               and not module.inplace)
