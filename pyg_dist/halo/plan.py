"""A rank's halo plan: which owned rows go to which peer, which halo rows come
from whom."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["HaloPlan"]


@dataclass
class HaloPlan:
    """Who sends what to whom, seen from one rank.

    Attributes:
        rank: This rank.
        world_size: Number of ranks.
        send_idx: ``[S]`` int64, owned rows to send, the rows for peer 0 first,
            then peer 1, ...
        send_counts: Rows sent to each peer (``world_size`` ints, 0 for self).
        recv_counts: Halo rows received from each peer; the halo rows from peer
            ``q`` are contiguous, at ``sum(recv_counts[:q])``.
        halo_global_id: ``[H]`` int64, global id of each halo row.
    """

    rank: int
    world_size: int
    send_idx: Tensor
    send_counts: list[int]
    recv_counts: list[int]
    halo_global_id: Tensor

    @property
    def num_halo(self) -> int:
        return sum(self.recv_counts)

    @property
    def num_send(self) -> int:
        return sum(self.send_counts)

    @property
    def peers(self) -> list[int]:
        """Ranks this rank exchanges anything with."""
        return [
            q
            for q in range(self.world_size)
            if self.send_counts[q] > 0 or self.recv_counts[q] > 0
        ]

    @staticmethod
    def from_pointers(
        rank: int, send_idx: Tensor, send_ptr: Tensor, halo_ptr: Tensor, halo_global_id: Tensor
    ) -> HaloPlan:
        send_counts = (send_ptr[1:] - send_ptr[:-1]).tolist()
        recv_counts = (halo_ptr[1:] - halo_ptr[:-1]).tolist()
        return HaloPlan(
            rank=rank,
            world_size=len(send_counts),
            send_idx=send_idx,
            send_counts=send_counts,
            recv_counts=recv_counts,
            halo_global_id=halo_global_id,
        )

    def to(self, device: torch.device | str) -> HaloPlan:
        return HaloPlan(
            self.rank,
            self.world_size,
            self.send_idx.to(device),
            self.send_counts,
            self.recv_counts,
            self.halo_global_id.to(device),
        )
