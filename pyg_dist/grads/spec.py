"""Spelling of a gradient compression: ``none``, ``fp16``, ``powersgd:R``,
``covap:K`` or ``covap:auto`` (the CLI's ``--grad-compress``)."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GradCompress", "parse_grad_compress", "GRAD_COMPRESS_CHOICES"]

GRAD_COMPRESS_CHOICES = "none, fp16, powersgd:R (R >= 1), covap:K (K >= 1) or covap:auto"


@dataclass(frozen=True)
class GradCompress:
    """A gradient compression: ``kind`` (``"fp16"``, ``"powersgd"`` or
    ``"covap"``) and its number (PowerSGD's rank, COVAP's shard count; 0
    for ``covap:auto`` and ``fp16``).

    Args:
        kind (str): :obj:`"fp16"`, :obj:`"powersgd"` or :obj:`"covap"`.
        value (int, optional): PowerSGD's rank or COVAP's shard count;
            :obj:`0` for ``covap:auto`` and ``fp16``. (default: :obj:`0`)
    """

    kind: str
    value: int = 0

    @property
    def auto(self) -> bool:
        return self.kind == "covap" and self.value == 0

    def spec(self) -> str:
        if self.kind == "fp16":
            return "fp16"
        return f"{self.kind}:{'auto' if self.auto else self.value}"


def parse_grad_compress(spec: str | GradCompress | None) -> GradCompress | None:
    """``spec`` read into a :class:`GradCompress` (:obj:`None` for none).

    Args:
        spec (str or GradCompress, optional): :obj:`None`, ``"none"``,
            ``"fp16"``, ``"powersgd:R"``, ``"covap:K"`` or ``"covap:auto"``
            (any case), or a :class:`GradCompress`, returned as it is.
    """
    if spec is None or isinstance(spec, GradCompress):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"grad_compress must be a string like 'covap:4' (got {spec!r})")
    text = spec.strip().lower()
    if text in ("", "none"):
        return None
    if text == "fp16":
        return GradCompress("fp16")
    kind, _, value = text.partition(":")
    if kind == "covap" and value == "auto":
        return GradCompress("covap")
    if kind in ("powersgd", "covap") and value.isdigit() and int(value) >= 1:
        return GradCompress(kind, int(value))
    what = {"powersgd": "a rank R >= 1 (powersgd:4)",
            "covap": "a shard count K >= 1 or auto (covap:4, covap:auto)"}
    hint = what.get(kind, GRAD_COMPRESS_CHOICES)
    raise ValueError(f"unknown gradient compression '{spec}'; use {hint}")
