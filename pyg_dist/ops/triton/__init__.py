"""Triton kernels behind :func:`pyg_dist.ops.spmm` (forward SpMM, SDDMM) and
:func:`pyg_dist.ops.gat` (attention forward and backward).

Importing this package defines no kernel: Triton itself is imported, if it is
installed, by :mod:`pyg_dist.typing`'s detection, and the kernel modules only
by :func:`kernels`, which returns :obj:`None` (with a warning when they fail
to load) instead of raising, so a machine without Triton or without a GPU can
import :mod:`pyg_dist.ops`.
"""
from __future__ import annotations

import functools
import warnings
from typing import Any

from pyg_dist import typing as pyg_dist_typing

__all__ = ["kernels"]


@functools.cache
def kernels() -> Any:
    """The :class:`~.backend.TritonKernels` object, or :obj:`None` when Triton
    is missing or its kernels cannot be defined here (with a warning)."""
    if not pyg_dist_typing.WITH_TRITON:
        return None
    try:
        from pyg_dist.ops.triton.backend import TritonKernels
    except Exception as exc:  # an installed Triton too old or broken for these kernels
        warnings.warn(
            f"pyg_dist's Triton kernels failed to load ({exc!r}); the 'triton' backend is "
            f"unavailable",
            stacklevel=2,
        )
        return None
    return TritonKernels()
