"""Whole-graph array passes in bounded memory: every pass over the edges goes
in chunks of :data:`CHUNK` entries, sorts run in place, so that a pass adds
at most one array of the edges' length plus a few chunk-sized temporaries."""
from __future__ import annotations

import ctypes
from collections.abc import Iterator

import numpy as np

__all__ = ["CHUNK", "chunks", "small_int_dtype", "id_dtype", "unique_sorted_inplace",
           "bincount_chunked", "map_large_allocations"]

#: Entries per chunk of an edge pass: 1M entries keep each temporary at 8 MB
#: (int64); a chunk's numpy work (milliseconds) dwarfs its Python overhead.
CHUNK = 1 << 20


def chunks(length: int, size: int = CHUNK) -> Iterator[slice]:
    """Consecutive slices covering ``range(length)``."""
    for lo in range(0, length, size):
        yield slice(lo, min(lo + size, length))


def small_int_dtype(max_value: int) -> np.dtype:
    """The narrowest signed integer dtype that holds ``0 ... max_value``."""
    for dtype in (np.int8, np.int16, np.int32):
        if max_value <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int64)


def id_dtype(num_nodes: int) -> np.dtype:
    """int32 for the node ids of a graph of fewer than :math:`2^{31}` nodes,
    int64 otherwise."""
    return np.dtype(np.int32 if num_nodes < 2**31 else np.int64)


#: glibc's ``mallopt`` parameter of the size from which an allocation gets a
#: mapping of its own.
_M_MMAP_THRESHOLD = -3


def map_large_allocations(threshold: int = CHUNK) -> bool:
    """Has glibc's allocator give every block of ``threshold`` bytes or more
    a mapping of its own, returned to the system when freed. By default
    glibc raises that threshold each time such a block is freed (up to 32
    MiB), after which the arrays of a pass over the edges come from the heap
    and freeing them leaves the heap's pages resident: a pipeline of passes
    then holds what its largest pass needed. Returns whether the allocator
    took the setting (:obj:`False` off glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, int(threshold)))


def unique_sorted_inplace(values: np.ndarray) -> int:
    """Moves the distinct values of the sorted array ``values`` to its front,
    in order, and returns their count; temporaries are chunk-sized."""
    if values.size == 0:
        return 0
    write, last = 1, values[0]
    for sl in chunks(values.size - 1):
        block = values[sl.start + 1 : sl.stop + 1]
        fresh = np.empty(block.size, dtype=bool)
        fresh[0] = block[0] != last
        np.not_equal(block[1:], block[:-1], out=fresh[1:])
        last = block[-1]
        kept = block[fresh]  # a copy: writing below never overtakes unread entries
        values[write : write + kept.size] = kept
        write += kept.size
    return write


def bincount_chunked(values: np.ndarray, minlength: int, divisor: int = 1) -> np.ndarray:
    """``np.bincount(values // divisor, minlength)`` without a full-length temporary."""
    counts = np.zeros(minlength, dtype=np.int64)
    for sl in chunks(values.size):
        block = values[sl] if divisor == 1 else values[sl] // divisor
        counts += np.bincount(block, minlength=minlength)
    return counts
