"""Memory the allocator kept after it was freed goes back to the system."""
import sys
from pathlib import Path

import pytest
import torch

from pyg_dist.utils.memory import release_freed_memory


def _resident() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")
def test_freed_heap_pages_go_back_and_memory_in_use_stays():
    # 64 KiB tensors come from glibc's heap (under its mmap threshold); keeping
    # every eighth pins the heap, so the pages between them stay resident when
    # freed, until they are released
    blocks = [torch.ones(16 * 1024) for _ in range(3200)]  # 200 MiB
    kept = blocks[::8]
    del blocks
    freed = _resident()
    assert release_freed_memory()
    released = _resident()
    assert freed - released > 100 * 2**20, (freed, released)
    assert all(float(t.sum()) == 16 * 1024 for t in kept)  # what is in use is untouched
