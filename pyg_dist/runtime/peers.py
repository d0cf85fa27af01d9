"""Who runs where, and who can still be reached.

At :func:`pyg_dist.init` every rank opens a *beacon* (a listening TCP socket
that accepts and closes connections) on the address its peers reach it at, and
the ranks exchange a :class:`Peer` record each: rank, host name, address,
beacon port and package versions. Two things use the directory:

* :func:`check_versions`: ranks that run different versions of Python, torch,
  torch_geometric or pyg_dist stop at start-up with one error naming them,
  instead of failing later in ways that hide the cause;
* :func:`guard`: when a collective or a halo exchange fails (a peer's process
  died, or the network dropped it and the wait ran into the timeout), every
  rank knocks on every peer's beacon and raises :class:`PeerLost` naming the
  ranks and hosts it cannot reach (no answer: link down, host unreachable) or
  whose process is gone (the host refuses the connection).

A beacon answers from the kernel's TCP stack, so a rank busy computing or
blocked in a collective still answers.
"""
from __future__ import annotations

import fcntl
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Peer", "PeerLost", "VersionMismatch", "publish", "close", "directory", "name", "probe",
    "guard", "lost_peers", "describe_loss",
    "check_versions", "package_versions", "local_address", "PROBE_TIMEOUT",
]

#: Seconds a peer's beacon has to answer before it counts as unreachable.
PROBE_TIMEOUT = 2.0
_SIOCGIFADDR = 0x8915


@dataclass(frozen=True)
class Peer:
    """One rank as the others see it."""

    rank: int
    host: str
    address: str
    port: int
    versions: dict[str, str] = field(default_factory=dict, compare=False)

    def __str__(self) -> str:
        return f"rank {self.rank} on {self.host} ({self.address})"


class PeerLost(RuntimeError):
    """Raised when a collective or halo exchange failed because peers can no
    longer be reached; ``lost`` lists them with what the probe found
    (``"unreachable"`` or ``"gone"``)."""

    def __init__(self, message: str, lost: list[tuple[Peer, str]]) -> None:
        super().__init__(message)
        self.lost = lost


class VersionMismatch(RuntimeError):
    """Ranks run different versions of the packages training depends on."""


@dataclass
class _State:
    me: Peer | None = None
    peers: list[Peer] = field(default_factory=list)
    beacon: socket.socket | None = None
    timeout: float = 0.0


_state = _State()


def package_versions() -> dict[str, str]:
    """The versions that must agree on every rank."""
    import torch
    import torch_geometric

    from pyg_dist.version import __version__

    python = ".".join(map(str, sys.version_info[:3]))
    return {"python": python, "torch": torch.__version__,
            "torch_geometric": torch_geometric.__version__, "pyg_dist": __version__}


def publish(all_gather: Callable[[Any], list[Any]], rank: int, timeout: float) -> list[Peer]:
    """Opens this rank's beacon and exchanges :class:`Peer` records with
    ``all_gather`` (an all-gather of picklable objects over the group), then
    checks the versions (:func:`check_versions`). ``timeout`` is the process
    group's, quoted in errors."""
    close()
    address = local_address()
    beacon = socket.create_server(("0.0.0.0", 0), backlog=128)
    threading.Thread(target=_answer, args=(beacon,), name="pyg_dist-beacon", daemon=True).start()
    me = Peer(rank, socket.gethostname(), address, beacon.getsockname()[1], package_versions())
    _state.me, _state.beacon, _state.timeout = me, beacon, timeout
    _state.peers = list(all_gather(me))
    check_versions(_state.peers)
    return _state.peers


def close() -> None:
    """Closes the beacon and forgets the directory."""
    if _state.beacon is not None:
        try:
            _state.beacon.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
        except OSError:
            pass
        _state.beacon.close()
    _state.me, _state.beacon, _state.peers = None, None, []


def directory() -> list[Peer]:
    """Every rank's :class:`Peer` record (empty before :func:`publish`)."""
    return list(_state.peers)


def name(rank: int) -> str:
    """``"rank 2 on host1 (198.18.0.2)"`` from the directory (``"rank 2"`` before it)."""
    for peer in _state.peers:
        if peer.rank == rank:
            return str(peer)
    return f"rank {rank}"


def _answer(beacon: socket.socket) -> None:
    while True:
        try:
            conn, _ = beacon.accept()
        except OSError:  # closed
            return
        conn.close()


