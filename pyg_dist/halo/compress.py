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
========  ==============  ===================================================
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["Codec", "CODECS", "get_codec"]


class Codec:
    """Encodes float rows to bytes and back. Subclasses set ``name``."""

    name = ""

    def encode(self, rows: Tensor) -> Tensor:
        """``[R, F]`` float -> ``[R, B]`` uint8."""
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

    def encode(self, rows: Tensor) -> Tensor:
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

    def encode(self, rows: Tensor) -> Tensor:
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
}


def get_codec(compress: str | Codec | None) -> Codec | None:
    """The codec named ``compress`` (``"fp16"``, ``"bf16"``, ``"int8"``) or :obj:`None`.

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
