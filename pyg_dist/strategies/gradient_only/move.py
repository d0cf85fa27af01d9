"""Regrouping by moving clusters between ranks instead of reading them again:
every cluster is held by exactly one rank in each period, so at a regroup the
rank that held a cluster sends it to the rank that holds it next."""
from __future__ import annotations

import io
from typing import Any

import torch
from torch import Tensor

from pyg_dist.runtime import distributed

__all__ = ["move_clusters"]


def move_clusters(held: dict[int, Any], before: list[list[int]], after: list[list[int]],
                  ) -> tuple[dict[int, Any], int, int]:
    """This rank's clusters of ``after`` (every rank's group, in rank order),
    from ``held`` (its clusters of ``before``) and from the ranks that held the
    others, in one batch of point-to-point messages (collective). Returns the
    contents by cluster, and the bytes sent and received."""
    rank = distributed.rank()
    owner = {c: r for r, group in enumerate(before) for c in group}
    outgoing: dict[int, list[int]] = {}
    for dst, group in enumerate(after):
        for c in group:
            if dst != rank and owner[c] == rank:
                outgoing.setdefault(dst, []).append(c)
    payloads = {dst: _pack({c: held[c] for c in clusters}) for dst, clusters in outgoing.items()}
    sizes = distributed.all_gather_objects({dst: p.numel() for dst, p in payloads.items()})
    buffers = {src: torch.empty(sizes[src][rank], dtype=torch.uint8)
               for src in range(len(sizes)) if rank in sizes[src]}
    works = distributed.batch_send_recv(payloads, buffers, what="cluster move")
    distributed.wait_all(works, "cluster move")
    contents = {c: held[c] for c in after[rank] if owner[c] == rank}
    for buffer in buffers.values():
        contents.update(_unpack(buffer))
    sent = sum(p.numel() for p in payloads.values())
    return contents, sent, sum(b.numel() for b in buffers.values())


def _pack(contents: dict[int, Any]) -> Tensor:
    out = io.BytesIO()
    torch.save(contents, out)
    return torch.frombuffer(bytearray(out.getbuffer()), dtype=torch.uint8)


def _unpack(buffer: Tensor) -> dict[int, Any]:
    return torch.load(io.BytesIO(buffer.numpy().tobytes()), weights_only=True)
