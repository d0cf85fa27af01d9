"""Splitting a deep model's layers into stages of balanced measured cost."""
from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F

from pyg_dist.ops import spmm
from pyg_dist.runtime import distributed
from pyg_dist.strategies.layer_pipeline.layers import adjacency, update

__all__ = ["balance", "measure_costs", "check_stages"]


def check_stages(layers: int, stages: int) -> None:
    """Raises unless ``layers`` can give each of ``stages`` at least one."""
    if stages < 1 or layers < stages:
        raise ValueError(
            f"{layers} layers cannot be split into {stages} stages (each needs at least one "
            f"layer); use more layers or fewer stages")


def balance(costs: list[float], stages: int) -> list[int]:
    """Layers per stage: consecutive runs of ``costs`` (one per layer, each
    stage at least one layer) minimising the most expensive stage.

    Args:
        costs (list[float]): The cost of each layer, in order
            (:func:`measure_costs`).
        stages (int): Number of stages.

    Raises:
        ValueError: If there are fewer layers than stages.
    """
    layers = len(costs)
    check_stages(layers, stages)
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    # best[s][n]: least maximum over splitting the first n layers into s stages
    best = [[inf] * (layers + 1) for _ in range(stages + 1)]
    cut = [[0] * (layers + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for s in range(1, stages + 1):
        for n in range(s, layers - (stages - s) + 1):
            for m in range(s - 1, n):
                value = max(best[s - 1][m], prefix[n] - prefix[m])
                if value < best[s][n] - 1e-12 * max(1.0, abs(value)):
                    best[s][n], cut[s][n] = value, m
    counts, n = [], layers
    for s in range(stages, 0, -1):
        m = cut[s][n]
        counts.append(n - m)
        n = m
    return counts[::-1]


def measure_costs(model: Any, data: Any, repeats: int = 3) -> list[float]:
    """Seconds of forward and backward of each of ``model.convs`` on this
    rank's graph, the input projection added to the first layer and the
    output projection to the last; the mean over all ranks (collective), so
    every rank splits alike. Layers of the same type and width are timed once.

    Args:
        model (torch.nn.Module): The model, with ``convs`` and the input and
            output projections ``lins``.
        data (DistData): This rank's graph.
        repeats (int, optional): Timings of each layer; the median counts.
            (default: :obj:`3`)
    """
    graph = data.edge_index
    x = data.x
    width = model.lins[0].out_features
    h = torch.ones(graph.num_owned, width, dtype=x.dtype, device=x.device)
    halo = torch.ones(graph.num_halo, width, dtype=x.dtype, device=x.device)
    timed: dict[Any, float] = {}

    def seconds(fn: Any) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn().sum().backward()
            times.append(time.perf_counter() - start)
        return sorted(times)[len(times) // 2]

    def conv_cost(conv: Any) -> float:
        key = (type(conv), tuple(p.shape for p in conv.parameters()))
        if key not in timed:
            rowptr, col, value = adjacency(conv, graph, x.dtype)[1]

            def run() -> torch.Tensor:
                h_in = h.detach().requires_grad_()
                agg = spmm(rowptr, col, h_in, value, "sum", x_halo=halo)
                return update(conv, agg, h_in, h)

            timed[key] = seconds(run)
        return timed[key]

    costs = [conv_cost(conv) for conv in model.convs]
    costs[0] += seconds(lambda: model.inputs(x.detach().requires_grad_()))
    costs[-1] += seconds(lambda: F.cross_entropy(model.outputs(h.detach().requires_grad_()),
                                                 torch.zeros(h.size(0), dtype=torch.long)))
    model.zero_grad(set_to_none=True)
    world = distributed.world_size()
    return [c / world for c in distributed.all_reduce_values(costs)]
