r"""The fewest rows that make a halo exact: a minimum vertex cover per pair of parts.

Today part ``q`` receives from part ``p`` the rows of every source owned by
``p`` that one of ``q``'s targets reads (``q``'s halo block from ``p``, see
:mod:`pyg_dist.partitioning.plan`). For a linear aggregation (GCN, SAGE with
sum or mean, GIN's sum) ``p`` may instead send, for a target of ``q``, the
partial sum of the messages of its own sources into that target. The cut
edges from ``p`` to ``q`` (source owned by ``p``, target owned by ``q``) form a
bipartite graph between ``p``'s sources and ``q``'s targets, and every vertex
cover of it keeps the aggregation exact: a covered source goes as a row, and
a covered target receives one partial sum over its *uncovered* sources. A
minimum vertex cover sends the fewest rows; by König's theorem its size is
that of a maximum matching, from which it is built:

.. math::
    C = (L \setminus Z) \cup (R \cap Z),

where :math:`Z` holds the vertices reached by alternating paths (free edges
from left to right, matched edges back) from the unmatched left vertices.

This module builds the whole graph's plan (:func:`vertex_cover_plan`, which
``benchmarks/preaggregate.py`` counts) and the cover of one pair
(:func:`min_cover`). The exchange uses the latter: each receiver covers its
pairs itself, every in-edge being local to its target's owner, and tells
the senders what to sum (:mod:`pyg_dist.halo.cover`,
:meth:`pyg_dist.DistEdgeIndex.pre_aggregated`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import breadth_first_order, maximum_bipartite_matching
from torch import Tensor

from pyg_dist.partitioning.arrays import chunks, small_int_dtype

__all__ = ["CoverPlan", "vertex_cover_plan", "min_cover"]


@dataclass
class CoverPlan:
    """A minimum vertex cover of the cut edges of every ordered pair of parts.

    Attributes:
        sources: ``sources[p][q]``: ``[a]`` int64 global ids owned by ``p``
            that ``p`` sends to ``q`` as rows (ascending; empty for ``p == q``).
        targets: ``targets[p][q]``: ``[b]`` int64 global ids owned by ``q``
            for which ``p`` sends ``q`` a partial sum (ascending).
        rows_today: ``[P, P]`` int64: rows ``p`` sends ``q`` today (distinct
            sources owned by ``p`` read by targets owned by ``q``).
    """

    sources: list[list[Tensor]]
    targets: list[list[Tensor]]
    rows_today: Tensor

    @property
    def num_parts(self) -> int:
        return len(self.sources)

    @property
    def rows_cover(self) -> Tensor:
        """``[P, P]`` int64: rows ``p`` sends ``q`` under the cover (sources
        plus partial sums)."""
        counts = [[s.numel() + t.numel() for s, t in zip(srcs, tgts)]
                  for srcs, tgts in zip(self.sources, self.targets)]
        return torch.tensor(counts, dtype=torch.long).reshape(self.num_parts, self.num_parts)


def vertex_cover_plan(edge_index: Tensor, parts: Tensor, num_parts: int) -> CoverPlan:
    r"""The minimum vertex cover of each ordered pair's cut edges.

    An edge belongs to its target's owner; the edges whose source lies in
    part ``p`` and target in part ``q != p`` are the cut from ``p`` to ``q``.
    Self-loops and edges within a part are not cut, duplicate edges count
    once, isolated nodes play no part. Each pair's maximum matching comes from
    :func:`scipy.sparse.csgraph.maximum_bipartite_matching` (Hopcroft–Karp),
    its cover from König's construction (one breadth-first search).

    Args:
        edge_index (torch.Tensor): ``[2, E]`` (source, target) global ids.
        parts (torch.Tensor): ``[N]`` part of each node, in ``0 ... num_parts - 1``.
        num_parts (int): The number of parts ``P``.

    Shapes:
        - **input:** edge_index :math:`(2, |\mathcal{E}|)`, parts :math:`(|\mathcal{V}|)`
        - **output:** a :class:`CoverPlan` with ``[P, P]`` row counts.
    """
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"'vertex_cover_plan' expects edge_index of shape [2, E], got "
                         f"{list(edge_index.shape)}")
    owner = parts.cpu().numpy().astype(small_int_dtype(num_parts), copy=False)
    if owner.size and (int(owner.min()) < 0 or int(owner.max()) >= num_parts):
        raise ValueError(f"'vertex_cover_plan' got parts outside 0 ... {num_parts - 1}; "
                         f"pass num_parts greater than every entry of parts")
    src, dst = _cut_edges(edge_index.cpu().numpy().astype(np.int64, copy=False), owner)
    sender, receiver = owner[src].astype(np.int64), owner[dst].astype(np.int64)
    order = np.argsort(sender * num_parts + receiver, kind="stable")
    src, dst, sender, receiver = src[order], dst[order], sender[order], receiver[order]
    bounds = np.searchsorted(sender * num_parts + receiver, np.arange(num_parts**2 + 1))
    empty = torch.empty(0, dtype=torch.long)
    sources = [[empty] * num_parts for _ in range(num_parts)]
    targets = [[empty] * num_parts for _ in range(num_parts)]
    rows_today = torch.zeros(num_parts, num_parts, dtype=torch.long)
    for pair in range(num_parts**2):
        lo, hi = bounds[pair], bounds[pair + 1]
        if lo == hi:
            continue
        p, q = divmod(pair, num_parts)
        left, right, covered_left, covered_right = min_cover(src[lo:hi], dst[lo:hi])
        sources[p][q] = torch.from_numpy(left[covered_left])
        targets[p][q] = torch.from_numpy(right[covered_right])
        rows_today[p, q] = left.size
    return CoverPlan(sources, targets, rows_today)


def _cut_edges(edge_index: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct edges whose ends lie in different parts, sorted by
    (source, target), as two int64 arrays; one pass over the edges in chunks."""
    num_nodes = max(owner.size, 1)
    keys = []
    for sl in chunks(edge_index.shape[1]):
        s, d = edge_index[0, sl], edge_index[1, sl]
        cut = owner[s] != owner[d]
        keys.append(s[cut] * num_nodes + d[cut])
    key = np.unique(np.concatenate(keys)) if keys else np.empty(0, dtype=np.int64)
    return key // num_nodes, key % num_nodes


