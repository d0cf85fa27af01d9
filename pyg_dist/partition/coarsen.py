r"""Contracting a graph before METIS: size-capped label propagation groups
nodes into clusters, and the cluster graph (edge weights = edges between two
clusters, vertex weights = nodes and training nodes per cluster) is what
METIS then cuts.

Label propagation (Raghavan et al., 2007) moves each node to the label most
common among its neighbours; on graphs with communities it finds them in a
few rounds. Here a round updates a random half of the nodes (synchronous
updates of all nodes oscillate on bipartite-like structure), ties go to a
seeded random priority per label, and a move into a cluster already at
``max_size`` is refused, so that METIS can still balance the parts.
Everything is vectorised over chunks of rows of the CSR: a round is one pass
over the edges with chunk-sized sorts.
"""
from __future__ import annotations

import numpy as np

from pyg_dist.partition.arrays import CHUNK, unique_sorted_inplace

__all__ = ["label_propagation", "contract"]


def label_propagation(xadj: np.ndarray, adjncy: np.ndarray, max_size: int, rounds: int,
                      seed: int) -> np.ndarray:
    """Cluster ids ``0 ... C - 1`` of the nodes of the symmetric CSR
    ``(xadj, adjncy)``, no cluster larger than ``max_size`` nodes.

    Shapes:
        - **input:** ``xadj`` :obj:`[N + 1]`, ``adjncy`` :obj:`[nnz]` (int64)
        - **output:** :obj:`[N]` int64
    """
    n = xadj.size - 1
    rng = np.random.default_rng(seed)
    labels = np.arange(n, dtype=np.int64)
    sizes = np.ones(n, dtype=np.int64)
    priority = rng.permutation(n)  # of each label; ties go to the highest
    by_priority = np.argsort(priority)
    for _ in range(rounds):
        proposal = _most_common_neighbour_label(xadj, adjncy, priority[labels], n)
        proposal = np.where(proposal >= 0, by_priority[np.maximum(proposal, 0)], labels)
        active = rng.random(n) < 0.5
        movers = np.flatnonzero(active & (proposal != labels))
        if movers.size == 0:
            break
        movers = _within_capacity(movers, proposal[movers], sizes, max_size, rng)
        sizes -= np.bincount(labels[movers], minlength=n)
        sizes += np.bincount(proposal[movers], minlength=n)
        labels[movers] = proposal[movers]
    return np.unique(labels, return_inverse=True)[1].astype(np.int64)


def _most_common_neighbour_label(xadj: np.ndarray, adjncy: np.ndarray, key_of_node: np.ndarray,
                                 n: int) -> np.ndarray:
    """``[N]``: the most common ``key_of_node`` among each node's neighbours
    (the highest on ties), ``-1`` for nodes without neighbours."""
    best = np.full(n, -1, dtype=np.int64)
    for r0, r1 in _row_chunks(xadj):
        lo, hi = xadj[r0], xadj[r1]
        if hi == lo:
            continue
        rows = np.repeat(np.arange(r1 - r0, dtype=np.int64), np.diff(xadj[r0 : r1 + 1]))
        key = rows * n + key_of_node[adjncy[lo:hi]]
        key.sort()
        starts = np.flatnonzero(np.diff(key, prepend=-1))  # runs of one (row, label)
        counts = np.diff(np.append(starts, key.size))
        run = key[starts]
        run_row = run // n
        score = counts * n + (run - run_row * n)  # most common first, then highest key
        first = np.flatnonzero(np.diff(run_row, prepend=-1))
        best[r0 + run_row[first]] = np.maximum.reduceat(score, first) % n
    return best


def _row_chunks(xadj: np.ndarray) -> list[tuple[int, int]]:
    """Row ranges ``[r0, r1)`` of about :data:`CHUNK` entries each (a row
    longer than that is a range of its own)."""
    n = xadj.size - 1
    bounds = np.searchsorted(xadj, np.arange(CHUNK, int(xadj[-1]), CHUNK), side="right") - 1
    edges = np.unique(np.concatenate([[0], np.clip(bounds, 1, n), [n]]))
    return list(zip(edges[:-1].tolist(), edges[1:].tolist()))


def _within_capacity(movers: np.ndarray, target: np.ndarray, sizes: np.ndarray, max_size: int,
                     rng: np.random.Generator) -> np.ndarray:
    """The movers a cluster still has room for, chosen at random per cluster
    (room counts the cluster's size before this round's departures)."""
    order = np.lexsort((rng.random(movers.size), target))
    movers, target = movers[order], target[order]
    group_start = np.flatnonzero(np.diff(target, prepend=-1))
    rank = np.arange(target.size) - np.repeat(group_start, np.diff(np.append(group_start,
                                                                             target.size)))
    return movers[rank < max_size - sizes[target]]


def contract(xadj: np.ndarray, adjncy: np.ndarray,
             cluster: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cluster graph: ``(xadj, adjncy, weights)`` of the symmetric CSR
    between clusters (no self-loops), ``weights`` the number of node-level
    edges each cluster edge stands for.

    Shapes:
        - **input:** ``cluster`` :obj:`[N]` int64 ids ``0 ... C - 1``
        - **output:** :obj:`[C + 1]`, :obj:`[nnz_c]`, :obj:`[nnz_c]` (int64)
    """
    c = int(cluster.max()) + 1 if cluster.size else 0
    ranges = _row_chunks(xadj)
    total = 0
    for r0, r1 in ranges:  # count first: the keys go into one exact buffer
        rows = np.repeat(cluster[r0:r1], np.diff(xadj[r0 : r1 + 1]))
        total += int(np.count_nonzero(rows != cluster[adjncy[xadj[r0] : xadj[r1]]]))
    keys = np.empty(total, dtype=np.int64)
    filled = 0
    for r0, r1 in ranges:
        rows = np.repeat(cluster[r0:r1], np.diff(xadj[r0 : r1 + 1]))
        cols = cluster[adjncy[xadj[r0] : xadj[r1]]]
        between = rows != cols
        block = rows[between] * c + cols[between]
        keys[filled : filled + block.size] = block
        filled += block.size
    keys.sort()
    starts = np.flatnonzero(np.diff(keys, prepend=-1))
    weights = np.diff(np.append(starts, keys.size))
    keys.resize(unique_sorted_inplace(keys), refcheck=False)
    cxadj = np.zeros(c + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // c, minlength=c), out=cxadj[1:])
    np.remainder(keys, c, out=keys)
    return cxadj, keys, weights
