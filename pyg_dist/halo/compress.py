"""Halo message compression: what a row looks like on the wire.

A codec turns ``[rows, F]`` floating rows into ``[rows, bytes_per_row]`` uint8
payloads and back. The ledger counts payload bytes, so compression shows up
there at its real size.

========  ==============  ===================================================
codec     bytes per row   round-trip error bound (per element)
========  ==============  ===================================================
fp16      2 F             :math:`|x| \\cdot 2^{-11} + 2^{-25}` (values past
                          65504 overflow to inf)
bf16      2 F             :math:`|x| \\cdot 2^{-8}` (+ a subnormal half-step)
int8      F + 4           :math:`\\max_j |x_j| / 254` of the row (absmax
                          scale per row, rounding to nearest)
int4      ceil(F / 2) + 4 :math:`\\max_j |x_j| / 7` of the row (absmax scale
                          per row, stochastic rounding: unbiased)
int2      ceil(F / 4) + 4 :math:`\\max_j |x_j|` of the row (levels -1, 0, 1
                          times the absmax, stochastic rounding: unbiased)
========  ==============  ===================================================

int4 and int2 round stochastically, so the mean of what arrives is the row
sent (error feedback is not needed for the halo to stay unbiased). Their draws
come from a hash (:func:`~pyg_dist.utils.hashing.entry_hash`) of the ``key`` an
encoding is given, the row's position in the payload and the feature: the
exchange (:meth:`~pyg_dist.halo.HaloChannel.move`) keys each encoding by the
rank, the ledger's step, the layer, the direction and the exchanges of that
layer so far in the step, all checkpointed, so a resumed run draws what the
uninterrupted run drew, and no other random stream moves.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from pyg_dist.utils.hashing import call_key, entry_hash

__all__ = ["Codec", "CODECS", "get_codec"]


class Codec:
    """Encodes float rows to bytes and back. Subclasses set ``name``."""

    name = ""

    def encode(self, rows: Tensor, key: int = 0) -> Tensor:
        """``[R, F]`` float -> ``[R, B]`` uint8; ``key`` (an int, its low 32 bits
        count) keys the random draws of a stochastic codec (the same key, the
        same payload), and deterministic codecs ignore it."""
        raise NotImplementedError

    def decode(self, payload: Tensor, num_feats: int, dtype: torch.dtype) -> Tensor:
        """``[R, B]`` uint8 -> ``[R, num_feats]`` of ``dtype``."""
        raise NotImplementedError

    def error_bound(self, rows: Tensor) -> Tensor:
        """Per-element bound on ``|decode(encode(rows)) - rows|`` (finite inputs in range)."""
        raise NotImplementedError

    def row_bytes(self, num_feats: int) -> int:
        """Payload bytes of one row of ``num_feats`` features."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return repr(self.name)


class _Cast(Codec):
    def __init__(self, name: str, dtype: torch.dtype, rel: float) -> None:
        self.name, self.wire_dtype, self.rel = name, dtype, rel

    def encode(self, rows: Tensor, key: int = 0) -> Tensor:
        return _bytes(rows.to(self.wire_dtype).contiguous())

    def decode(self, payload: Tensor, num_feats: int, dtype: torch.dtype) -> Tensor:
        return payload.view(self.wire_dtype).view(-1, num_feats).to(dtype)

    def row_bytes(self, num_feats: int) -> int:
        return 2 * num_feats

    def error_bound(self, rows: Tensor) -> Tensor:
        info = torch.finfo(self.wire_dtype)
        subnormal = info.tiny * info.eps / 2  # half a subnormal step: absolute below tiny
        return rows.abs().float() * self.rel + subnormal


class _Int8(Codec):
    name = "int8"

    def encode(self, rows: Tensor, key: int = 0) -> Tensor:
        rows = rows.float()
        scale = rows.abs().amax(dim=1, keepdim=True) / 127.0
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        q = torch.round(rows / safe).clamp_(-127, 127).to(torch.int8)
        return torch.cat([_bytes(q.contiguous()), _bytes(scale.contiguous())], dim=1)

    def decode(self, payload: Tensor, num_feats: int, dtype: torch.dtype) -> Tensor:
        q = payload[:, :num_feats].view(torch.int8).float()
        # A fresh copy: the scale bytes may sit at an offset that is no multiple of 4.
        scale = payload[:, num_feats:].reshape(-1).clone().view(torch.float32).view(-1, 1)
        return (q * scale).to(dtype)

    def row_bytes(self, num_feats: int) -> int:
        return num_feats + 4

    def error_bound(self, rows: Tensor) -> Tensor:
        absmax = rows.abs().float().amax(dim=1, keepdim=True)
        return (absmax / 254.0 * (1 + 1e-6)).expand_as(rows)


