"""A rank's halo plan: which owned rows go to which peer, which halo rows come
from whom."""
from __future__ import annotations

from dataclasses import dataclass, field

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
        send_global_id: ``[S]`` int64, global id of each sent row.
    """

    rank: int
    world_size: int
    send_idx: Tensor
    send_counts: list[int]
    recv_counts: list[int]
    halo_global_id: Tensor
    send_global_id: Tensor
    _peers: dict[str, Tensor] = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_halo(self) -> int:
        return sum(self.recv_counts)

    @property
    def num_send(self) -> int:
        return sum(self.send_counts)

    @property
    def send_peer(self) -> Tensor:
        """``[S]`` the peer each sent row goes to."""
        return self._peer_of("send", self.send_counts)

    @property
    def halo_peer(self) -> Tensor:
        """``[H]`` the peer each halo row comes from."""
        return self._peer_of("halo", self.recv_counts)

    def _peer_of(self, key: str, counts: list[int]) -> Tensor:
        if key not in self._peers:
            peers = torch.arange(self.world_size, device=self.send_idx.device)
            self._peers[key] = torch.repeat_interleave(
                peers, torch.tensor(counts, device=self.send_idx.device)
            )
        return self._peers[key]

    @staticmethod
    def from_pointers(
        rank: int,
        send_idx: Tensor,
        send_ptr: Tensor,
        halo_ptr: Tensor,
        halo_global_id: Tensor,
        owned_global_id: Tensor,
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
            send_global_id=owned_global_id[send_idx],
        )

    def to(self, device: torch.device | str) -> HaloPlan:
        return HaloPlan(
            self.rank,
            self.world_size,
            self.send_idx.to(device),
            self.send_counts,
            self.recv_counts,
            self.halo_global_id.to(device),
            self.send_global_id.to(device),
        )