def min_cover(src: np.ndarray, dst: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A minimum vertex cover of the bipartite graph of the distinct edges
    ``src -> dst``: the left (sources) and right (targets) ids, ascending, and
    a mask of each side's covered vertices.

    Args:
        src (numpy.ndarray): ``[E]`` int64 source of each edge.
        dst (numpy.ndarray): ``[E]`` int64 target of each edge.
    """
    left, row = np.unique(src, return_inverse=True)
    right, col = np.unique(dst, return_inverse=True)
    num_left, num_right = left.size, right.size
    graph = sp.csr_matrix((np.ones(row.size, dtype=np.int8), (row, col)),
                          shape=(num_left, num_right))
    match_of_left = maximum_bipartite_matching(graph, perm_type="column")  # -1: unmatched
    matched = np.flatnonzero(match_of_left >= 0)
    # Alternating graph on [super source; left; right]: every edge left -> right
    # (a reached left vertex's matched edge only leads back to its parent),
    # matched edges right -> left, and the super source -> each unmatched left.
    free = np.flatnonzero(match_of_left < 0)
    tails = np.concatenate([row + 1, match_of_left[matched] + 1 + num_left, np.zeros_like(free)])
    heads = np.concatenate([col + 1 + num_left, matched + 1, free + 1])
    size = 1 + num_left + num_right
    alternating = sp.csr_matrix((np.ones(tails.size, dtype=np.int8), (tails, heads)),
                                shape=(size, size))
    reached = np.zeros(size, dtype=bool)
    reached[breadth_first_order(alternating, 0, directed=True, return_predecessors=False)] = True
    covered_left = ~reached[1 : 1 + num_left]
    covered_right = reached[1 + num_left :]
    assert covered_left.sum() + covered_right.sum() == matched.size, (
        "König's cover must be as large as the maximum matching")
    return left, right, covered_left, covered_right
