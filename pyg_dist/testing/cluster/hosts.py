"""A host of the testbed and what a command did on it."""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = ["Host", "HostResult", "INTERFACE", "fill"]

INTERFACE = "eth0"
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


class _Testbed(Protocol):
    """What :meth:`Host.fields` reads of its :class:`~.testbed.Cluster`."""

    hosts: list[Host]


@dataclass
class Host:
    """One host of a :class:`~.testbed.Cluster`.

    Attributes:
        index: Its position (0 for the first host, which runs torchrun's master).
        name: Its hostname (``host0``, ...), as its processes see it.
        netns: The network namespace it lives in.
        address: Its IPv4 address on the cluster's subnet.
        workdir: A folder of its own, the working directory of its commands.
        interface: Its network interface (what ``GLOO_SOCKET_IFNAME`` names).
    """

    index: int
    name: str
    netns: str
    address: str
    workdir: Path
    interface: str = INTERFACE

    def fields(self, cluster: _Testbed) -> dict[str, str]:
        """What ``{placeholders}`` in a command stand for on this host:
        ``{host}``, ``{index}``/``{node_rank}``, ``{addr}``, ``{workdir}``,
        ``{nnodes}``, ``{master_addr}``, ``{python}`` and ``{iface}``."""
        return {
            "host": self.name, "index": str(self.index), "node_rank": str(self.index),
            "addr": self.address, "workdir": str(self.workdir),
            "nnodes": str(len(cluster.hosts)), "master_addr": cluster.hosts[0].address,
            "python": sys.executable, "iface": self.interface,
        }


@dataclass
class HostResult:
    """What a command did on one host."""

    host: Host
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    #: The host's peak memory in the run (bytes, page cache included) where
    #: the host is capped (``Cluster(memory=...)``).
    memory_peak: int | None = None
    #: Processes the kernel killed on the host for going over its cap.
    oom_kills: int = 0

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def describe(self) -> str:
        status = "timed out" if self.timed_out else f"exit {self.returncode}"
        if self.oom_kills:
            status += f", {self.oom_kills} process(es) killed for going over the memory cap"
        return (f"{self.host.name} ({self.host.address}): {status} after {self.seconds:.1f} s"
                f"\n--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-3000:]}")


def fill(arg: str, fields: dict[str, str]) -> str:
    """``arg`` with its ``{placeholders}`` replaced by ``fields`` (unknown ones kept)."""
    return _PLACEHOLDER.sub(lambda m: fields.get(m.group(1), m.group(0)), arg)
