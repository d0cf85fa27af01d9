"""Node-to-part assignment: METIS (through pymetis) and seeded random cuts.

Both balance the number of nodes per part and, when a training mask is given,
the number of training nodes per part.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from pyg_dist import typing as pyg_dist_typing

__all__ = ["metis_cut", "random_cut", "METHODS"]

METHODS = ("metis", "random")


def random_cut(num_nodes: int, num_parts: int, seed: int, balance: Tensor | None = None) -> Tensor:
    """Assigns nodes to parts uniformly at random, exactly balanced.

    Nodes are dealt round-robin in a seeded random order, training nodes
    (``balance``) first, so part sizes and per-part training counts differ by
    at most one.
    """
    g = torch.Generator().manual_seed(seed)
    part = torch.empty(num_nodes, dtype=torch.long)
    strata = [torch.arange(num_nodes)] if balance is None else [
        balance.nonzero().view(-1),
        (~balance).nonzero().view(-1),
    ]
    offset = 0
    for nodes in strata:
        order = nodes[torch.randperm(nodes.numel(), generator=g)]
        part[order] = (torch.arange(order.numel()) + offset) % num_parts
        offset += order.numel()
    return part


def metis_cut(
    edge_index: Tensor, num_nodes: int, num_parts: int, seed: int, balance: Tensor | None = None
) -> Tensor:
    """Assigns nodes to parts with METIS k-way (recursive bisection for few parts),
    minimising the edge cut of the symmetrised graph (directions, self-loops and
    duplicates removed), balancing node counts and, when ``balance`` is given,
    training-node counts (a second METIS balance constraint).

    A graph without edges has nothing to cut: it falls back to :func:`random_cut`.
    """
    pymetis = pyg_dist_typing.require("pymetis", "partition(method='metis')")
    if num_parts == 1:
        return torch.zeros(num_nodes, dtype=torch.long)
    xadj, adjncy = _symmetric_csr(edge_index, num_nodes)
    if adjncy.size == 0:
        return random_cut(num_nodes, num_parts, seed, balance)
    vweights = None
    if balance is not None and 0 < int(balance.sum()) < num_nodes:
        weights = np.stack([np.ones(num_nodes, dtype=np.int64), balance.numpy().astype(np.int64)])
        vweights = weights.T.reshape(-1)  # METIS wants ncon weights per vertex, interleaved
    adjacency = pymetis.CSRAdjacency(adj_starts=xadj, adjacent=adjncy)
    _, membership = pymetis.part_graph(
        num_parts,
        adjacency=adjacency,
        vweights=vweights,
        options=pymetis.Options(seed=seed),
    )
    return torch.as_tensor(np.asarray(membership), dtype=torch.long)


def _symmetric_csr(edge_index: Tensor, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (xadj, adjncy) of the undirected simple graph underlying ``edge_index``."""
    src, dst = edge_index[0], edge_index[1]
    keep = src != dst
    src, dst = src[keep], dst[keep]
    key = torch.cat([src * num_nodes + dst, dst * num_nodes + src]).unique()  # sorted
    row, col = key // num_nodes, key % num_nodes
    xadj = torch.zeros(num_nodes + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(row, minlength=num_nodes), 0, out=xadj[1:])
    return xadj.numpy(), col.numpy()
