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
  rank first reads the reports of peers that gave up with an error of their
  own (:func:`report_failure`, left in the process group's store) and raises
  :class:`PeerFailed` naming each such rank, what it was doing and its
  error; without a report it knocks on every peer's beacon and raises
  :class:`PeerLost` naming the ranks and hosts it cannot reach (no answer:
  link down, host unreachable) or whose process is gone (the host refuses
  the connection). A collective that ran into the timeout although every
  peer answers afterwards raises :class:`NetworkStalled`: the network
  stopped moving for longer than the timeout (a link that went down and came
  back) and the connections may have lost their place.

A beacon answers from the kernel's TCP stack, so a rank busy computing or
blocked in a collective still answers.
"""
from __future__ import annotations

import fcntl
import json
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

from pyg_dist.version import __version__

__all__ = [
    "Peer", "PeerLost", "PeerFailed", "NetworkStalled", "VersionMismatch", "publish", "close",
    "directory", "name", "probe", "guard", "lost_peers", "describe_loss", "describe_stall",
    "report_failure", "clear_failure", "failures", "describe_failures",
    "check_versions", "package_versions", "local_address", "PROBE_TIMEOUT",
]

#: Seconds a peer's beacon has to answer before it counts as unreachable
#: (and the most a rank waits for the store to tell which peers gave up).
PROBE_TIMEOUT = 2.0
#: Where a rank that gives up leaves its error in the process group's store.
_FAILED = "pyg_dist/failed/"
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

    def __reduce__(self) -> Any:  # pickled with its fields (pyg_dist.launch sends it back)
        return type(self), (str(self), self.lost)


class NetworkStalled(PeerLost):
    """Raised when a collective or halo exchange ran into the timeout
    although every peer answers afterwards: the network stalled for longer
    than the timeout (a link that was down for a while, heavy congestion).
    ``lost`` is empty."""

    def __init__(self, message: str, lost: list[tuple[Peer, str]] | None = None) -> None:
        super().__init__(message, lost or [])


class PeerFailed(PeerLost):
    """Raised when a collective or halo exchange failed because peers gave
    up with an error of their own (see :func:`report_failure`);
    ``failures`` maps each such rank to what it was doing and its error."""

    def __init__(self, message: str, lost: list[tuple[Peer, str]],
                 failures: dict[int, dict[str, str]]) -> None:
        super().__init__(message, lost)
        self.failures = failures

    def __reduce__(self) -> Any:  # pickled with its fields (pyg_dist.launch sends it back)
        return type(self), (str(self), self.lost, self.failures)


class VersionMismatch(RuntimeError):
    """Ranks run different versions of the packages training depends on."""


@dataclass
class _State:
    me: Peer | None = None
    peers: list[Peer] = field(default_factory=list)
    beacon: socket.socket | None = None
    timeout: float = 0.0
    store: Any = None
    reported: bool = False


_state = _State()


def package_versions() -> dict[str, str]:
    """The versions that must agree on every rank."""
    import torch
    import torch_geometric

    python = ".".join(map(str, sys.version_info[:3]))
    return {"python": python, "torch": torch.__version__,
            "torch_geometric": torch_geometric.__version__, "pyg_dist": __version__}


def publish(all_gather: Callable[[Any], list[Any]], rank: int, timeout: float,
            store: Any = None) -> list[Peer]:
    """Opens this rank's beacon and exchanges :class:`Peer` records with
    ``all_gather`` (an all-gather of picklable objects over the group), then
    checks the versions (:func:`check_versions`). ``timeout`` is the process
    group's, quoted in errors; ``store`` is the group's key-value store,
    where ranks that give up leave their error (:func:`report_failure`)."""
    close()
    _state.store = store
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
    _state.me, _state.beacon, _state.peers, _state.store = None, None, [], None
    _state.reported = False


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
    """Runs a collective; if it fails, raises :class:`PeerFailed` naming
    the peers that reported giving up (:func:`failures`), else probes the
    peers and raises :class:`PeerLost` naming those lost (the original
    error as its cause); when every peer answers, a timeout becomes
    :class:`NetworkStalled` and any other error is re-raised unchanged."""
    start = time.monotonic()
    try:
        yield
    except RuntimeError as exc:
        if isinstance(exc, PeerLost) or _state.me is None:
            raise
        failed = failures()
        if failed:
            lost = [(p, "failed") for p in _state.peers if p.rank in failed]
            raise PeerFailed(describe_failures(what, failed, time.monotonic() - start), lost,
                             failed) from exc
        lost = lost_peers()
        if not lost and _timed_out(exc):
            raise NetworkStalled(describe_stall(what, time.monotonic() - start)) from exc
        if not lost:
            raise
        raise PeerLost(describe_loss(what, lost, time.monotonic() - start), lost) from exc


def _timed_out(error: BaseException) -> bool:
    """Whether a collective's error is its timeout (gloo: "Timed out
    waiting 2000ms for recv operation"; NCCL: "Watchdog caught collective
    operation timeout")."""
    text = str(error).lower()
    return "timed out" in text or "timeout" in text


def describe_stall(what: str, waited: float) -> str:
    """The error of :func:`guard` when a collective timed out but every peer
    answers: the network stalled; what to do."""
    me = _state.me
    where = f" on {me}" if me is not None else ""
    return (
        f"{what} timed out{where} after {waited:.1f} s, but every peer answers now: the "
        f"network stalled for longer than PYG_DIST_TIMEOUT ({_state.timeout:g} s), e.g. a "
        f"link that went down and came back. Every rank stops: restart from the last "
        f"checkpoint (pyg-dist train --checkpoint DIR --resume), and raise PYG_DIST_TIMEOUT "
        f"if the network stalls for longer than that"
    )


def report_failure(doing: str, error: BaseException) -> None:
    """Leaves this rank's ``error`` (and what it was ``doing``) in the
    process group's store, where peers whose collectives fail meanwhile read
    it (:func:`guard`): they raise :class:`PeerFailed` naming this rank and
    the cause instead of only "gone". Does nothing without a store or when
    its host cannot be reached."""
    store, me = _state.store, _state.me
    if store is None or me is None:
        return
    report = json.dumps({"doing": doing, "error": describe_error(error)})
    _bounded(lambda: store.set(f"{_FAILED}{me.rank}", report), None)
    _state.reported = True


def clear_failure() -> None:
    """Removes this rank's report (at the start of new work together, so an
    error that was handled is not blamed for a later failure)."""
    store, me = _state.store, _state.me
    if store is None or me is None or not _state.reported:
        return
    key = f"{_FAILED}{me.rank}"
    _bounded(lambda: store.delete_key(key), None)
    _state.reported = False


def failures(timeout: float = PROBE_TIMEOUT) -> dict[int, dict[str, str]]:
    """The reports of peers that gave up (:func:`report_failure`): rank ->
    ``{"doing": ..., "error": ...}``; empty without a store, or when the
    store does not answer within ``timeout`` seconds (its host is gone or cut
    off: the beacons tell the rest)."""
    store, me = _state.store, _state.me
    if store is None or me is None:
        return {}

    def read() -> dict[int, dict[str, str]]:
        out = {}
        for peer in _state.peers:
            key = f"{_FAILED}{peer.rank}"
            if peer.rank != me.rank and store.check([key]):
                out[peer.rank] = json.loads(store.get(key))
        return out

    return _bounded(read, {}, timeout)


def _bounded(fn: Callable[[], Any], default: Any, timeout: float = PROBE_TIMEOUT) -> Any:
    """``fn()`` on a helper thread, or ``default`` when it raises or takes
    longer than ``timeout`` seconds (a store on a host that went away blocks
    for the store's own timeout)."""
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(fn())
        except Exception:  # noqa: BLE001 - the store is gone: nothing to read or leave
            pass

    worker = threading.Thread(target=run, name="pyg_dist-store", daemon=True)
    worker.start()
    worker.join(timeout)
    return result[0] if result else default


def describe_error(error: BaseException) -> str:
    """``"KeyError: 'w'"``: the error's type and message on one line, shortened."""
    text = " ".join(str(error).split())
    text = text if len(text) <= 400 else text[:397] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def describe_failures(what: str, failed: dict[int, dict[str, str]], waited: float) -> str:
    """The error of :func:`guard` when peers reported giving up: each one,
    what it was doing and its error, and what to do."""
    me = _state.me
    where = f" on {me}" if me is not None else ""
    causes = "; ".join(f"{name(r)} gave up with {f['error']} (while {f['doing']})"
                       for r, f in sorted(failed.items()))
    return (
        f"{what} failed{where} after {waited:.1f} s: {causes}. Every rank stops: fix the "
        f"cause (that rank's own output has the traceback) and restart; with checkpoints, "
        f"from the last one (pyg-dist train --checkpoint DIR --resume)"
    )


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
