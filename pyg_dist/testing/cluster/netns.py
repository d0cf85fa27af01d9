"""Network namespaces of the testbed: made, listed and deleted through
iproute2, named so that those of a process that is gone can be found and
removed (:func:`cleanup_stale`), and the check that this machine can make them
(:func:`unavailable_reason`)."""
from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["PREFIX", "SUBNET", "unavailable_reason", "cleanup_stale", "list_netns",
           "delete_netns", "new_name", "address", "ip", "tc", "disable_ipv6", "GRACE_SECONDS"]

#: Every namespace this package makes is named ``PREFIX<pid>-<k>-...``.
PREFIX = "pyg_dist-"
#: Host addresses: 198.18.0.1, 198.18.0.2, ... (RFC 2544's benchmarking range).
SUBNET = "198.18.0.0/24"
#: Seconds between SIGTERM and SIGKILL for a host's processes.
GRACE_SECONDS = 5.0
_counter = itertools.count()
_NAME = re.compile(rf"^{re.escape(PREFIX)}(\d+)-\d+-")
_REASONS: dict[str, str] = {}


def new_name() -> str:
    """A fresh name prefix ``PREFIX<pid>-<k>`` for this process's namespaces."""
    return f"{PREFIX}{os.getpid()}-{next(_counter)}"


def unavailable_reason() -> str:
    """Why this machine cannot make a testbed (``""`` if it can): not root,
    no iproute2, or namespaces refused (e.g. inside an unprivileged container)."""
    if "ns" not in _REASONS:
        _REASONS["ns"] = _probe_namespaces()
    return _REASONS["ns"]


def _probe_namespaces() -> str:
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 is not installed (apt-get install -y iproute2)"
    if shutil.which("unshare") is None:
        return "'unshare' (util-linux) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"{new_name()}-probe"
    try:
        ip("netns", "add", probe)
        ip("-n", probe, "link", "add", "name", "probe0", "type", "veth", "peer", "name", "probe1")
        tc("-n", probe, "qdisc", "add", "dev", "probe0", "root", "tbf", "rate", "1gbit",
           "burst", "64k", "latency", "50ms")
    except RuntimeError as exc:
        return f"the kernel refused ({exc})"
    finally:
        delete_netns(probe)
    return ""


def cleanup_stale() -> list[str]:
    """Deletes the namespaces (and temporary working folders) of testbeds
    whose process is gone (killed before it could tear them down); returns
    the namespaces' names. Those of live processes, and any not named by this
    module, are left alone."""
    removed = []
    for name in list_netns():
        if _stale(name):
            delete_netns(name)
            removed.append(name)
    for folder in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        if folder.is_dir() and _stale(folder.name):
            shutil.rmtree(folder, ignore_errors=True)
    return removed


def _stale(name: str) -> bool:
    match = _NAME.match(name)
    return match is not None and not Path(f"/proc/{match.group(1)}").exists()


def list_netns() -> list[str]:
    try:
        out = ip("netns", "list")
    except RuntimeError:
        return []
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def delete_netns(name: str) -> None:
    """Kills what runs in namespace ``name`` (only namespaces this module
    named), then deletes it."""
    assert name.startswith(PREFIX), f"refusing to touch namespace '{name}'"
    if name not in list_netns():
        return
    try:
        pids = [int(p) for p in ip("netns", "pids", name).split()]
    except RuntimeError:
        pids = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (GRACE_SECONDS if sig == signal.SIGTERM else 1.0)
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if Path(f"/proc/{p}").exists() and not _zombie(p)]
            time.sleep(0.05)
    try:
        ip("netns", "delete", name)
    except RuntimeError:
        pass


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return True


def address(i: int) -> str:
    return f"198.18.0.{i + 1}"


def _run(tool: str, *args: str) -> str:
    out = subprocess.run([tool, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"'{tool} {' '.join(args)}' failed: {out.stderr.strip()}")
    return out.stdout


def ip(*args: str) -> str:
    return _run("ip", *args)


def tc(*args: str) -> str:
    return _run("tc", *args)


def disable_ipv6(netns: str) -> None:
    flag = "/proc/sys/net/ipv6/conf/all/disable_ipv6"
    if Path(flag).exists():
        ip("netns", "exec", netns, "sh", "-c", f"echo 1 > {flag}")
