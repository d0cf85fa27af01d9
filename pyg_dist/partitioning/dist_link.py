r"""A graph folder's link split on the ranks that partition it: each rank
reads a :math:`1/P` slice of every split's supervision edges (never the
whole list), checks it, and sends each edge to the part that owns its
source node, in chunks, as the graph's edges go to their targets' parts.

A part keeps its edges of each split as :func:`pyg_dist.partition` does
(:meth:`~pyg_dist.tasks.SupervisionEdges.state`: int64 global ids, float32
labels, each edge's position in the split's list, ascending), so
:meth:`pyg_dist.DistData.supervision` reads either folder alike.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from pyg_dist.datasets.ondisk import GraphFolder
from pyg_dist.partitioning.arrays import id_dtype
from pyg_dist.partitioning.dist_cut import lookup
from pyg_dist.partitioning.shuffle import Blocks, exchange_rounds, rounds
from pyg_dist.runtime.distributed import Group
from pyg_dist.tasks.supervision import SupervisionEdges

__all__ = ["supervision_span", "check_supervision", "shuffle_supervision"]


def supervision_span(graph: GraphFolder, split: str, rank: int,
                     num_parts: int) -> tuple[int, int]:
    """Rank ``rank``'s slice ``lo:hi`` of split ``split``'s supervision edges."""
    return Blocks.even(graph.link_sizes[split], num_parts).span(rank)


def check_supervision(graph: GraphFolder, rank: int, num_parts: int) -> None:
    """Raises :class:`ValueError` if this rank's slice of a split names a node
    outside the graph or has a NaN label."""
    for split in graph.link_splits:
        graph.check_supervision(split, *supervision_span(graph, split, rank, num_parts))


def shuffle_supervision(graph: GraphFolder, part: np.ndarray, nodes: Blocks, rank: int,
                        num_parts: int, group: Group = None) -> dict[str, dict[str, Tensor]]:
    """This rank's part's supervision edges of each split of ``graph``,
    those whose source node it owns, as a part file stores them. Collective.

    Args:
        graph (GraphFolder): The graph folder.
        part (numpy.ndarray): Part of each node of this rank's block of ``nodes``.
        nodes (Blocks): The node blocks ``part`` is spread over.
        rank (int): This rank (= its part).
        num_parts (int): Parts (= ranks of ``group``).
        group (torch.distributed.ProcessGroup, optional): The process group.
            (default: :obj:`None`)
    """
    return {split: _shuffle_split(graph, split, part, nodes, rank, num_parts, group).state()
            for split in graph.link_splits}


def _shuffle_split(graph: GraphFolder, split: str, part: np.ndarray, nodes: Blocks, rank: int,
                   num_parts: int, group: Group) -> SupervisionEdges:
    lo, hi = supervision_span(graph, split, rank, num_parts)
    (src, dst), label = graph.supervision(split, lo, hi, dtype=id_dtype(graph.num_nodes))
    owner = lookup(src, part, nodes, rank, group)
    slices = rounds(src.size, group)
    counts = np.stack([np.bincount(owner[sl], minlength=num_parts) for sl in slices])

    def grouped(r: int) -> list[np.ndarray]:
        sl = slices[r]
        order = np.argsort(owner[sl], kind="stable")
        return [src[sl][order], dst[sl][order], order + np.int64(lo + sl.start),
                label[sl][order]]

    (src, dst, ids, label), _ = exchange_rounds(
        counts, grouped, [src.dtype, dst.dtype, np.int64, np.float32], group)
    order = np.argsort(ids)  # a split's positions are distinct: the order of its list
    index = np.stack([src[order], dst[order]]).astype(np.int64)
    return SupervisionEdges(torch.from_numpy(index), torch.from_numpy(label[order]),
                            torch.from_numpy(ids[order]))
