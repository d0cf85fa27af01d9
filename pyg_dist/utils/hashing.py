"""Counter-based hashing: random draws that are a pure function of integer keys.

Shared dropout (:mod:`pyg_dist.utils.dropout`) and the stochastic rounding of the
low-bit halo codecs (:mod:`pyg_dist.halo.compress`) draw from these hashes
instead of a generator: the same keys give the same draw on every rank and
after a restart from a checkpoint, and no other random stream moves.
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["M32", "mix32", "as_int32", "call_key", "entry_hash"]

#: The low 32 bits.
M32 = 0xFFFFFFFF


def mix32(h: Tensor) -> Tensor:
    """A 32-bit integer hash (Wellons' lowbias32) on int64 tensors holding
    values below 2**32; products keep their low 32 bits.

    Args:
        h (torch.Tensor): int64 values in ``[0, 2**32)``, any shape.
    """
    h = h ^ (h >> 16)
    h = (h * 0x7FEB352D) & M32
    h = h ^ (h >> 15)
    h = (h * 0x846CA68B) & M32
    return h ^ (h >> 16)


def as_int32(h: Tensor) -> Tensor:
    """Values below 2**32 as the int32 with the same bits.

    Args:
        h (torch.Tensor): int64 values in ``[0, 2**32)``, any shape.
    """
    return torch.where(h >= 2**31, h - 2**32, h).to(torch.int32)


def call_key(seed: int, call: int, device: torch.device | str | None = None) -> Tensor:
    """``[1]`` int64: the 32-bit key of call ``call`` under seed ``seed``.

    Args:
        seed (int): A seed (its low 32 bits count with ``call``).
        call (int): The number of the call.
        device (torch.device, optional): Where the key lives. (default: :obj:`None`)
    """
    return mix32(torch.tensor([(seed * 0x9E3779B1 + call) & M32], device=device))


def entry_hash(row_key: Tensor, width: int, key: Tensor,
               columns: Tensor | None = None) -> Tensor:
    """``[len(row_key), width]`` int32: a 32-bit hash of each entry ``(row, column)``
    under ``key``. Rows and columns get 32-bit keys; an entry hashes the xor
    of its row's and column's key with the multiply-xorshift steps of one
    more lowbias32 round (its first xorshift left out), in int32
    (wrapping products, logical shifts by masking), which keeps the
    ``[R, F]`` work to a few cheap passes.

    Args:
        row_key (torch.Tensor): ``[R]`` integer keys of the rows (ids below 2**32).
        width (int): The number of columns.
        key (torch.Tensor): ``[1]`` int64, the call's key (:func:`call_key`).
        columns (torch.Tensor, optional): ``[width]`` integer keys of the
            columns (a slice of a wider matrix hashes its global columns);
            :obj:`None` for ``0 .. width - 1``. (default: :obj:`None`)
    """
    device = row_key.device
    row = as_int32(mix32((row_key.to(torch.int64) * 0x85EBCA6B + key) & M32))
    if columns is None:
        columns = torch.arange(width, device=device)
    assert columns.numel() == width, "one key per column"
    col = as_int32(mix32((columns.to(device=device, dtype=torch.int64) * 0xC2B2AE35 + key)
                         & M32))
    h = row[:, None] ^ col[None, :]
    h.mul_(0x7FEB352D)
    h ^= (h >> 15) & 0x1FFFF
    h.mul_(0x846CA68B - 2**32)
    h ^= (h >> 16) & 0xFFFF
    return h
