r"""The planner's measurements and predictions for 3D grids: the model's
collectives as plain values, the bytes of a step (the ledger's own count,
exact) and its seconds.

Every sum of a step, an aggregation's partial sums
(:math:`|\text{run}_r| \times |\text{block}_k(F)|`, twice as wide for a
SAGE root) or a transform's (:math:`|\text{run}_r| \times
|\text{block}_e(F_{out})|`), is booked as ``ops.py`` books it: kept
**whole**, an all-reduce of :math:`n` elements over :math:`g` ranks sends
:math:`2 (n - n_i) \cdot 4` bytes from rank :math:`i` (``ops.ring_bytes``),
once forward and once backward; kept **scattered**, a reduce-scatter forward
(an all-gather of the gradients backward) and, where the next aggregation or
transform reads it, an all-gather forward (a reduce-scatter of the
gradients backward), each :math:`(r - r_i) w \cdot 4` bytes for :math:`r`
rows of width :math:`w` (``ops.piece_bytes``), plus a transform's second
all-gather in the backward (its weight's gradient reads the rows it did not
keep). Then the logits' gather (an all-reduce of this rank's rows :math:`\times
C`, both ways) and every parameter's bytes for the gradients' sum. A sum of
the input features alone (a first aggregation without a learnt
:math:`\epsilon`) takes no gradient: no backward of its own. The input
features lie in pieces over the input layout's spare axis: the first
aggregation gathers them (an all-gather's bytes forward, none backward).

A step's compute is its kernels' (:func:`step_work`): an aggregation's
kernel walks its block's entries once a chunk of :data:`~.ops.COLUMNS`
columns (forward, and backward over the transposed block where its input
takes a gradient), so a rank whose block holds every edge for a few columns
(layer 0 on a grid of :math:`(1, 1, P)`) walks :math:`P` times the entries a
graph-parallel rank walks; a transform's are multiply-adds (forward, and
twice backward: the weight's gradient and, where it takes one, the input's).
``measure`` times both kernels on the rank's part. A step takes the longer
of its kernels and exact training's step on a rank of the same world (which
holds the same share of every node matrix: the same elementwise work, loss
and optimizer, and the exact kernels of a share of the graph).

A step's collectives are charged on the link their axis gets: ``measure``
times the grid's own gather and reduce (``distributed.all_gather_rows``,
``distributed.reduce_row_range``) over every kind of axis a grid of the world
has, :math:`g` ranks :math:`s` apart (:func:`axis_key`; every grid's axis of
that kind is made of the same groups), every group of the kind at once, at
two sizes: a call's latency :math:`\alpha_{g,s}` and the bytes per second
:math:`\beta_{g,s}` a rank gets while every rank of its axis sends
(:func:`axis_costs`). Ranks on one machine and ranks across the network,
or an axis of 2 and one of 8, get different figures; the exact probe's
halo exchange gives one for all.
"""
from __future__ import annotations

import itertools
import math
import time
from typing import Any

import torch
from torch import nn

from pyg_dist.ops import spmm
from pyg_dist.runtime import distributed
from pyg_dist.runtime.distributed import row_piece
from pyg_dist.runtime.grids import process_grid
from pyg_dist.strategies.cost import Probe
from pyg_dist.strategies.grid_3d.grid import INPUT, Layout, bounds
from pyg_dist.strategies.grid_3d.ops import COLUMNS, ROWS, piece_bytes, ring_bytes
from pyg_dist.strategies.grid_3d.program import Step, compile_model

__all__ = ["program_of", "collectives", "step_bytes", "step_calls", "step_work", "kernel_costs",
           "axis_key", "axis_costs", "measure", "predict"]

Coords = tuple[int, ...]

#: Bytes each rank sends in the larger of :func:`axis_costs`' two calls.
AXIS_PROBE_BYTES = 1 << 23


