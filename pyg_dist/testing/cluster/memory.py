"""Memory caps of the testbed's hosts: one cgroup per host, made under this
process's own cgroup, whose limit covers every process the host runs (page
cache included, which the kernel reclaims before it kills). Both cgroup
layouts are handled: v2 (``memory.max``, ``memory.peak``, ``memory.events``)
and v1's memory controller (``memory.limit_in_bytes``,
``memory.max_usage_in_bytes``, ``memory.oom_control``). A process that would
go over the cap is killed by the kernel (SIGKILL), as on a machine that runs
out of memory without swap."""
from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MemoryCap", "memory_cap_reason", "parse_bytes"]

_ROOT = Path("/sys/fs/cgroup")
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}
_REASONS: dict[str, str] = {}


def parse_bytes(size: str | int) -> int:
    """``size`` in bytes: an int, or ``"512M"``, ``"2G"``, ``"100k"``."""
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)(?:i?[bB])?\s*", str(size))
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"a memory cap is a positive size such as '512M' or '2G' "
                         f"(got {size!r})")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def _own_parent() -> tuple[Path, int] | None:
    """The folder of this process's cgroup under which host cgroups go, and
    the cgroup version; :obj:`None` where there is no memory controller."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return _ROOT / "memory" / path.lstrip("/"), 1
    for line in lines:
        if line.startswith("0::") and (_ROOT / "cgroup.controllers").is_file():
            return _ROOT / line[3:].lstrip("/"), 2
    return None


def memory_cap_reason() -> str:
    """Why this machine cannot cap a host's memory (``""`` if it can): no
    memory controller, or one this process may not make cgroups in."""
    if "memory" not in _REASONS:
        _REASONS["memory"] = _probe()
    return _REASONS["memory"]


def _probe() -> str:
    parent = _own_parent()
    if parent is None:
        return "this machine has no cgroup memory controller"
    try:
        cap = MemoryCap.create("probe", 64 * 2**20)
    except OSError as exc:
        return f"cannot make a memory cgroup under {parent[0]} ({exc})"
    cap.remove()
    return ""


@dataclass
class MemoryCap:
    """A cgroup whose processes share a memory limit.

    Attributes:
        path: The cgroup's folder.
        version: 1 or 2.
        limit: The cap, in bytes.
    """

    path: Path
    version: int
    limit: int

    @staticmethod
    def create(name: str, limit: int) -> MemoryCap:
        """Makes the cgroup ``name`` (under this process's own) capped at
        ``limit`` bytes; raises :class:`OSError` where the machine refuses."""
        parent = _own_parent()
        if parent is None:
            raise OSError("this machine has no cgroup memory controller")
        folder, version = parent
        path = folder / name
        path.mkdir()
        cap = MemoryCap(path, version, limit)
        try:
            if version == 1:
                (path / "memory.limit_in_bytes").write_text(str(limit))
                swap = path / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    swap.write_text(str(limit))
            else:
                (path / "memory.max").write_text(str(limit))
                if (path / "memory.swap.max").exists():
                    (path / "memory.swap.max").write_text("0")
        except OSError:
            cap.remove()
            raise
        return cap

    def enter(self) -> None:
        """Moves the calling process into the cgroup (its children follow)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def pids(self) -> list[int]:
        """The processes in the cgroup now."""
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except FileNotFoundError:
            return []

    def peak(self) -> int | None:
        """The highest memory use of the cgroup so far (bytes; page cache
        included), where the kernel records it."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            return int((self.path / name).read_text())
        except (FileNotFoundError, ValueError):
            return None

    def oom_kills(self) -> int:
        """Processes the kernel killed for going over the cap."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            text = (self.path / name).read_text()
        except FileNotFoundError:
            return 0
        match = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
        return int(match.group(1)) if match else 0

    def reset_peak(self) -> None:
        """Starts :meth:`peak` afresh (v1; v2 keeps the peak since the cgroup
        was made)."""
        if self.version == 1:
            (self.path / "memory.max_usage_in_bytes").write_text("0")

    def remove(self) -> None:
        """Kills what still runs in the cgroup and removes it."""
        for _ in range(50):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        try:
            self.path.rmdir()
        except FileNotFoundError:
            pass
