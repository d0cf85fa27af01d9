r"""The planner's measurements and predictions for 3D grids: the model's
collectives as plain values, the bytes of a step (the ledger's own count,
exact) and its seconds.

A training step books, per all-reduce of an :math:`n`-element float32
tensor over an axis of :math:`g` ranks, :math:`2 (n - n_i) \cdot 4` bytes
sent by rank :math:`i` (``ops.ring_bytes``),
once forward and once backward: an aggregation's partial sums
(:math:`|\text{run}_r| \times |\text{block}_k(F)|`, twice as wide for a
SAGE root), a transform's (:math:`|\text{run}_r| \times
|\text{block}_e(F_{out})|`), the logits' gather (:math:`|\text{run}_r|
\times C`), then every parameter's bytes for the gradients' sum. The first
aggregation (of the input features, which take no gradient) has no backward.
"""
from __future__ import annotations

import itertools
from typing import Any

from torch import nn

from pyg_dist.strategies.cost import Probe
from pyg_dist.strategies.grid_3d.grid import INPUT, bounds
from pyg_dist.strategies.grid_3d.ops import ring_bytes
from pyg_dist.strategies.grid_3d.program import Step, compile_model

__all__ = ["program_of", "collectives", "step_bytes", "measure", "predict"]


def program_of(model: nn.Module, num_features: int) -> list[list[Any]]:
    """The model's collectives in order, as plain values: ``["agg", width,
    copies]`` (copies 2: a SAGE root beside the aggregate) and ``["linear",
    f_in, f_out]``.

    Args:
        model (torch.nn.Module): The model.
        num_features (int): Its input width.
    """
    out: list[list[Any]] = []

    def add(step: Step, width: int) -> int:
        if step.kind == "linear":
            f_out = int(step.module.weight.size(0))
            out.append(["linear", width, f_out])
            return f_out
        if step.kind != "conv":
            return width
        conv = step.module
        if step.layer == "gin":
            out.append(["agg", width, 1])
            for inner in step.inner:
                width = add(inner, width)
            return width
        lin = conv.lin if step.layer == "gcn" else conv.lin_l
        root = step.layer == "sage" and bool(conv.root_weight)
        out.append(["agg", width, 2 if root else 1])
        f_out = int(lin.weight.size(0))
        out.append(["linear", width, f_out])
        return f_out

    width = num_features
    for step in compile_model(model, num_features):
        width = add(step, width)
    return out


def collectives(program: list[list[Any]], shape: tuple[int, int, int],
                num_nodes: int) -> list[tuple[int, list[int]]]:
    """Every all-reduce of a forward as ``(axis, [elements of each rank])``
    (ranks in global order), the logits' gather last.

    Args:
        program (list): :func:`program_of`'s.
        shape (tuple[int, int, int]): The grid.
        num_nodes (int): :math:`N`.
    """
    ranks = list(itertools.product(*(range(s) for s in shape)))
    out, layout, width = [], INPUT, 0

    def sizes(rows: int, cols_axis: int, cols: int, copies: int = 1) -> list[int]:
        return [_run(num_nodes, shape, rows, c) * _run(cols, shape, cols_axis, c) * copies
                for c in ranks]

    for entry in program:
        if entry[0] == "agg":
            after = layout.aggregated()
            out.append((layout.rows, sizes(after.rows, after.cols, entry[1], entry[2])))
            layout, width = after, entry[1]
        else:
            after = layout.transformed()
            out.append((layout.cols, sizes(after.rows, after.cols, entry[2])))
            layout, width = after, entry[2]
    out.append((layout.cols, [_run(num_nodes, shape, layout.rows, c) * width for c in ranks]))
    return out


def _run(size: int, shape: tuple[int, int, int], axis: int, coords: tuple[int, ...]) -> int:
    lo, hi = bounds(size, shape[axis], coords[axis])
    return hi - lo


def step_bytes(program: list[list[Any]], shape: tuple[int, int, int], num_nodes: int,
               param_bytes: int) -> dict[str, int]:
    """Bytes sent by all ranks in one training step, as the ledger books
    them: ``fwd``, ``bwd`` (the same collectives' gradients) and ``grad``.

    Args:
        program (list): :func:`program_of`'s.
        shape (tuple[int, int, int]): The grid.
        num_nodes (int): :math:`N`.
        param_bytes (int): The model's parameter bytes.
    """
    ranks = list(itertools.product(*(range(s) for s in shape)))
    sums = [sum(ring_bytes(n, shape[axis], c[axis]) for n, c in zip(per_rank, ranks))
            for axis, per_rank in collectives(program, shape, num_nodes)]
    # the first aggregation sums the input's products: no gradient flows back there
    first = 1 if program and program[0][0] == "agg" else 0
    world = len(ranks)
    return {"fwd": sum(sums), "bwd": sum(sums[first:]),
            "grad": param_bytes * world if world > 1 else 0}


def measure(model: nn.Module, data: Any) -> dict[str, Any] | None:
    """What ``Grid3D.candidates`` needs (the same on every rank): the
    model's collectives, the graph's nodes and edges and the parameters'
    bytes; :obj:`None` without node features.

    Args:
        model (torch.nn.Module): The model.
        data (DistData): This rank's part.
    """
    meta = getattr(data, "meta", None)
    if meta is None or "x" not in data.keys():
        return None
    try:
        program = program_of(model, int(data.x.size(1)))
    except ValueError as exc:
        return {"refused": str(exc)}
    return {"program": program, "num_nodes": int(meta.num_nodes),
            "num_edges": int(meta.num_edges),
            "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()
                               if p.requires_grad)}


def predict(measured: dict[str, Any], shape: tuple[int, int, int], probe: Probe,
            epochs: int) -> tuple[float, float]:
    """Seconds of a step and bytes over ``epochs`` (all ranks, the ledger's
    count) on the grid ``shape``: the probe's exact compute (every rank does
    :math:`1/P` of the work on a balanced grid) plus each all-reduce's
    :math:`\\alpha + B/\\beta` (:math:`B`: the busiest rank's bytes), twice
    (forward, backward), plus the gradients' sum.

    Args:
        measured (dict): :func:`measure`'s.
        shape (tuple[int, int, int]): The grid.
        probe (Probe): The link and the exact compute.
        epochs (int): The planned epochs.
    """
    if "program" not in measured:
        return float("inf"), 0.0
    program, n = measured["program"], measured["num_nodes"]
    ranks = list(itertools.product(*(range(s) for s in shape)))
    seconds = probe.exact_compute or probe.compute
    for axis, per_rank in collectives(program, shape, n):
        if shape[axis] > 1:
            busiest = max(ring_bytes(m, shape[axis], c[axis]) for m, c in zip(per_rank, ranks))
            seconds += 2 * (probe.latency + busiest / probe.bandwidth)  # forward, backward
    world = len(ranks)
    if world > 1:
        seconds += probe.latency + 2 * measured["param_bytes"] / probe.bandwidth
    nbytes = sum(step_bytes(program, shape, n, measured["param_bytes"]).values())
    return seconds, float(nbytes * epochs)