def program_of(model: nn.Module, num_features: int) -> list[list[Any]]:
    """The model's sums in order, as plain values: ``["agg", width, copies,
    grad]`` (copies 2: a SAGE root beside the aggregate; grad 1: the
    aggregation takes a gradient of its own, GIN's learnt epsilon) and
    ``["linear", f_in, f_out]``.

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
            out.append(["agg", width, 1, int(bool(conv.eps.requires_grad))])
            for inner in step.inner:
                width = add(inner, width)
            return width
        lin = conv.lin if step.layer == "gcn" else conv.lin_l
        root = step.layer == "sage" and bool(conv.root_weight)
        out.append(["agg", width, 2 if root else 1, 0])
        f_out = int(lin.weight.size(0))
        out.append(["linear", width, f_out])
        return f_out

    width = num_features
    for step in compile_model(model, num_features):
        width = add(step, width)
    return out


def collectives(program: list[list[Any]], shape: tuple[int, int, int], num_nodes: int,
                sums: str = "scatter") -> list[tuple[str, int, list[int]]]:
    """Every collective of a training step as ``(direction, axis, [bytes
    each rank sends])`` (``"fwd"`` or ``"bwd"``; ranks in global order), the
    logits' gather last; the ledger books the same bytes.

    Args:
        program (list): :func:`program_of`'s.
        shape (tuple[int, int, int]): The grid.
        num_nodes (int): :math:`N`.
        sums (str, optional): ``"scatter"`` or ``"whole"`` (``Grid3D.sums``).
            (default: :obj:`"scatter"`)
    """
    return [(direction, axis, sent)
            for direction, axis, sent, _ in _issued(program, shape, num_nodes, sums)]


def _issued(program: list[list[Any]], shape: tuple[int, int, int], num_nodes: int,
            sums: str, columns: int = COLUMNS,
            rows: int = ROWS) -> list[tuple[str, int, list[int], int]]:
    """:func:`collectives`' entries, each with the calls it takes on the
    busiest rank: kept scattered, the step that runs it issues one a chunk
    (an aggregation's ``ops.COLUMNS`` columns, a transform's
    ``ops.ROWS`` rows); kept whole, one all-reduce."""
    ranks = list(itertools.product(*(range(s) for s in shape)))
    summed = _sums(program, shape, num_nodes, ranks)
    chunks = _chunks(program, shape, num_nodes, ranks, columns, rows)
    out: list[tuple[str, int, list[int], int]] = []
    spare = INPUT.spare
    if shape[spare] > 1:  # the input features' pieces, gathered where the first step reads them
        out.append(("fwd", spare, [
            piece_bytes(_run(num_nodes, shape, INPUT.rows, c),
                        _run(program[0][1], shape, INPUT.cols, c), shape[spare], c[spare])
            for c in ranks], chunks[0]))
    for i, (axis, _, sizes, grad) in enumerate(summed):
        if sums == "whole" or shape[axis] == 1:
            sent = [ring_bytes(r * w, shape[axis], c[axis]) for (r, w), c in zip(sizes, ranks)]
            out += [("fwd", axis, sent, 1)] + ([("bwd", axis, sent, 1)] if grad else [])
            continue
        sent = [piece_bytes(r, w, shape[axis], c[axis]) for (r, w), c in zip(sizes, ranks)]
        out.append(("fwd", axis, sent, chunks[i]))  # reduce-scatter (its gradients' all-gather)
        if grad:
            out.append(("bwd", axis, sent, chunks[i]))
        if i + 1 < len(program):  # the reader's all-gather (its gradients' reduce-scatter)
            out.append(("fwd", axis, sent, chunks[i + 1]))
            if program[i + 1][0] == "linear":  # gathered again for the weight's gradient
                out.append(("bwd", axis, sent, chunks[i + 1]))
            if grad:
                out.append(("bwd", axis, sent, chunks[i + 1]))
    axis, layout, _, _ = summed[-1]
    last = program[-1]
    width = last[2] if last[0] == "linear" else last[1]
    split = axis if sums == "scatter" and shape[axis] > 1 else None
    logits = [ring_bytes(_rows(num_nodes, shape, layout, split, c) * width, shape[layout.cols],
                         c[layout.cols]) for c in ranks]
    return out + [("fwd", layout.cols, logits, 1), ("bwd", layout.cols, logits, 1)]


def _chunks(program: list[list[Any]], shape: tuple[int, int, int], num_nodes: int,
            ranks: list[Coords], columns: int, rows: int) -> list[int]:
    """Each step's chunks on the busiest rank: an aggregation's input block's
    columns ``columns`` at a time, a transform's input run's rows ``rows``
    at a time."""
    out, layout = [], INPUT
    for entry in program:
        if entry[0] == "agg":
            width = max(_run(entry[1], shape, layout.cols, c) for c in ranks)
            out.append(max(1, math.ceil(width / columns)))
            layout = layout.aggregated()
        else:
            run = max(_run(num_nodes, shape, layout.rows, c) for c in ranks)
            out.append(max(1, math.ceil(run / rows)))
            layout = layout.transformed()
    return out


def _sums(program: list[list[Any]], shape: tuple[int, int, int], num_nodes: int,
          ranks: list[Coords]) -> list[tuple[int, Layout, list[tuple[int, int]], bool]]:
    """Each sum as ``(axis, its layout, [(rows, width) of each rank's
    partial sum], whether it takes a gradient)``."""
    out, layout = [], INPUT
    for k, entry in enumerate(program):
        if entry[0] == "agg":
            axis, after, width, copies = layout.rows, layout.aggregated(), entry[1], entry[2]
            grad = k > 0 or bool(entry[3] if len(entry) > 3 else 0)
        else:
            axis, after, width, copies, grad = layout.cols, layout.transformed(), entry[2], 1, True
        sizes = [(_run(num_nodes, shape, after.rows, c), _run(width, shape, after.cols, c) * copies)
                 for c in ranks]
        out.append((axis, after, sizes, grad))
        layout = after
    return out


def _run(size: int, shape: tuple[int, int, int], axis: int, coords: Coords) -> int:
    lo, hi = bounds(size, shape[axis], coords[axis])
    return hi - lo


def _rows(num_nodes: int, shape: tuple[int, int, int], layout: Layout, split: int | None,
          coords: Coords) -> int:
    """The rows a rank holds of a matrix in ``layout``: its run, or its piece
    of it on ``split``."""
    run = _run(num_nodes, shape, layout.rows, coords)
    if split is None:
        return run
    lo, hi = row_piece(run, shape[split], coords[split])
    return hi - lo


def step_bytes(program: list[list[Any]], shape: tuple[int, int, int], num_nodes: int,
               param_bytes: int, sums: str = "scatter") -> dict[str, int]:
    """Bytes sent by all ranks in one training step, as the ledger books
    them: ``fwd``, ``bwd`` (the collectives' gradients, and a transform's
    gather again) and ``grad``.

    Args:
        program (list): :func:`program_of`'s.
        shape (tuple[int, int, int]): The grid.
        num_nodes (int): :math:`N`.
        param_bytes (int): The model's parameter bytes.
        sums (str, optional): ``"scatter"`` or ``"whole"`` (``Grid3D.sums``).
            (default: :obj:`"scatter"`)
    """
    out = {"fwd": 0, "bwd": 0}
    for direction, _, sent in collectives(program, shape, num_nodes, sums):
        out[direction] += sum(sent)
    world = shape[0] * shape[1] * shape[2]
    return {**out, "grad": param_bytes * world if world > 1 else 0}


def step_calls(program: list[list[Any]], shape: tuple[int, int, int], num_nodes: int,
               sums: str = "scatter", columns: int = COLUMNS, rows: int = ROWS) -> int:
    """Calls of collectives over more than one rank that the busiest rank
    makes in a training step, the gradients' sum left out: what
    :func:`predict` charges a latency each.

    Args:
        program (list): :func:`program_of`'s.
        shape (tuple[int, int, int]): The grid.
        num_nodes (int): :math:`N`.
        sums (str, optional): ``"scatter"`` or ``"whole"`` (``Grid3D.sums``).
            (default: :obj:`"scatter"`)
        columns (int, optional): An aggregation's columns at a time.
            (default: :obj:`8`)
        rows (int, optional): A transform's rows at a time. (default: :obj:`16384`)
    """
    return sum(calls for _, axis, _, calls in _issued(program, shape, num_nodes, sums,
                                                       columns, rows)
               if shape[axis] > 1)


def step_work(program: list[list[Any]], shape: tuple[int, int, int], num_nodes: int,
              num_edges: float, sums: str = "scatter",
              columns: int = COLUMNS) -> list[tuple[float, int]]:
    """Each rank's kernel work in a training step, in global rank order:
    ``(entries, multiply_adds)``, the adjacency entries its aggregations'
    kernels walk (kept scattered, once a chunk of ``columns`` columns; whole,
    once; forward and, where the input takes a gradient, backward) and its
    transforms' multiply-adds
    (forward, the weight's gradient and, where the input takes one, the
    input's). Each block holds ``num_edges / (s_t s_s)`` entries (its
    layout's target and source axes of :math:`s_t` and :math:`s_s` ranks):
    the mean, which the double permutation holds every block near; summed
    over the ranks, exact whatever the blocks hold.

    Args:
        program (list): :func:`program_of`'s.
        shape (tuple[int, int, int]): The grid.
        num_nodes (int): :math:`N`.
        num_edges (float): :math:`E`, the edges every layout's blocks hold together.
        sums (str, optional): ``"scatter"`` or ``"whole"`` (``Grid3D.sums``).
            (default: :obj:`"scatter"`)
        columns (int, optional): An aggregation's columns at a time.
            (default: :obj:`8`)
    """
    ranks = list(itertools.product(*(range(s) for s in shape)))
    out = []
    for c in ranks:
        entries, macs, layout, learnt, copies = 0.0, 0, INPUT, False, 1
        for entry in program:
            if entry[0] == "agg":
                block = num_edges / (shape[layout.rows] * shape[layout.spare])
                passes = (math.ceil(_run(entry[1], shape, layout.cols, c) / columns)
                          if sums == "scatter" else 1)
                entries += block * passes * (2 if learnt else 1)
                learnt = learnt or bool(entry[3] if len(entry) > 3 else 0)
                layout, copies = layout.aggregated(), entry[2]
            else:  # a SAGE root's copy beside the aggregate has a weight of its own
                after = layout.transformed()
                once = (_run(num_nodes, shape, layout.rows, c)
                        * copies * _run(entry[1], shape, layout.cols, c)
                        * _run(entry[2], shape, after.cols, c))
                macs += once * (3 if learnt else 2)
                learnt, layout, copies = True, after, 1
        out.append((entries, macs))
    return out


def kernel_costs(data: Any, columns: int = COLUMNS, repeats: int = 3) -> tuple[float, float]:
    """Seconds an aggregation's kernel takes an adjacency entry at
    ``columns`` columns, and a transform's a multiply-add, timed on this
    rank's part (its adjacency, and a matmul of up to :data:`~.ops.ROWS`
    rows by 64 x 64); the slowest rank's of each (collective).

    Args:
        data (DistData): This rank's part.
        columns (int, optional): An aggregation's columns at a time.
            (default: :obj:`8`)
        repeats (int, optional): Timings of each kernel (the fastest counts),
            after one that warms it. (default: :obj:`3`)
    """
    graph = data.edge_index
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(graph.num_owned, columns, generator=generator)
    halo = torch.rand(graph.num_halo, columns, generator=generator)
    a = torch.rand(min(max(graph.num_owned, 1), ROWS), 64, generator=generator)
    w = torch.rand(64, 64, generator=generator)

    def fastest(run: Any) -> float:
        times = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        return min(times[1:])

    with torch.no_grad():
        walk = fastest(lambda: spmm(graph.rowptr, graph.col, x, None, "sum", halo))
        mm = fastest(lambda: a @ w)
    entry, mac = walk / max(graph.col.numel(), 1), mm / (a.size(0) * 64 * 64)
    if distributed.world_size() > 1:
        entry, mac = distributed.all_reduce_values([entry, mac], "max")
    return entry, mac


def axis_key(shape: tuple[int, int, int], axis: int) -> str:
    """The kind of ``shape``'s ``axis``, :func:`axis_costs`' key: its ranks
    :math:`g` and the stride :math:`s` between them in rank order (the
    product of the later axes), ``"g/s"``.

    Args:
        shape (tuple[int, int, int]): The grid.
        axis (int): The axis.
    """
    return f"{shape[axis]}/{math.prod(shape[axis + 1:])}"


def axis_costs(world_size: int, nbytes: int = AXIS_PROBE_BYTES,
               repeats: int = 2) -> dict[str, list[float]]:
    r"""``[alpha, beta]`` of every kind of axis (:func:`axis_key`) a grid of
    ``world_size`` ranks has: the seconds of a call and the bytes per second
    a rank sends, from the grid's gather and reduce (their mean) of
    ``ops.COLUMNS`` columns timed at one row a rank and at ``nbytes``
    sent a rank, every group of the kind at once (the fastest of ``repeats``
    after one that opens the connections), the slowest rank's. Collective:
    every rank makes the groups (:func:`~pyg_dist.runtime.grids.process_grid`
    keeps them).

    Args:
        world_size (int): The ranks.
        nbytes (int, optional): Bytes a rank sends in the larger call.
            (default: :obj:`8388608`)
        repeats (int, optional): Timed calls of each size and collective.
            (default: :obj:`2`)
    """
    divisors = [d for d in range(1, world_size + 1) if world_size % d == 0]
    kinds = [(g, s) for g in divisors[1:] for s in divisors if world_size % (g * s) == 0]
    values: list[float] = []
    for g, s in kinds:
        group = process_grid((world_size // (g * s), g, s)).group(1)
        for rows in (g, max(g, math.ceil(nbytes * g / ((g - 1) * 4 * COLUMNS)))):
            busiest = max(piece_bytes(rows, COLUMNS, g, q) for q in range(g))
            values += [busiest, _axis_seconds(group, g, rows, repeats)]
    if values:
        values = distributed.all_reduce_values(values, "max")
    out = {}
    for i, (g, s) in enumerate(kinds):
        small, t_small, large, t_large = values[4 * i : 4 * i + 4]
        beta = (large - small) / (t_large - t_small) if t_large > t_small else large / t_large
        out[f"{g}/{s}"] = [max(t_small - small / beta, 0.0), beta]
    return out


def _axis_seconds(group: Any, size: int, rows: int, repeats: int) -> float:
    """The mean of a gather and a reduce of ``rows`` rows of
    ``ops.COLUMNS`` columns over ``group`` of ``size`` ranks, each the
    fastest of ``repeats`` after one."""
    x = torch.ones(rows, COLUMNS, device=distributed.collective_device(group))
    lo, hi = row_piece(rows, size, distributed.rank(group))
    piece = x[lo:hi].contiguous()
    seconds = []
    for gather in (True, False):
        times = []
        for _ in range(repeats + 1):
            distributed.barrier(group)
            start = time.perf_counter()
            if gather:
                distributed.all_gather_rows(piece, rows, group)
            else:
                distributed.reduce_row_range(x, rows, 0, group)
            times.append(time.perf_counter() - start)
        seconds.append(min(times[1:]))
    return sum(seconds) / len(seconds)


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
    entry, mac = kernel_costs(data)
    return {"program": program, "num_nodes": int(meta.num_nodes),
            "num_edges": int(meta.num_edges), "entry_seconds": entry, "mac_seconds": mac,
            "axes": axis_costs(distributed.world_size()),
            "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()
                               if p.requires_grad)}


def predict(measured: dict[str, Any], shape: tuple[int, int, int], probe: Probe,
            epochs: int, sums: str = "scatter") -> tuple[float, float]:
    """Seconds of a step and bytes over ``epochs`` (all ranks, the ledger's
    count) on the grid ``shape``: the longer of the busiest rank's kernels
    (:func:`step_work` at the costs ``measure`` timed) and the probe's exact
    step, plus each collective's
    :math:`c\\alpha_{g,s} + B/\\beta_{g,s}` on its axis's link
    (``measured["axes"]``, :func:`axis_costs`; the probe's link where
    absent; :math:`B`: the busiest rank's bytes, :math:`c`: its calls, one a
    chunk; every rank's messages of a call travel at once), forward and
    backward, plus the gradients' sum on the probe's link.

    Args:
        measured (dict): :func:`measure`'s.
        shape (tuple[int, int, int]): The grid.
        probe (Probe): The link and the exact compute.
        epochs (int): The planned epochs.
        sums (str, optional): ``"scatter"`` or ``"whole"`` (``Grid3D.sums``).
            (default: :obj:`"scatter"`)
    """
    if "program" not in measured:
        return float("inf"), 0.0
    program, n = measured["program"], measured["num_nodes"]
    world = shape[0] * shape[1] * shape[2]
    kernels = max(entries * measured["entry_seconds"] + macs * measured["mac_seconds"]
                  for entries, macs in step_work(program, shape, n, measured["num_edges"],
                                                 sums))
    seconds = max(probe.exact_compute or probe.compute, kernels)
    links = measured.get("axes", {})
    for _, axis, sent, calls in _issued(program, shape, n, sums):
        if shape[axis] > 1:
            alpha, beta = links.get(axis_key(shape, axis), (probe.latency, probe.bandwidth))
            seconds += calls * alpha + max(sent) / beta
    if world > 1:
        seconds += probe.latency + 2 * measured["param_bytes"] / probe.bandwidth
    nbytes = sum(step_bytes(program, shape, n, measured["param_bytes"], sums).values())
    return seconds, float(nbytes * epochs)
