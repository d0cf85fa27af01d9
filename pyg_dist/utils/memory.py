"""Handing memory the allocator keeps back to the operating system.

glibc's ``malloc`` keeps freed heap pages mapped for later requests, and a
long run frees and allocates tensors of many sizes every epoch: its resident
memory (VmRSS) drifts by several percent either way while the memory in use
holds still. :func:`release_freed_memory` asks glibc to return free pages
(``malloc_trim(0)``); :func:`~pyg_dist.train.train` calls it every
:data:`TRIM_EVERY` epochs, so a long run's resident memory stays what it uses.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["TRIM_EVERY", "release_freed_memory"]

#: Epochs between two calls of :func:`release_freed_memory` in ``train``
#: (a call takes milliseconds; an epoch of a large graph, seconds).
TRIM_EVERY = 50


@functools.cache
def _trim():  # the C function, or None where the C library has none (not glibc)
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def release_freed_memory() -> bool:
    """Returns the heap pages glibc keeps after they were freed to the
    operating system (``malloc_trim(0)``). Memory in use is untouched.

    Returns:
        bool: Whether the C library can do it (glibc); :obj:`False` elsewhere,
        where nothing is done.
    """
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
