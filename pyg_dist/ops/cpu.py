"""Loader of the C++ CPU kernels (csrc/)."""
from __future__ import annotations


def is_available() -> bool:
    return False


def unavailable_reason() -> str:
    return "the C++ extension is not part of this build"


def kernels():  # pragma: no cover - replaced by the extension loader
    raise RuntimeError(unavailable_reason())
