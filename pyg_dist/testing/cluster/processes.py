"""The processes of a host's commands: stopped by process group, waited for
with a deadline."""
from __future__ import annotations

import os
import signal
import subprocess
import time

from pyg_dist.testing.cluster.netns import GRACE_SECONDS

__all__ = ["kill_group", "wait_all"]


def kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM to ``proc``'s process group, SIGKILL after a grace period."""
    for sig, grace in ((signal.SIGTERM, GRACE_SECONDS), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass


def wait_all(procs: list[subprocess.Popen], start: float,
              deadline: float) -> list[float | None]:
    """Seconds each process ran since ``start``, :obj:`None` for those still
    running at ``deadline``."""
    ended: list[float | None] = [None] * len(procs)
    while any(e is None for e in ended) and time.monotonic() < deadline:
        for i, proc in enumerate(procs):
            if ended[i] is None and proc.poll() is not None:
                ended[i] = time.monotonic() - start
        time.sleep(0.05)
    return ended
