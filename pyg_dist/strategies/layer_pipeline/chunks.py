"""A rank's graph cut into chunks that flow through the layer stages.

Chunks are METIS parts of the rank's own rows (most neighbours of a chunk are
in it), or contiguous runs of rows without pymetis. Each halo row belongs to
the chunk its owner put it in. For one chunk, a layer's adjacency splits in
two: edges from *current* rows (the chunk's own rows and its halo rows, this
step's values, through which gradients flow) and edges from the other chunks'
rows, read from the layer's history table.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from pyg_dist import typing as pyg_dist_typing
from pyg_dist.data.dist_data import DistEdgeIndex
from pyg_dist.halo.comm import exchange_rows
from pyg_dist.halo.exchange import Route
from pyg_dist.ops.csr import csr_row, ptr_from_sorted
from pyg_dist.partitioning.cut import metis_cut

__all__ = ["Chunking", "Chunk", "ChunkAdjacency", "chunk_labels"]


@dataclass
class ChunkAdjacency:
    """One chunk's rows of a layer's adjacency, as two CSRs over the chunk's rows.

    Attributes:
        current: ``(rowptr, col, value)`` over ``[chunk rows ; chunk halo rows]``.
        other: ``(rowptr, col, value)`` over the history table ``[owned ; halo]``
            (no entries when there is one chunk).
    """

    current: tuple[Tensor, Tensor, Tensor]
    other: tuple[Tensor, Tensor, Tensor]

    @property
    def reads_history(self) -> bool:
        return self.other[1].numel() > 0


@dataclass
class Chunk:
    """Chunk ``index``: its owned rows, its halo rows and the route that
    exchanges them (sent rows numbered within the chunk)."""

    index: int
    rows: Tensor
    halo_rows: Tensor
    route: Route


@dataclass
class Chunking:
    """A rank's graph in ``count`` chunks (collective to build: ranks tell
    their peers the chunk of every row they send).

    Attributes:
        labels: ``[num_owned]`` chunk of each owned row.
        halo_labels: ``[num_halo]`` chunk of each halo row (its owner's).
        chunks: The chunks in processing order.
        position / halo_position: Each owned / halo row's index within its chunk.
    """

    graph: DistEdgeIndex
    count: int
    labels: Tensor
    halo_labels: Tensor
    chunks: list[Chunk]
    position: Tensor
    halo_position: Tensor
    _adjacency: dict[Any, list[ChunkAdjacency]] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, graph: DistEdgeIndex, count: int, labels: Tensor) -> Chunking:
        """The chunks of ``labels`` (``[num_owned]``, see :func:`chunk_labels`)."""
        plan = graph.plan
        halo_labels = exchange_rows(labels[plan.send_idx].view(-1, 1), plan.send_counts,
                                    plan.recv_counts, graph.channel.group)
        assert isinstance(halo_labels, Tensor), "a synchronous exchange returns a tensor"
        halo_labels = halo_labels.view(-1)
        position, halo_position = _positions(labels, count), _positions(halo_labels, count)
        send_label, send_peer = labels[plan.send_idx], plan.send_peer
        halo_peer = plan.halo_peer
        chunks = []
        for k in range(count):
            sent = send_label == k
            route = Route(position[plan.send_idx[sent]],
                          _counts(send_peer[sent], plan.world_size),
                          _counts(halo_peer[halo_labels == k], plan.world_size))
            chunks.append(Chunk(k, (labels == k).nonzero().view(-1),
                                (halo_labels == k).nonzero().view(-1), route))
        return cls(graph, count, labels, halo_labels, chunks, position, halo_position)

    def adjacency(self, key: Any, rowptr: Tensor, col: Tensor,
                  value: Tensor) -> list[ChunkAdjacency]:
        """The per-chunk split of the adjacency ``(rowptr, col, value)`` over
        ``[owned ; halo]``, cached under ``key``."""
        if key not in self._adjacency:
            self._adjacency[key] = self._split(rowptr, col, value)
        return self._adjacency[key]

    def _split(self, rowptr: Tensor, col: Tensor, value: Tensor) -> list[ChunkAdjacency]:
        position, halo_position = self.position, self.halo_position
        num_owned = self.labels.numel()
        row = csr_row(rowptr, col)
        target = self.labels[row]
        source = torch.cat([self.labels, self.halo_labels])[col]
        current = source == target
        is_own = col < num_owned
        sizes = [chunk.rows.numel() for chunk in self.chunks]
        # Columns of current edges, numbered over [chunk rows ; chunk halo rows].
        own_position = position[col.clamp(max=max(num_owned - 1, 0))]
        halo_col = (col - num_owned).clamp(min=0)
        from_halo = (halo_position[halo_col] if halo_position.numel()
                     else torch.zeros_like(col))
        offset = torch.tensor(sizes, dtype=col.dtype, device=col.device)[target]
        current_col = torch.where(is_own, own_position, offset + from_halo)
        out = []
        for k, size in enumerate(sizes):
            mine = target == k
            parts = []
            for keep, cols in ((mine & current, current_col), (mine & ~current, col)):
                local_row = position[row[keep]]
                parts.append((ptr_from_sorted(local_row, size).to(col.dtype), cols[keep],
                              value[keep]))
            out.append(ChunkAdjacency(parts[0], parts[1]))
        return out


def chunk_labels(graph: DistEdgeIndex, count: int, seed: int = 0) -> Tensor:
    """``[num_owned]`` chunk of every owned row: METIS on the graph among them
    (contiguous runs of rows without pymetis, or with one chunk).

    Raises:
        ValueError: If ``count`` is below 1 or above the rows this rank owns.
    """
    num_owned = graph.num_owned
    if count < 1 or count > max(num_owned, 1):
        raise ValueError(
            f"chunks={count} must be between 1 and the {num_owned} rows this rank owns; "
            f"use fewer chunks (or fewer parts, so that each holds more rows)")
    device = graph.col.device
    if count == 1:
        return torch.zeros(num_owned, dtype=torch.long, device=device)
    contiguous = torch.arange(num_owned, device=device) * count // num_owned
    if not pyg_dist_typing.WITH_METIS:
        return contiguous
    row, col = graph.row().cpu(), graph.col.cpu()
    own = col < num_owned
    labels = metis_cut(torch.stack([col[own], row[own]]), num_owned, count, seed).to(device)
    counts = torch.bincount(labels, minlength=count)
    return contiguous if bool((counts == 0).any()) else labels


def _positions(labels: Tensor, count: int) -> Tensor:
    """Each row's index within its chunk (rows of a chunk in their order)."""
    position = torch.empty_like(labels)
    for k in range(count):
        rows = (labels == k).nonzero().view(-1)
        position[rows] = torch.arange(rows.numel(), device=labels.device)
    return position


def _counts(peer: Tensor, world_size: int) -> list[int]:
    return torch.bincount(peer, minlength=world_size).tolist()