class _LowBit(Codec):
    r"""``bits``-bit levels :math:`q \in [-q_{max}, q_{max}]`, :math:`q_{max} =
    2^{bits - 1} - 1`, of an absmax scale per row (fp32, 4 bytes), rounded
    stochastically: :math:`q = \lfloor x / s + u \rfloor`, :math:`u \sim
    U[0, 1)`, so :math:`E[q s] = x` and :math:`|q s - x| < s`. Levels travel
    as the unsigned :math:`q + q_{max}`, ``8 // bits`` to a byte, the first
    feature in the low bits; padding bits of the last byte are zeros and are
    ignored."""

    def __init__(self, bits: int) -> None:
        assert 8 % bits == 0 and bits >= 2, "levels must pack whole into a byte"
        self.name, self.bits = f"int{bits}", bits
        self.qmax = 2 ** (bits - 1) - 1
        self.per_byte = 8 // bits

    def encode(self, rows: Tensor, key: int = 0) -> Tensor:
        rows = rows.float()
        num_rows, num_feats = rows.shape
        absmax = (rows.abs().amax(dim=1, keepdim=True) if num_feats
                  else rows.new_zeros(num_rows, 1))
        # No clamp needed: in float64, x * qmax is exact and the division is
        # correctly rounded, so |x| <= absmax gives |v| <= qmax exactly (rounding
        # is monotonic and qmax is representable); u <= 1 - 2**-24 then keeps
        # v + u (rounded, again monotonically) below qmax + 1 and at or above
        # -qmax, so floor(v + u) lies in [-qmax, qmax]. A zero row has v = 0
        # and q = 0: exact zeros.
        safe = torch.where(absmax > 0, absmax, torch.ones_like(absmax)).double()
        v = rows.double() * self.qmax / safe
        q = torch.floor(v + self._uniform(num_rows, num_feats, key, rows.device))
        codes = (q + self.qmax).to(torch.uint8)
        scale = (absmax / self.qmax).contiguous()
        return torch.cat([self._pack(codes), _bytes(scale)], dim=1)

    def _uniform(self, num_rows: int, num_feats: int, key: int,
                 device: torch.device) -> Tensor:
        """``[R, F]`` float64 draws from U[0, 1) on the grid of 2**-24: the top
        24 bits of each entry's hash under ``key``."""
        row_key = torch.arange(num_rows, device=device)
        h = entry_hash(row_key, num_feats, call_key(key, 0, device))
        return ((h >> 8) & 0xFFFFFF).double() * 2.0**-24

    def _pack(self, codes: Tensor) -> Tensor:
        """``[R, F]`` uint8 codes below ``2**bits`` -> ``[R, ceil(F bits / 8)]`` bytes."""
        num_rows, num_feats = codes.shape
        width = math.ceil(num_feats / self.per_byte)
        padded = codes.new_zeros(num_rows, width * self.per_byte)
        padded[:, :num_feats] = codes
        padded = padded.view(num_rows, width, self.per_byte)
        packed = padded[..., 0].clone()
        for k in range(1, self.per_byte):
            packed |= padded[..., k] << (self.bits * k)
        return packed

    def decode(self, payload: Tensor, num_feats: int, dtype: torch.dtype) -> Tensor:
        width = math.ceil(num_feats / self.per_byte)
        packed = payload[:, :width]
        shifts = torch.arange(self.per_byte, dtype=torch.uint8, device=payload.device)
        codes = (packed.unsqueeze(-1) >> (shifts * self.bits)) & (2**self.bits - 1)
        q = codes.view(payload.size(0), width * self.per_byte)[:, :num_feats].float() - self.qmax
        # A fresh copy: the scale bytes may sit at an offset that is no multiple of 4.
        scale = payload[:, width:].reshape(-1).clone().view(torch.float32).view(-1, 1)
        return (q * scale).to(dtype)

    def row_bytes(self, num_feats: int) -> int:
        return math.ceil(num_feats * self.bits / 8) + 4

    def error_bound(self, rows: Tensor) -> Tensor:
        # Under one step: |q - x / s| < 1. The margin covers the fp32 rounding
        # of the stored scale and of q * s (a few 2**-24 of the absmax).
        absmax = rows.abs().float().amax(dim=1, keepdim=True)
        return (absmax / self.qmax * (1 + 1e-5)).expand_as(rows)


def _bytes(t: Tensor) -> Tensor:
    """``[R, B]`` uint8 view of a contiguous ``[R, ...]`` tensor (a new empty one if R = 0)."""
    if t.numel() == 0:
        width = t.element_size() * int(torch.tensor(t.shape[1:]).prod())
        return torch.empty(t.size(0), width, dtype=torch.uint8, device=t.device)
    return t.view(torch.uint8).view(t.size(0), -1)


CODECS: dict[str, Codec] = {
    "fp16": _Cast("fp16", torch.float16, 2.0**-11),
    "bf16": _Cast("bf16", torch.bfloat16, 2.0**-8),
    "int8": _Int8(),
    "int4": _LowBit(4),
    "int2": _LowBit(2),
}


def get_codec(compress: str | Codec | None) -> Codec | None:
    """The codec named ``compress`` (``"fp16"``, ``"bf16"``, ``"int8"``,
    ``"int4"``, ``"int2"``) or :obj:`None`.

    Args:
        compress (str or Codec, optional): The codec's name, a codec
            (returned as it is), or :obj:`None` for none.
    """
    if compress is None or isinstance(compress, Codec):
        return compress
    if compress not in CODECS:
        raise ValueError(
            f"unknown compression '{compress}'; use one of {', '.join(CODECS)} or None"
        )
    return CODECS[compress]
