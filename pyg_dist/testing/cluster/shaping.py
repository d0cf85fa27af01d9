"""Link shaping of the testbed with ``tc``: rate limits (tbf) and, where the
kernel has netem, delay and loss."""
from __future__ import annotations

import re

from pyg_dist.testing.cluster.netns import delete_netns, ip, new_name, tc, unavailable_reason

__all__ = ["parse_rate", "shape", "netem_reason"]

_RATE = re.compile(r"^(\d+(?:\.\d+)?)([kmg]?)bit$")
_REASONS: dict[str, str] = {}


def parse_rate(rate: str) -> float:
    """Bits per second of a tc rate (``"1gbit"`` -> 1e9); raises naming the spelling."""
    match = _RATE.match(rate.strip().lower())
    if not match:
        raise ValueError(f"'Cluster' got rate={rate!r}; spell it like tc: '100mbit', '1gbit', "
                         f"'10gbit'")
    return float(match.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[match.group(2)]


def shape(netns: str, dev: str, rate: str | None, delay: str | None = None,
          loss: str | None = None) -> None:
    """tbf (``rate``) under netem (``delay``, ``loss``) on ``dev``'s egress in
    namespace ``netns``; nothing for what is :obj:`None`."""
    parent = ["root"]
    if delay or loss:
        netem = (["delay", delay] if delay else []) + (["loss", loss] if loss else [])
        tc("-n", netns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", *netem)
        parent = ["parent", "1:"]
    if rate is not None:
        burst = max(64 * 1024, int(parse_rate(rate) / 8 / 1000))  # 1 ms at line rate
        tc("-n", netns, "qdisc", "add", "dev", dev, *parent, "handle", "10:", "tbf",
           "rate", rate, "burst", str(burst), "latency", "50ms")


def netem_reason() -> str:
    """Why delay and loss are unavailable (``""`` if the kernel has netem)."""
    if "netem" not in _REASONS:
        _REASONS["netem"] = unavailable_reason() or _probe_netem()
    return _REASONS["netem"]


def _probe_netem() -> str:
    probe = f"{new_name()}-probe"
    try:
        ip("netns", "add", probe)
        tc("-n", probe, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms")
    except RuntimeError as exc:
        return f"this kernel has no netem qdisc ({exc})"
    finally:
        delete_netns(probe)
    return ""
