r"""Node-to-part assignment on the ranks themselves, each rank holding one
block of node ids and one slice of the edges.

``metis-coarse``: the symmetric adjacency of each block is gathered by one
all-to-all shuffle of edges; size-capped label propagation (as
:func:`pyg_dist.partitioning.coarsen.label_propagation`) runs on it with
labels of remote neighbours fetched from their owners each round; the cap is
enforced by the owner of each cluster id (an id in :math:`0 \dots N - 1`,
owned by that id's block), which grants moves up to the room left. The
cluster graph (edge weights: node-level edges between two clusters; vertex
weights: nodes per cluster) is gathered to rank 0, METIS cuts it and each
cluster's part goes back to the cluster's owner.

The cluster graph does not shrink much below the node-level edges that join
unrelated clusters: a second level of label propagation merges the clusters
of one community, but scattered edges between communities stay distinct
pairs (on a community graph with 20% of its edges placed at random, merging
every cluster into its community would keep about 0.85x of the entries). To
bound what rank 0 holds, the cluster graph keeps its heaviest entries, those
of weight at least :math:`2^b` for the smallest :math:`b` that leaves at most
``max_entries`` (:func:`heaviest_entries`); the entries dropped are the
lightest, single stray edges that cross a part boundary with probability
:math:`(P - 1) / P` whatever METIS does with them.

``random``: part :math:`p(v) = \pi(v) \bmod P` for a seeded pseudo-random
permutation :math:`\pi` of :math:`0 \dots N - 1` computed per id (a Feistel
network with cycle walking): exactly balanced, and the same whichever ranks
compute it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pyg_dist import typing as pyg_dist_typing
from pyg_dist.partitioning.arrays import CHUNK, bincount_chunked, chunks, unique_sorted_inplace
from pyg_dist.partitioning.coarsen import _entries
from pyg_dist.partitioning.cut import COARSEN_FACTOR, COARSEN_ROUNDS, _part_graph
from pyg_dist.partitioning.shuffle import (
    Blocks,
    exchange,
    exchange_counted,
    exchange_rounds,
    fetch,
    gather_to_root,
    rounds,
)
from pyg_dist.runtime import distributed
from pyg_dist.runtime.distributed import Group

__all__ = ["permutation_cut", "block_adjacency", "coarse_metis_assign", "lookup", "Ghosts",
           "CoarseGraph", "heaviest_entries", "cluster_graph_budget"]

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray, salt: int) -> np.ndarray:
    """splitmix64 of ``x ^ salt`` (``uint64``, wrapping)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) ^ np.uint64(salt & 0xFFFFFFFFFFFFFFFF)
        z = (z + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
        return z ^ (z >> np.uint64(31))


def _permute(ids: np.ndarray, count: int, seed: int) -> np.ndarray:
    """A seeded permutation of ``0 ... count - 1`` evaluated at ``ids``: a
    4-round Feistel network on the smallest even bit width holding ``count``,
    re-applied to values that land outside the range (cycle walking)."""
    half = max(1, (max(count - 1, 1).bit_length() + 1) // 2)
    shift, mask = np.uint64(half), np.uint64((1 << half) - 1)
    x = ids.astype(np.uint64)
    todo = np.ones(x.size, dtype=bool)
    while todo.any():
        y = x[todo]
        left, right = y >> shift, y & mask
        for r in range(4):
            left, right = right, left ^ (_mix(right, seed * 4 + r) & mask)
        y = (left << shift) | right
        x[todo] = y
        todo[todo] = y >= np.uint64(count)
    return x.astype(np.int64)


def permutation_cut(ids: np.ndarray, num_nodes: int, num_parts: int, seed: int) -> np.ndarray:
    """Part of each of ``ids`` in the seeded random cut of ``num_nodes`` nodes
    into ``num_parts`` parts: :math:`\\pi(v) \\bmod P`, so part sizes differ by
    at most one and each node's part depends on its id, ``num_nodes``,
    ``num_parts`` and ``seed`` only.

    Shapes:
        - **input:** ``ids`` :obj:`[k]` int64
        - **output:** :obj:`[k]` int64
    """
    return _permute(ids, num_nodes, seed) % num_parts


def block_adjacency(edges: list[np.ndarray], blocks: Blocks, rank: int, num_nodes: int,
                    group: Group = None) -> tuple[np.ndarray, np.ndarray]:
    """The symmetric simple adjacency (directions merged, self-loops and
    duplicates dropped) of this rank's block, as a CSR ``(xadj, adjncy)`` over
    the block's rows with global column ids, from this rank's edge slice
    ``edges = [src, dst]`` (emptied here, so that the slice is freed once
    sent): every edge goes, both ways, as one int64 key ``u * N + v`` to the
    owner of ``u``, a chunk of edges per round.

    Shapes:
        - **output:** :obj:`[n_block + 1]`, :obj:`[nnz]` (int64)
    """
    num_ranks = len(blocks.bounds) - 1
    slices = rounds(edges[0].size, group)

    def ends(sl: slice) -> tuple[np.ndarray, np.ndarray]:
        s, d = edges[0][sl], edges[1][sl]
        keep = s != d
        s, d = s[keep].astype(np.int64), d[keep].astype(np.int64)
        return np.concatenate([s, d]), np.concatenate([d, s])

    def keys(r: int) -> list[np.ndarray]:
        u, v = ends(slices[r])
        u *= num_nodes
        u += v
        u.sort()  # the owner of u grows with the key: sorted is grouped by destination
        return [u]

    counts = np.stack([np.bincount(blocks.owner(ends(sl)[0]), minlength=num_ranks)
                       for sl in slices])
    (received,), _ = exchange_rounds(counts, keys, [np.int64], group)
    edges.clear()
    received.sort()
    received = received[: unique_sorted_inplace(received)]
    lo, hi = blocks.span(rank)
    received -= lo * num_nodes
    xadj = np.zeros(hi - lo + 1, dtype=np.int64)
    np.cumsum(bincount_chunked(received, hi - lo, divisor=num_nodes), out=xadj[1:])
    np.remainder(received, num_nodes, out=received)
    return xadj, received


def lookup(ids: np.ndarray, values: np.ndarray, blocks: Blocks, rank: int,
           group: Group) -> np.ndarray:
    """``values`` (indexed by this rank's block) of each of ``ids``, read here
    for owned ids and fetched from their owners (each distinct id once) for
    the others."""
    lo, hi = blocks.span(rank)
    out = np.empty(ids.size, dtype=values.dtype)
    local = (ids >= lo) & (ids < hi)
    out[local] = values[ids[local] - lo]
    wanted, inverse = np.unique(ids[~local], return_inverse=True)
    got = fetch(wanted, blocks.owner(wanted), lambda asked: values[asked - lo],
                len(blocks.bounds) - 1, group, grouped=True)  # sorted ids: grouped by owner
    out[~local] = got[inverse]
    return out


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, ascending (sorted in place: ``values`` is a temporary)."""
    values.sort()
    return values[np.diff(values, prepend=values[:1] - 1) != 0]


@dataclass
class Ghosts:
    """The remote neighbours of a block, looked up once: their ids (sorted,
    hence grouped by owner) and each adjacency entry's column in
    ``[block ; ghosts]``, so that a round fetches each remote neighbour's
    value once, with no sort.

    Attributes:
        ids: ``[g]`` int64 distinct remote neighbour ids, ascending.
        col: ``[nnz]`` column of each adjacency entry in ``[block ; ghosts]``
            (int32 when it fits).
    """

    ids: np.ndarray
    col: np.ndarray

    @staticmethod
    def create(adjncy: np.ndarray, blocks: Blocks, rank: int) -> Ghosts:
        """The ghosts of the block's adjacency ``adjncy`` (global ids), in
        chunked passes; ``col`` is int32 when ``[block ; ghosts]`` allows."""
        lo, hi = blocks.span(rank)
        found = [np.empty(0, dtype=np.int64)]
        for sl in chunks(adjncy.size):
            block = adjncy[sl]
            found.append(_distinct(block[(block < lo) | (block >= hi)]))
        ids = _distinct(np.concatenate(found))
        del found
        width = np.int32 if hi - lo + ids.size < 2**31 else np.int64
        col = np.empty(adjncy.size, dtype=width)
        for sl in chunks(adjncy.size):
            block = adjncy[sl]
            local = (block >= lo) & (block < hi)
            col[sl] = np.where(local, block - lo, (hi - lo) + np.searchsorted(ids, block))
        return Ghosts(ids, col)

    def tell(self, cols: np.ndarray, todo: np.ndarray, blocks: Blocks, rank: int,
             group: Group) -> None:
        """Sets ``todo`` (of the block's nodes, on their owners) for the nodes
        of columns ``cols``: owned ones here, ghosts on their owners."""
        n = todo.size
        todo[cols[cols < n]] = True
        todo[_tell_owners(self.ids[cols[cols >= n] - n], blocks, rank, group)] = True

    def values(self, values: np.ndarray, blocks: Blocks, rank: int,
               group: Group) -> np.ndarray:
        """``[block ; ghosts]`` values: this rank's ``values`` (indexed by its
        block), then each ghost's value fetched from its owner."""
        lo = blocks.span(rank)[0]
        got = fetch(self.ids, blocks.owner(self.ids), lambda asked: values[asked - lo],
                    len(blocks.bounds) - 1, group, grouped=True)
        return np.concatenate([values, got])


#: An odd multiplier: ``k -> k * _SPREAD mod 2^b`` permutes ``0 ... 2^b - 1``.
_SPREAD = 0x9E3779B97F4A7C15


def _most_common(degree: np.ndarray, neighbour_keys: np.ndarray, num_nodes: int) -> np.ndarray:
    """For rows of the given degrees whose neighbours' keys are
    ``neighbour_keys`` (row after row, each in ``0 ... N - 1``), the most
    common key, ``-1`` for a row without neighbours. Ties go to the key
    whose image under a fixed permutation of ``0 ... 2^b - 1`` (a
    multiplication by an odd constant modulo :math:`2^b`, at least N) is highest,
    not to the highest key: labels are cluster ids owned by the block holding
    them, and favouring high ids would pile the surviving clusters, and the
    work and memory of their owner, on the last rank. One sort of ``row *
    2^b + image``, as the single-process
    :func:`~pyg_dist.partitioning.coarsen._most_common_label`."""
    best = np.full(degree.size, -1, dtype=np.int64)
    if neighbour_keys.size == 0:
        return best
    bits = max(1, (num_nodes - 1).bit_length())
    mask = np.uint64((1 << bits) - 1)
    image = ((neighbour_keys.astype(np.uint64) * np.uint64(_SPREAD)) & mask).astype(np.int64)
    key = np.repeat(np.arange(degree.size, dtype=np.int64), degree) << bits
    key += image
    del image
    key.sort()
    starts = np.flatnonzero(np.diff(key, prepend=-1))  # runs of one (row, image)
    counts = np.diff(np.append(starts, key.size))
    run = key[starts]
    run_row = run >> bits
    score = (counts << bits) + (run & int(mask))  # most common, then highest image
    first = np.flatnonzero(np.diff(run_row, prepend=-1))
    top = (np.maximum.reduceat(score, first) & int(mask)).astype(np.uint64)
    inverse = np.uint64(pow(_SPREAD, -1, 1 << 64))
    best[run_row[first]] = ((top * inverse) & mask).astype(np.int64)
    return best


def _grant(target: np.ndarray, sizes: np.ndarray, blocks: Blocks, rank: int, max_size: int,
           rng: np.random.Generator, group: Group) -> np.ndarray:
    """Which moves into the ``target`` clusters fit under ``max_size``: the
    count per target goes to the cluster's owner, which grants up to the room
    left (requesters in rank order) and counts the granted moves in; each
    requester then picks that many of its movers at random."""
    lo = blocks.span(rank)[0]
    wanted, inverse, counts = np.unique(target, return_inverse=True, return_counts=True)

    def room(asked: np.ndarray) -> np.ndarray:
        ids, asks = asked[:, 0] - lo, asked[:, 1]
        order = np.argsort(ids, kind="stable")
        ordered, wants = ids[order], asks[order]
        before = np.cumsum(wants) - wants
        starts = np.flatnonzero(np.diff(ordered, prepend=-1))
        before -= np.repeat(before[starts], np.diff(np.append(starts, ordered.size)))
        granted = np.empty(ids.size, dtype=np.int64)
        granted[order] = np.clip(max_size - sizes[ordered] - before, 0, wants)
        np.add.at(sizes, ids, granted)
        return granted

    granted = fetch(np.stack([wanted, counts], axis=1), blocks.owner(wanted), room,
                    len(blocks.bounds) - 1, group)
    order = np.lexsort((rng.random(target.size), inverse))
    group_start = np.flatnonzero(np.diff(inverse[order], prepend=-1))
    within = np.arange(order.size) - np.repeat(group_start, np.diff(np.append(group_start,
                                                                                order.size)))
    fits = np.empty(target.size, dtype=bool)
    fits[order] = within < granted[inverse[order]]
    return fits


def _tell_owners(ids: np.ndarray, blocks: Blocks, rank: int, group: Group) -> np.ndarray:
    """The ids (with repeats) that all ranks, this one included, name in this
    rank's block, minus ``lo``."""
    (got,), _ = exchange([ids], blocks.owner(ids), len(blocks.bounds) - 1, group)
    return got - blocks.span(rank)[0]


def _row_chunks(xadj: np.ndarray, rows: np.ndarray) -> list[slice]:
    """Slices of ``rows`` whose rows hold about :data:`CHUNK` entries each."""
    ends = np.cumsum(xadj[rows + 1] - xadj[rows])
    cuts = np.searchsorted(ends, np.arange(CHUNK, int(ends[-1]) if ends.size else 0, CHUNK))
    bounds = np.unique(np.concatenate([[0], cuts + 1, [rows.size]]).clip(0, rows.size))
    return [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def label_propagation(xadj: np.ndarray, ghosts: Ghosts, blocks: Blocks, rank: int,
                      max_size: int, rounds: int, seed: int,
                      group: Group = None) -> tuple[np.ndarray, np.ndarray]:
    """Size-capped label propagation over the ranks
    (:func:`pyg_dist.partitioning.coarsen.label_propagation` distributed):
    each round, a random half of the nodes whose neighbourhood changed take
    their neighbours' most common label (remote labels fetched from their
    owners), moves into a cluster go through :func:`_grant`, and the owners of
    the left clusters and of the movers' neighbours are told. Rows are
    processed in chunks of about :data:`CHUNK` adjacency entries.

    Args:
        xadj (numpy.ndarray): ``[n_block + 1]`` row pointers of the block's
            symmetric adjacency, whose columns are ``ghosts.col``.
        ghosts (Ghosts): The block's remote neighbours.
        blocks (Blocks): Every rank's block of node ids.
        rank (int): This rank.
        max_size (int): The cap on a cluster's nodes.
        rounds (int): Rounds at most.
        seed (int): The seed of the random halves and of which movers get the room left.
        group (torch.distributed.ProcessGroup, optional): The process group.
            (default: :obj:`None`)

    Returns:
        The label of each node of this rank's block (a cluster id in
        ``0 ... N - 1``) and the size of each cluster whose id lies in the block.
    """
    num_nodes = int(blocks.bounds[-1])
    lo, hi = blocks.span(rank)
    # Node v starts in cluster v: cluster ids cover 0 ... N - 1, each owned by
    # its block's rank; ties are broken by a fixed spread of the ids (_most_common).
    labels = np.arange(lo, hi, dtype=np.int64)
    sizes = np.ones(hi - lo, dtype=np.int64)
    todo = np.ones(hi - lo, dtype=bool)
    rng = np.random.default_rng([seed, rank])
    for _ in range(rounds):
        rows = np.flatnonzero(todo & (rng.random(hi - lo) < 0.5))
        todo[rows] = False
        every = ghosts.values(labels, blocks, rank, group)
        best = np.concatenate([np.empty(0, dtype=np.int64)] + [
            _most_common(xadj[rows[sl] + 1] - xadj[rows[sl]],
                         every[ghosts.col[_entries(xadj, rows[sl])]], num_nodes)
            for sl in _row_chunks(xadj, rows)])
        del every
        proposal = np.where(best >= 0, best, labels[rows])
        moving = proposal != labels[rows]
        movers, target = rows[moving], proposal[moving]
        fits = _grant(target, sizes, blocks, rank, max_size, rng, group)
        todo[movers[~fits]] = True  # refused for room: try again later
        movers, target = movers[fits], target[fits]
        np.subtract.at(sizes, _tell_owners(labels[movers], blocks, rank, group), 1)
        labels[movers] = target
        ghosts.tell(ghosts.col[_entries(xadj, movers)], todo, blocks, rank, group)
        if distributed.all_reduce_values([float(todo.any())], "max", group)[0] == 0:
            break
    return labels, sizes


def _merge_weighted(keys: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``keys`` (sorted) with the sum of their ``weights``."""
    order = np.argsort(keys, kind="stable")
    keys, weights = keys[order], weights[order]
    starts = np.flatnonzero(np.diff(keys, prepend=-1))
    return keys[starts], np.add.reduceat(weights, starts) if starts.size else weights[:0]


@dataclass
class CoarseGraph:
    """The size of the cluster graph METIS cut (for reports).

    Attributes:
        num_clusters: Clusters (METIS's vertices).
        num_entries: Directed entries of its symmetric CSR that METIS saw.
        num_dropped: Entries left out as the lightest (see
            :func:`heaviest_entries`).
        min_weight: The lightest weight kept (1 when nothing was dropped).
    """

    num_clusters: int
    num_entries: int
    num_dropped: int = 0
    min_weight: int = 1


#: The cluster graph gathered to rank 0 keeps at most this many directed
#: entries per edge of one rank's slice (the heaviest), and never fewer than
#: ``COARSE_ENTRIES_FLOOR``: cutting an entry costs rank 0 about 140 bytes with
#: METIS's own copies (measured), about 35 bytes per slice edge at this budget,
#: below the 40-55 bytes per slice edge every rank's other steps peak at.
#: Measured on 32M-edge community graphs, keeping a twelfth or a third of the
#: cluster graph's entries left the edge cut within 0.5%; on Cora's 1,898
#: entries, keeping 674 raised it by a third, hence the floor (small cluster
#: graphs are cut whole).
COARSE_ENTRIES_PER_SLICE_EDGE = 0.25
#: Cluster graphs of at most this many entries are cut whole (about 0.4 GB).
COARSE_ENTRIES_FLOOR = 1 << 22


def cluster_graph_budget(num_edges: int, num_parts: int) -> int:
    """The most entries of the cluster graph rank 0 cuts, for a graph of
    ``num_edges`` edges cut on ``num_parts`` ranks: ``COARSE_ENTRIES_PER_SLICE_EDGE``
    per edge of a rank's slice, and never fewer than ``COARSE_ENTRIES_FLOOR``."""
    return max(int(COARSE_ENTRIES_PER_SLICE_EDGE * num_edges / num_parts), COARSE_ENTRIES_FLOOR)


def heaviest_entries(keys: np.ndarray, weights: np.ndarray, max_entries: int | None,
                     group: Group = None) -> tuple[np.ndarray, np.ndarray, int]:
    r"""The entries of a graph held in pieces over the ranks whose weight is at
    least :math:`2^b`, for the smallest :math:`b` that leaves at most
    ``max_entries`` of them on all ranks together (every entry when they fit,
    or when ``max_entries`` is :obj:`None`). ``weights`` are positive
    integers (counts of node-level edges) and symmetric, so the entries kept
    form a symmetric graph.

    Returns:
        This rank's kept ``keys`` and ``weights``, and the threshold
        :math:`2^b` (1 when nothing was dropped).
    """
    total = int(distributed.all_reduce_values([keys.size], "sum", group)[0])
    if max_entries is None or total <= max_entries:
        return keys, weights, 1
    octave = np.frexp(weights.astype(np.float64))[1] - 1  # floor(log2(w)), exact below 2^53
    counts = np.bincount(octave, minlength=64)[:64]
    counts = np.asarray(distributed.all_reduce_values(counts.tolist(), "sum", group))
    kept = np.cumsum(counts[::-1])[::-1]  # entries of weight >= 2^b
    b = int(np.argmax(kept <= max_entries))  # the first octave that fits (63 leaves none)
    keep = octave >= b
    return keys[keep], weights[keep], 1 << b


def coarse_metis_assign(edges: list[np.ndarray], blocks: Blocks, rank: int,
                        num_parts: int, seed: int, group: Group = None,
                        max_entries: int | None = None) -> tuple[np.ndarray, CoarseGraph]:
    """The part of each node of this rank's block under ``metis-coarse``,
    from this rank's edge slice ``edges = [src, dst]`` (emptied here).

    Clusters hold at most ``N / (COARSEN_FACTOR * num_parts)`` nodes, as in
    the single-process cut. The cluster graph gathered to rank 0 keeps at
    most ``max_entries`` directed entries, the heaviest
    (:func:`heaviest_entries`; :obj:`None`: all). When too few clusters or no
    edge between clusters remain, the nodes fall back to
    :func:`permutation_cut`.
    """
    num_nodes = int(blocks.bounds[-1])
    num_ranks = len(blocks.bounds) - 1
    lo, hi = blocks.span(rank)
    max_size = max(1, num_nodes // (COARSEN_FACTOR * num_parts))
    xadj, adjncy = block_adjacency(edges, blocks, rank, num_nodes, group)
    ghosts = Ghosts.create(adjncy, blocks, rank)
    del adjncy
    labels, sizes = label_propagation(xadj, ghosts, blocks, rank, max_size, COARSEN_ROUNDS,
                                      seed, group)
    alive = np.flatnonzero(sizes > 0)
    cblocks = Blocks.of_sizes(distributed.all_gather_objects(alive.size, group))
    num_clusters = int(cblocks.bounds[-1])
    compact = np.full(hi - lo, -1, dtype=np.int64)
    compact[alive] = cblocks.bounds[rank] + np.arange(alive.size)
    cluster = lookup(labels, compact, blocks, rank, group)  # of each node of the block

    keys, weights = _cluster_edges(xadj, ghosts, ghosts.values(cluster, blocks, rank, group),
                                   num_clusters)
    del ghosts
    (keys, weights), _ = exchange_counted(
        [keys, weights], np.diff(np.searchsorted(keys, cblocks.bounds * num_clusters)), group)
    keys, weights = _merge_weighted(keys, weights)
    before = keys.size
    keys, weights, min_weight = heaviest_entries(keys, weights, max_entries, group)
    num_entries, num_dropped = (int(v) for v in distributed.all_reduce_values(
        [keys.size, before - keys.size], "sum", group))
    coarse = CoarseGraph(num_clusters, num_entries, num_dropped, min_weight)
    if num_clusters < num_parts or num_entries == 0:  # nothing left to cut: cut nodes
        return permutation_cut(np.arange(lo, hi), num_nodes, num_parts, seed), coarse
    keys, weights = gather_to_root(keys, num_ranks, group), gather_to_root(weights, num_ranks,
                                                                          group)
    vweights = gather_to_root(sizes[alive], num_ranks, group)
    membership = np.empty(0, dtype=np.int64)
    if rank == 0:
        membership = _cut_coarse(keys, weights, vweights, num_clusters, num_parts, seed)
    del keys, weights, vweights
    counts = np.diff(cblocks.bounds) if rank == 0 else np.zeros(num_ranks, dtype=np.int64)
    (mine,), _ = exchange_counted([membership], counts, group)
    part_of_cluster = np.full(hi - lo, -1, dtype=np.int64)
    part_of_cluster[alive] = mine
    return lookup(labels, part_of_cluster, blocks, rank, group), coarse


def _cluster_edges(xadj: np.ndarray, ghosts: Ghosts, cluster: np.ndarray,
                   num_clusters: int) -> tuple[np.ndarray, np.ndarray]:
    """The block's edges between clusters as sorted keys ``row * C + col``
    with the number of node-level entries each stands for, in chunks of rows;
    ``cluster`` is over ``[block ; ghosts]``."""
    rows = np.arange(xadj.size - 1)
    keys, weights = [np.empty(0, dtype=np.int64)], [np.empty(0, dtype=np.int64)]
    for sl in _row_chunks(xadj, rows):
        block = rows[sl]
        here = np.repeat(cluster[block], xadj[block + 1] - xadj[block])
        there = cluster[ghosts.col[xadj[block[0]]:xadj[block[-1] + 1]]] if block.size else here
        between = here != there
        merged = _merge_weighted(here[between] * num_clusters + there[between],
                                 np.ones(int(between.sum()), dtype=np.int64))
        keys.append(merged[0])
        weights.append(merged[1])
    return _merge_weighted(np.concatenate(keys), np.concatenate(weights))


def _cut_coarse(keys: np.ndarray, weights: np.ndarray, vweights: np.ndarray,
                num_clusters: int, num_parts: int, seed: int) -> np.ndarray:
    """METIS k-way on the cluster graph of sorted keys ``row * C + col``
    (turned into its columns in place)."""
    pymetis = pyg_dist_typing.require("pymetis", "partition_distributed(method='metis-coarse')")
    xadj = np.zeros(num_clusters + 1, dtype=np.int64)
    np.cumsum(bincount_chunked(keys, num_clusters, divisor=num_clusters), out=xadj[1:])
    np.remainder(keys, num_clusters, out=keys)
    return _part_graph(pymetis, num_parts, xadj, keys, vweights, weights, seed)