def local_address() -> str:
    """The IPv4 address peers reach this rank at: that of the interface in
    ``GLOO_SOCKET_IFNAME`` (or ``NCCL_SOCKET_IFNAME``) if set, else the source
    address of the route to ``MASTER_ADDR``."""
    iface = os.environ.get("GLOO_SOCKET_IFNAME") or os.environ.get("NCCL_SOCKET_IFNAME")
    if iface and "," not in iface:
        try:
            return interface_address(iface.lstrip("^="))
        except OSError:
            pass
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe_socket:
        try:
            probe_socket.connect((master, 9))  # a UDP connect sends nothing
            return str(probe_socket.getsockname()[0])
        except OSError:
            return "127.0.0.1"


def interface_address(name: str) -> str:
    """The IPv4 address of network interface ``name``; raises :class:`OSError`."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
    return socket.inet_ntoa(packed[20:24])


def probe(peers: list[Peer], timeout: float = PROBE_TIMEOUT) -> dict[int, str]:
    """Knocks on every peer's beacon at once: per rank ``"alive"`` (it
    answered), ``"gone"`` (its host refused: the process has exited) or
    ``"unreachable"`` (no answer within ``timeout`` seconds)."""
    def knock(peer: Peer) -> str:
        try:
            socket.create_connection((peer.address, peer.port), timeout=timeout).close()
            return "alive"
        except ConnectionRefusedError:
            return "gone"
        except OSError:
            return "unreachable"

    if not peers:
        return {}
    with ThreadPoolExecutor(max_workers=min(32, len(peers))) as pool:
        return dict(zip((p.rank for p in peers), pool.map(knock, peers)))


@contextmanager
def guard(what: str) -> Iterator[None]:
    """Runs a collective; if it fails, probes the peers and raises
    :class:`PeerLost` naming those lost (the original error as its cause),
    or re-raises the error unchanged when every peer answers."""
    start = time.monotonic()
    try:
        yield
    except RuntimeError as exc:
        if isinstance(exc, PeerLost) or _state.me is None:
            raise
        lost = lost_peers()
        if not lost:
            raise
        raise PeerLost(describe_loss(what, lost, time.monotonic() - start), lost) from exc


def lost_peers(timeout: float = PROBE_TIMEOUT) -> list[tuple[Peer, str]]:
    """The peers that do not answer, with what the probe found."""
    others = [p for p in _state.peers if _state.me is None or p.rank != _state.me.rank]
    status = probe(others, timeout)
    return [(p, status[p.rank]) for p in others if status[p.rank] != "alive"]


def describe_loss(what: str, lost: list[tuple[Peer, str]], waited: float) -> str:
    """The error of :func:`guard`: which peers are lost, how, and what to do."""
    me = _state.me
    where = f" on {me}" if me is not None else ""
    unreachable = [p for p, s in lost if s == "unreachable"]
    gone = [p for p, s in lost if s == "gone"]
    parts = []
    if unreachable:
        parts.append(f"{_list(unreachable)} did not answer within {PROBE_TIMEOUT:g} s "
                     f"(network link down or host unreachable)")
    if gone:
        parts.append(f"the process of {_list(gone)} has exited (its host refuses "
                     f"connections; that rank's own output has the cause)")
    return (
        f"{what} failed{where} after {waited:.1f} s, peers lost: "
        f"{'; '.join(parts)}. Training cannot continue without every rank: fix the cause and "
        f"restart from the last checkpoint (pyg-dist train --checkpoint DIR --resume); if the "
        f"network is only slow, raise PYG_DIST_TIMEOUT (now {_state.timeout:g} s)"
    )


def _list(peers: list[Peer]) -> str:
    by_host: dict[tuple[str, str], list[int]] = {}
    for p in peers:
        by_host.setdefault((p.host, p.address), []).append(p.rank)
    return ", ".join(
        f"rank{'s' if len(r) > 1 else ''} {', '.join(map(str, r))} on {h} ({a})"
        for (h, a), r in by_host.items()
    )


def check_versions(peers: list[Peer]) -> None:
    """Raises :class:`VersionMismatch` (the same on every rank) when the
    ranks run different versions of Python, torch, torch_geometric or pyg_dist."""
    if not peers:
        return
    differing = [k for k in peers[0].versions
                 if len({p.versions.get(k) for p in peers}) > 1]
    if not differing:
        return
    lines = []
    for key in differing:
        groups: dict[str | None, list[Peer]] = {}
        for p in peers:
            groups.setdefault(p.versions.get(key), []).append(p)
        lines.append(f"{key}: " + "; ".join(f"{v} on {_list(ps)}" for v, ps in groups.items()))
    raise VersionMismatch(
        "the ranks run different package versions: " + " | ".join(lines)
        + ". Install the same versions on every machine (e.g. pip install torch==X "
          "torch_geometric==Y and the same pyg_dist checkout) and start again"
    )
