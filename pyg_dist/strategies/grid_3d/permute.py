r"""The double permutation that balances the adjacency's blocks.

A block of the adjacency holds the edges whose target lies in one run of the
node order and whose source lies in another. Cut in the graph's own order, a
community or a hub fills one block and leaves others empty. The nodes are
therefore put in a new order by two permutations:

1. a random one (seeded), which spreads communities over every run;
2. a deal by degree: the nodes, sorted by their total degree (in + out;
   ties in the random order), are dealt in snake order (0, 1, ..., M-1,
   M-1, ..., 0, ...) into :math:`M = \mathrm{lcm}(X, Y, Z)` runs of the
   sizes every axis cuts into, so each run gets as many hubs as any other.

Every axis's runs are unions of those :math:`M` runs, so rows and columns
are balanced on every axis at once; the same order serves rows and columns
(a layer's output rows are the next layer's input rows).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from pyg_dist.strategies.grid_3d.grid import bounds

__all__ = ["PERMUTATIONS", "node_order", "block_nonzeros", "balance"]

#: The node orders :func:`node_order` makes: the graph's own, the random
#: permutation alone, or both permutations.
PERMUTATIONS = ("none", "random", "double")


def node_order(degree: Tensor, shape: tuple[int, int, int], seed: int = 0,
               permute: str = "double") -> Tensor:
    """``[N]`` the global id of the node at each position of the new order.

    Args:
        degree (torch.Tensor): ``[N]`` each node's total degree (in + out).
        shape (tuple[int, int, int]): The grid :math:`(X, Y, Z)`.
        seed (int, optional): The random permutation's seed. (default: :obj:`0`)
        permute (str, optional): ``"double"`` (both permutations),
            ``"random"`` (the first alone) or ``"none"`` (the graph's own
            order). (default: :obj:`"double"`)
    """
    if permute not in PERMUTATIONS:
        raise ValueError(f"'node_order' got permute={permute!r}; use one of "
                         f"{', '.join(PERMUTATIONS)}")
    n = degree.numel()
    if permute == "none":
        return torch.arange(n)
    shuffled = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    if permute == "random":
        return shuffled
    ranked = shuffled[torch.sort(degree[shuffled], descending=True, stable=True).indices]
    runs = math.lcm(*shape)
    sizes = torch.tensor([hi - lo for lo, hi in (bounds(n, runs, m) for m in range(runs))])
    # the snake's run of each dealing slot: rounds of 2M slots (there and back)
    slot = torch.arange(n)
    turn = slot % (2 * runs)
    run = torch.where(turn < runs, turn, 2 * runs - 1 - turn)
    order = torch.empty(n, dtype=torch.long)
    taken = torch.zeros(runs, dtype=torch.long)
    starts = torch.cumsum(torch.cat([torch.zeros(1, dtype=torch.long), sizes[:-1]]), 0)
    # sizes differ by at most one: the first n // runs * runs slots deal evenly
    even = (n // runs) * runs
    for m in range(runs):
        mine = ranked[:even][run[:even] == m]
        order[starts[m] : starts[m] + mine.numel()] = mine
        taken[m] = mine.numel()
    rest = ranked[even:]
    spare = [m for m in range(runs) if taken[m] < sizes[m]]
    assert len(spare) == rest.numel(), "the leftover nodes fill the longer runs"
    for m, v in zip(spare, rest.tolist()):
        order[starts[m] + taken[m]] = v
    return order


def block_nonzeros(edge_index: Tensor, position: Tensor, rows: int, cols: int) -> Tensor:
    """``[rows, cols]`` the edges of each block of the adjacency when the
    targets' positions are cut into ``rows`` runs and the sources' into
    ``cols``.

    Args:
        edge_index (torch.Tensor): ``[2, E]`` (source, target) global ids.
        position (torch.Tensor): ``[N]`` each node's position in the order.
        rows (int): Runs of the targets.
        cols (int): Runs of the sources.
    """
    n = position.numel()
    r = _run_of(position[edge_index[1]], n, rows)
    c = _run_of(position[edge_index[0]], n, cols)
    return torch.bincount(r * cols + c, minlength=rows * cols).view(rows, cols)


def _run_of(pos: Tensor, n: int, pieces: int) -> Tensor:
    """The run of :func:`bounds` each position lies in."""
    starts = torch.tensor([bounds(n, pieces, i)[0] for i in range(pieces)])
    return torch.searchsorted(starts, pos, right=True) - 1


def balance(edge_index: Tensor, num_nodes: int, shape: tuple[int, int, int], seed: int = 0,
            permute: str = "double") -> float:
    """The largest over the mean of the edges a rank holds, over the three
    block layouts of a grid (rows over x, columns over y; rows over z,
    columns over x; rows over y, columns over z), in the order
    :func:`node_order` gives.

    Args:
        edge_index (torch.Tensor): ``[2, E]`` (source, target) global ids.
        num_nodes (int): :math:`N`.
        shape (tuple[int, int, int]): The grid.
        seed (int, optional): The random permutation's seed. (default: :obj:`0`)
        permute (str, optional): :func:`node_order`'s. (default: :obj:`"double"`)
    """
    degree = torch.bincount(edge_index.reshape(-1), minlength=num_nodes)
    order = node_order(degree, shape, seed, permute)
    position = torch.empty_like(order)
    position[order] = torch.arange(num_nodes)
    worst = 0.0
    for r, c in ((0, 1), (2, 0), (1, 2)):
        counts = block_nonzeros(edge_index, position, shape[r], shape[c]).double()
        worst = max(worst, float(counts.max() / counts.mean().clamp(min=1e-12)))
    return worst
