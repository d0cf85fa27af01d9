"""The planner's measurements and predictions for feature-parallel grids:
the probe's sizes per grid, the bytes (the ledger's own count) and the
seconds of a step."""
from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from pyg_dist.data.dist_data import DistData
from pyg_dist.runtime import distributed
from pyg_dist.strategies.cost import Probe, grad_seconds
from pyg_dist.strategies.feature_parallel.grid import NAME, bounds
from pyg_dist.strategies.feature_parallel.plan import a2a_rows, choose_orders, simulate
from pyg_dist.strategies.feature_parallel.program import compile_model


def measure(model: nn.Module, data: Any) -> dict[str, Any] | None:
    """What ``FeatureParallel.candidates`` needs of a graph-parallel
    part (collective): the model's steps, and for every grid of the world
    (:math:`T` dividing it, the folder's parts merged :math:`T` at a time) its
    parts' rows and edges and its cut's halo rows received and sent per part.

    Args:
        model (torch.nn.Module): The model.
        data (DistData): This rank's part.
    """
    if not isinstance(data, DistData) or "x" not in data.keys():
        return None
    try:
        program = [op.spec() for op in compile_model(model, int(data.x.size(1)))]
    except ValueError as exc:
        return {"refused": str(exc)}
    graph = data.edge_index
    plan = graph.plan
    owner = graph.plan.halo_peer.cpu().numpy().astype(np.int64)
    mine = (int(graph.num_owned), int(graph.num_edges), plan.halo_global_id.cpu().numpy(),
            owner)
    parts = distributed.all_gather_objects(mine)
    world = len(parts)
    grids: dict[str, Any] = {}
    for slices in (t for t in range(1, world + 1) if world % t == 0):
        grids[str(slices)] = _grid_sizes(parts, slices)
    return {"program": program, "num_nodes": int(data.meta.num_nodes), "grids": grids,
            "rows": [p[0] for p in parts], "edges": [p[1] for p in parts]}


def _grid_sizes(parts: list[Any], k: int) -> dict[str, list[int]]:
    """Rows, edges, halo rows received and sent of each part of the grid
    that merges the folder's parts ``k`` at a time."""
    count = len(parts) // k
    halos = []
    for d in range(count):
        ids = [(h[o // k != d], o[o // k != d] // k) for _, _, h, o in parts[d * k:(d + 1) * k]]
        gid = np.concatenate([i for i, _ in ids]) if ids else np.empty(0, np.int64)
        own = np.concatenate([o for _, o in ids]) if ids else np.empty(0, np.int64)
        halos.append(np.unique(np.stack([own, gid]), axis=1) if gid.size else
                     np.empty((2, 0), np.int64))
    sent = [0] * count
    for halo in halos:
        for owner, n in zip(*np.unique(halo[0], return_counts=True)):
            sent[int(owner)] += int(n)
    return {"rows": [sum(p[0] for p in parts[d * k:(d + 1) * k]) for d in range(count)],
            "edges": [sum(p[1] for p in parts[d * k:(d + 1) * k]) for d in range(count)],
            "halo": [int(h.shape[1]) for h in halos], "sent": sent}


def predict(program: list[list[Any]], sizes: dict[str, list[int]], slices: int, probe: Probe,
            epochs: int) -> tuple[float, float]:
    """Seconds of a step and bytes over ``epochs`` (all ranks, what the
    ledger books) of ``program`` on the grid of ``slices`` slices whose parts
    have ``sizes`` (:func:`measure`).

    Args:
        program (list): The model's steps (:meth:`Op.spec`).
        sizes (dict): The grid's parts: ``rows``, ``edges``, ``halo``, ``sent``.
        slices (int): :math:`T`.
        probe (Probe): The link, the exact compute, the gradients' bytes.
        epochs (int): The planned epochs.
    """
    rows = sizes["rows"]
    halo_rows = sum(sizes["halo"])
    orders = choose_orders(program, a2a_rows(sum(rows), slices), halo_rows, slices)
    alpha, beta = probe.latency, probe.bandwidth
    busiest_halo = max(h + s for h, s in zip(sizes["halo"], sizes["sent"]))
    seconds = nbytes = 0.0
    for e in simulate(program, orders, slices):
        ways = 2 if e.grad else 1
        if e.kind == "labels":  # int64 classes, each rank's row block to the part's ranks
            nbytes += min(epochs, e.steps) * 8.0 * sum(n * (slices - 1) for n in rows)
            seconds += (alpha + 8.0 * max(rows) * (slices - 1) / slices / beta) / max(epochs, 1)
        elif e.kind == "loss":  # an all-reduce of the part's rows per statistic, each rank its own
            nbytes += epochs * 4.0 * e.width * slices * sum(rows)
            seconds += e.width * (alpha + 4.0 * 2 * (slices - 1) / slices * max(rows) / beta)
        elif e.kind == "a2a":
            if slices == 1:
                continue
            moved = 4.0 * sum(_a2a_elements(n, e.width, slices) for n in rows)
            one = alpha + 4.0 * max(_a2a_busiest(n, e.width, slices) for n in rows) / beta
            if e.once:  # a static input's rows or aggregate, made at the first step and kept
                nbytes += min(epochs, e.steps) * moved
                seconds += min(epochs, e.steps) * one / max(epochs, 1)
            else:
                nbytes += epochs * ways * moved
                seconds += ways * one
        elif len(rows) > 1 and halo_rows:
            moved = 4.0 * halo_rows * e.width
            one = ways * (alpha + busiest_halo * 4.0 * -(-e.width // slices) / beta)
            if e.once:  # a static input's halo: exchanged at the first step(s), then kept
                fills = min(epochs, e.steps)
                nbytes += fills * moved
                seconds += fills * one / max(epochs, 1)
            else:
                nbytes += epochs * ways * moved
                seconds += one
    world = probe.world_size
    grad_bytes = probe.grad_bytes
    nbytes += epochs * world * grad_bytes if world > 1 else 0.0
    return compute_share(sizes, slices, probe) + seconds + grad_seconds(probe, grad_bytes), nbytes


def compute_share(sizes: dict[str, list[int]], slices: int, probe: Probe) -> float:
    r"""The probe's exact compute scaled by the grid's largest share of edges
    and rows per rank, :math:`\max_d (E_d + n_d)/T`, over the probed parts'
    largest, :math:`\max_q (E_q + n_q)`."""
    measured = probe.measured.get(NAME, {})
    probed = max((e + n for e, n in zip(measured.get("edges", []), measured.get("rows", []))),
                 default=0)
    share = max((e + n) / slices for e, n in zip(sizes["edges"], sizes["rows"]))
    return probe.exact_compute * share / probed if probed else probe.exact_compute


def _a2a_elements(n: int, width: int, slices: int) -> int:
    """Elements all ranks of a part of ``n`` rows send in one all-to-all of width ``width``."""
    return n * width - sum((bounds(n, slices, t)[1] - bounds(n, slices, t)[0])
                           * (bounds(width, slices, t)[1] - bounds(width, slices, t)[0])
                           for t in range(slices))


def _a2a_busiest(n: int, width: int, slices: int) -> int:
    """Elements the busiest rank of a part of ``n`` rows sends and receives
    in one all-to-all of width ``width``."""
    out = 0
    for t in range(slices):
        block = bounds(n, slices, t)[1] - bounds(n, slices, t)[0]
        cols = bounds(width, slices, t)[1] - bounds(width, slices, t)[0]
        out = max(out, (n - block) * cols + block * (width - cols))
    return out
