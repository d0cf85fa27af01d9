"""Pieces of a distributed partition's metadata that every rank computes
from its own slice: a label count, and the sha256 of edges read in blocks
that is the same whatever the number of ranks. Collective where noted."""
from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import torch

from pyg_dist.partitioning.arrays import CHUNK
from pyg_dist.runtime import distributed
from pyg_dist.runtime.distributed import Group

__all__ = ["max_label", "edge_block_digests", "FINGERPRINT_EDGES"]

#: Edges per block of a distributed fingerprint.
FINGERPRINT_EDGES = CHUNK


def max_label(y: torch.Tensor | None) -> int | None:
    """``max(y)`` of this part for integer labels of one class per node,
    ``-1`` for none owned, :obj:`None` for other labels."""
    if y is None or y.dim() != 1 or y.is_floating_point() or y.dtype == torch.bool:
        return None
    return int(y.max()) if y.numel() else -1


def edge_block_digests(read: Callable[[int, int], np.ndarray], num_edges: int,
                       edge_span: tuple[int, int], group: Group = None) -> list[str]:
    """The sha256 of each block of :data:`FINGERPRINT_EDGES` consecutive edges
    (the bytes of its int64 sources, then of its targets), in order; each
    rank hashes the blocks that start in its slice ``edge_span``. Collective.

    Args:
        read (Callable): ``read(lo, hi)`` returns edge columns ``lo:hi`` as ``[2, hi - lo]``.
        num_edges (int): Edges of the whole edge list.
        edge_span (tuple[int, int]): This rank's edge slice ``lo:hi``.
        group (torch.distributed.ProcessGroup, optional): The process group.
            (default: :obj:`None`)
    """
    lo, hi = edge_span
    first = -(-lo // FINGERPRINT_EDGES) * FINGERPRINT_EDGES
    mine = []
    for start in range(first, hi, FINGERPRINT_EDGES):
        block = read(start, min(start + FINGERPRINT_EDGES, num_edges))
        digest = hashlib.sha256(np.ascontiguousarray(block[0], dtype=np.int64).data)
        digest.update(np.ascontiguousarray(block[1], dtype=np.int64).data)
        mine.append(digest.hexdigest())
    return [h for blocks in distributed.all_gather_objects(mine, group) for h in blocks]
