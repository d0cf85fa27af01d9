"""Resident memory of this process, from /proc (Linux): what the benchmarks
report as memory. ``peak()`` is the high-water mark since the last ``reset_peak()``
(or since the process started, where the kernel refuses the reset)."""
import gc
from pathlib import Path

from pyg_dist.utils.memory import release_freed_memory

__all__ = ["current", "live", "peak", "reset_peak", "tensor_bytes"]

_STATUS = Path("/proc/self/status")


def _field(name: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {name} in {_STATUS}; these benchmarks measure memory on Linux only")


def current() -> int:
    """Resident bytes now (VmRSS)."""
    return _field("VmRSS")


def live() -> int:
    """Resident bytes after a garbage collection and glibc's ``malloc_trim``
    (memory the allocator kept after it was freed goes back first): what is
    in use. :func:`current` where glibc is not there."""
    gc.collect()
    release_freed_memory()
    return current()


def peak() -> int:
    """Largest resident bytes since the last :func:`reset_peak` (VmHWM)."""
    return _field("VmHWM")


def reset_peak() -> bool:
    """Sets the high-water mark to the current resident size; False if the
    kernel does not allow it (then :func:`peak` is the lifetime peak)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def tensor_bytes(data) -> int:
    """Bytes of the tensors of a PyG ``Data`` (its input size)."""
    import torch

    return sum(v.numel() * v.element_size() for _, v in data if isinstance(v, torch.Tensor))
