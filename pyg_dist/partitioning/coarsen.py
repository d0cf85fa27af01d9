r"""Contracting a graph before METIS: size-capped label propagation groups
nodes into clusters, and the cluster graph (edge weights = edges between two
clusters, vertex weights = nodes and training nodes per cluster) is what
METIS then cuts.

Label propagation (Raghavan et al., 2007) moves each node to the label most
common among its neighbours; on graphs with communities it finds them in a
few rounds. Here a round updates a random half of the nodes whose
neighbourhood changed (synchronous updates of all nodes oscillate on
bipartite-like structure), ties go to a seeded random priority per label, and
a move into a cluster already at ``max_size`` is refused, so that METIS can
still balance the parts. Everything is vectorised over chunks of rows of the
CSR: a round is at most one pass over the edges with chunk-sized sorts.
"""
from __future__ import annotations

import numpy as np

from pyg_dist.partitioning.arrays import CHUNK, unique_sorted_inplace

__all__ = ["label_propagation", "contract"]


def label_propagation(xadj: np.ndarray, adjncy: np.ndarray, max_size: int, rounds: int,
                      seed: int) -> np.ndarray:
    """Cluster ids ``0 ... C - 1`` of the nodes of the symmetric CSR
    ``(xadj, adjncy)``, no cluster larger than ``max_size`` nodes.

    A round looks only at nodes whose neighbourhood changed since they were
    last looked at (all of them at first), so rounds get cheaper as the
    labels settle.

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
    todo = np.ones(n, dtype=bool)  # nodes whose neighbourhood changed
    for _ in range(rounds):
        rows = np.flatnonzero(todo & (rng.random(n) < 0.5))
        best = _most_common_label(xadj, adjncy, priority[labels], rows)
        proposal = np.where(best >= 0, by_priority[np.maximum(best, 0)], labels[rows])
        todo[rows] = False
        movers, target = rows[proposal != labels[rows]], proposal[proposal != labels[rows]]
        fits = _fits(target, sizes, max_size, rng)
        todo[movers[~fits]] = True  # refused for room: try again later
        movers, target = movers[fits], target[fits]
        sizes -= np.bincount(labels[movers], minlength=n)
        sizes += np.bincount(target, minlength=n)
        labels[movers] = target
        todo[adjncy[_entries(xadj, movers)]] = True
        if not todo.any():
            break
    return np.unique(labels, return_inverse=True)[1].astype(np.int64)


def _most_common_label(xadj: np.ndarray, adjncy: np.ndarray, key_of_node: np.ndarray,
                       rows: np.ndarray) -> np.ndarray:
    """For each of ``rows`` (sorted), the most common ``key_of_node`` among its
    neighbours (the highest on ties), ``-1`` for a row without neighbours.
    One sort of ``row * N + key`` per chunk of about :data:`CHUNK` entries."""
    n = xadj.size - 1
    best = np.full(rows.size, -1, dtype=np.int64)
    degree = xadj[rows + 1] - xadj[rows]
    ends = np.cumsum(degree)
    lo = 0
    while lo < rows.size:
        hi = max(lo + 1, int(np.searchsorted(ends, ends[lo] - degree[lo] + CHUNK, "right")))
        block = rows[lo:hi]
        local = np.repeat(np.arange(block.size, dtype=np.int64), degree[lo:hi])
        key = local * n + key_of_node[adjncy[_entries(xadj, block)]]
        key.sort()
        starts = np.flatnonzero(np.diff(key, prepend=-1))  # runs of one (row, key)
        counts = np.diff(np.append(starts, key.size))
        run = key[starts]
        run_row = run // n
        score = counts * n + (run - run_row * n)  # most common first, then highest key
        first = np.flatnonzero(np.diff(run_row, prepend=-1))
        best[lo + run_row[first]] = np.maximum.reduceat(score, first) % n
        lo = hi
    return best


def _entries(xadj: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Positions in ``adjncy`` of the neighbours of ``rows``, row after row."""
    degree = xadj[rows + 1] - xadj[rows]
    offsets = np.cumsum(degree) - degree
    return np.repeat(xadj[rows] - offsets, degree) + np.arange(int(degree.sum()))


def _fits(target: np.ndarray, sizes: np.ndarray, max_size: int,
          rng: np.random.Generator) -> np.ndarray:
    """Which moves into ``target`` clusters fit under ``max_size``, chosen at
    random per cluster (room counts the cluster's size before this round's
    departures)."""
    order = np.lexsort((rng.random(target.size), target))
    ordered = target[order]
    group_start = np.flatnonzero(np.diff(ordered, prepend=-1))
    rank = np.arange(ordered.size) - np.repeat(group_start,
                                               np.diff(np.append(group_start, ordered.size)))
    fits = np.empty(target.size, dtype=bool)
    fits[order] = rank < max_size - sizes[ordered]
    return fits


def _row_chunks(xadj: np.ndarray) -> list[tuple[int, int]]:
    """Row ranges ``[r0, r1)`` of about :data:`CHUNK` entries each (a row
    longer than that is a range of its own)."""
    n = xadj.size - 1
    bounds = np.searchsorted(xadj, np.arange(CHUNK, int(xadj[-1]), CHUNK), side="right") - 1
    edges = np.unique(np.concatenate([[0], np.clip(bounds, 1, n), [n]]))
    return list(zip(edges[:-1].tolist(), edges[1:].tolist()))


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
