r"""The model on the 3D grid: each step of the model (``program.py``) on
its layout, the aggregations on the adjacency blocks, the transforms on
blocks of the weights, the loss and the accuracies where the logits end."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pyg_dist.metrics import mean_over_ranks
from pyg_dist.ops import spmm
from pyg_dist.runtime import distributed
from pyg_dist.strategies.grid_3d.grid import INPUT, Layout
from pyg_dist.strategies.grid_3d.load import Grid3DData
from pyg_dist.strategies.grid_3d.ops import Coefficients, sum_over
from pyg_dist.strategies.grid_3d.program import Step, compile_model, layouts
from pyg_dist.utils.dropout import DroppedInput, next_call

__all__ = ["Grid3DModel", "Output"]


@dataclass
class Output:
    """A node matrix on the grid.

    Args:
        tensor (torch.Tensor): This rank's block (its run of rows on
            ``layout.rows``, its block of columns on ``layout.cols``).
        layout (Layout): Where the matrix lies.
        width (int): Its columns in all.
    """

    tensor: Tensor
    layout: Layout
    width: int


class Grid3DModel:
    r"""``model`` run on the 3D grid: ``output()`` gives this rank's block
    of the logits, ``loss()`` the global loss, ``logits()`` the whole rows
    of this rank's run where the logits end.

    Args:
        model (torch.nn.Module): The model (every rank holds all of it).
        data (Grid3DData): This rank's share of the graph.
        edge_weight (bool, optional): Whether GCN layers read the graph's
            edge weights. (default: :obj:`False`)

    Attributes:
        steps (list[Step]): The model's steps.
        layouts (list[Layout]): The layout each step starts in, and the
            logits' last.
    """

    def __init__(self, model: nn.Module, data: Grid3DData, edge_weight: bool = False) -> None:
        self.model, self.data, self.place = model, data, data.place
        self.edge_weight = edge_weight
        if edge_weight and not data.weighted:
            raise ValueError("Grid3DModel(edge_weight=True) on a graph without edge weights; "
                             "load a graph with edge_weight or leave edge_weight out")
        self.steps = compile_model(model, data.num_features)
        self.layouts = layouts(self.steps)
        for step, layout in zip(self.steps, self.layouts):
            if step.kind == "conv":
                data.block(layout)  # read every block now, on every rank alike
        self._entry: dict[tuple[Any, ...], Tensor] = {}

    @property
    def end(self) -> Layout:
        """The layout the logits end in."""
        return self.layouts[-1]

    def output(self) -> Output:
        """This rank's block of the model's output (collective)."""
        value = Output(self.data.x, INPUT, self.data.num_features)
        for step in self.steps:
            value = self._run(step, value)
        return value

    def _run(self, step: Step, value: Output) -> Output:
        if step.kind == "dropout":
            return self._dropout(value, step.p)
        if step.kind == "act":
            return Output(step.module(value.tensor), value.layout, value.width)
        if step.kind == "linear":
            return self._linear(value, step.module.weight, step.module.bias, step.name)
        conv = step.module
        if step.layer == "gcn":
            agg = self._aggregate(value, Coefficients("gcn", self.edge_weight,
                                                     bool(conv.improved)), step.name)
            return self._linear(agg, conv.lin.weight, conv.bias, step.name)
        if step.layer == "sage":
            return self._sage(step, value)
        return self._gin(step, value)

    def _sage(self, step: Step, value: Output) -> Output:
        conv = step.module
        kind = "mean" if conv.aggr == "mean" else "sum"
        both = self._aggregate(value, Coefficients(kind), step.name,
                               root_apart=bool(conv.root_weight))
        if not conv.root_weight:
            return self._linear(both, conv.lin_l.weight, conv.lin_l.bias, step.name)
        h = both.tensor.size(1) // 2
        agg = Output(both.tensor[:, :h], both.layout, value.width)
        root = Output(both.tensor[:, h:], both.layout, value.width)
        return self._linear(agg, conv.lin_l.weight, conv.lin_l.bias, step.name,
                            extra=(root, conv.lin_r.weight))

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
        beside it (``root_apart``: SAGE's root, in the same sum)."""
        layout = value.layout
        r, c = layout.spare, layout.rows
        block = self.data.block(layout)
        rowptr, col, entry = self._entries(coefficients, layout)
        h = value.tensor
        out = spmm(rowptr, col, h, entry.to(h.dtype), "sum")
        lo, hi = block.diagonal()
        index = torch.arange(lo - block.rows[0], hi - block.rows[0])
        own = h[lo - block.cols[0] : hi - block.cols[0]]
        if coefficients.kind == "gcn":  # into spmm's own output: nothing else reads it
            diagonal = coefficients.diagonal(self.data, r, lo, hi).to(h.dtype)
            out.index_add_(0, index, own * diagonal.unsqueeze(1))
        if root_apart:
            eye = h.new_zeros(out.shape).index_add(0, index, own)
            out = torch.cat([out, eye], dim=1)
        if root is not None:
            out = out.index_add(0, index, own * root)
        return Output(sum_over(out, self.place, c, self.data.ledger, name,
                               self.model.training), Layout(r, layout.cols), value.width)

    def _entries(self, coefficients: Coefficients,
                 layout: Layout) -> tuple[Tensor, Tensor, Tensor]:
        """``(rowptr, col, entry)`` of the aggregation: the block's own CSR
        and its entries (made once per kind and layout)."""
        block = self.data.block(layout)
        key = (coefficients, layout)
        if key not in self._entry:
            self._entry[key] = coefficients.edges(self.data, block, layout.spare, layout.rows)
        return block.rowptr, block.col, self._entry[key]

    def _linear(self, value: Output, weight: Tensor, bias: Tensor | None, name: str,
                extra: tuple[Output, Tensor] | None = None) -> Output:
        r""":math:`\mathbf{H}\mathbf{W}^\top (+ \mathbf{b})` with this rank's
        block of :math:`\mathbf{W}` (its rows over the spare axis, its columns
        over the cols axis), summed over the cols axis; ``extra`` adds
        another input times its weight to the same sum."""
        layout, place = value.layout, self.place
        f_out, f_in = weight.shape
        lo, hi = place.block(f_in, layout.cols)
        out_lo, out_hi = place.block(f_out, layout.spare)
        partial = value.tensor @ weight[out_lo:out_hi, lo:hi].t()
        if extra is not None:
            partial = partial + extra[0].tensor @ extra[1][out_lo:out_hi, lo:hi].t()
        out = sum_over(partial, place, layout.cols, self.data.ledger, name, self.model.training)
        if bias is not None:
            out = out + bias[out_lo:out_hi]
        return Output(out, layout.transformed(), f_out)

    def _dropout(self, value: Output, p: float) -> Output:
        """Dropout drawn from the hash of (global node, global column): one
        process's masks on every grid."""
        if not self.model.training or p == 0.0:
            return value
        state = self.data.dropout
        if state.seed is None:  # rank 0's draw, on every rank
            state.seed = int(distributed.broadcast(
                torch.randint(0, 2**31 - 1, (1,), dtype=torch.int64)))
        seed, call = next_call(None, state)
        lo, hi = self.place.block(value.width, value.layout.cols)
        columns = torch.arange(lo, hi)
        rows = self.data.global_id(value.layout.rows)
        made = DroppedInput(value.tensor, p, seed, call, None, columns)
        dropped = made.scale(rows, hi - lo) == 0  # kept for the backward: a byte an entry
        out = (value.tensor * (1.0 / (1.0 - p))).masked_fill_(dropped, 0.0)
        return Output(out, value.layout, value.width)

    def counts(self) -> bool:
        """Whether this rank counts its run's rows in the loss and the
        accuracies (one rank of those that hold them: the first on the
        logits' cols and spare axes)."""
        end, coords = self.end, self.place.coords
        return coords[end.cols] == 0 and coords[end.spare] == 0

    def logits(self, value: Output) -> Tensor:
        """``[run, classes]`` the whole logits of this rank's run on the
        logits' rows axis: the column blocks summed over the cols axis
        (differentiably: the backward gives each block its gradient)."""
        lo, hi = self.place.block(value.width, value.layout.cols)
        full = F.pad(value.tensor, (lo, value.width - hi))
        return sum_over(full, self.place, value.layout.cols, self.data.ledger, "logits",
                        self.model.training)

    def loss(self, value: Output) -> tuple[Tensor, float]:
        """The cross entropy averaged over the training nodes of the whole
        graph: this rank's differentiable share and the global value
        (collective)."""
        labels = self.data.labels(value.layout.rows)
        logits = self.logits(value)
        mask = labels["train_mask"] if self.counts() else torch.zeros_like(
            labels["train_mask"])
        share = F.cross_entropy(logits[mask], labels["y"][mask], reduction="sum")
        return mean_over_ranks(share, int(mask.sum()))

    def predictions(self) -> tuple[Tensor | None, dict[str, Tensor]]:
        """The predicted class of this rank's run (:obj:`None` on ranks that
        do not count) and its labels (collective)."""
        value = self.output()
        pred = self.logits(value).argmax(dim=-1)
        return (pred if self.counts() else None), self.data.labels(value.layout.rows)

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
