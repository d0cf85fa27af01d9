r"""A cluster of hosts on one machine: each host a network namespace with its
own address, hostname and shaped link, all joined by a switch.

::

        host0 (198.18.0.1)   host1 (198.18.0.2)   ...      one namespace each
          eth0                 eth0                          tbf: --rate (egress)
           |                    |
          p0 ------ br0 ------ p1  ...                      the switch: a bridge in
                                                             a namespace of its own,
                                                             tbf on each port (egress)

Nothing is created in the machine's own network namespace: the switch and every
host live in namespaces named ``pyg_dist-<pid>-<k>-...`` (``<pid>`` is the
process that made them), with addresses from 198.18.0.0/24, the range RFC 2544
reserves for benchmarking; traffic never leaves them. A testbed left behind by a
killed process is removed by the next :class:`Cluster` (or ``--cleanup``).
Needs root and iproute2 (``ip``, ``tc``); :func:`unavailable_reason` says why a
machine cannot make one. Each link is rate-limited in both directions with
``tbf``; delay and loss (``netem``) are applied only where the kernel has netem
(:func:`netem_reason`). ``memory=`` caps each host's memory in a cgroup of
its own (:mod:`~.memory`), where the machine has a memory controller
(:func:`memory_cap_reason`).

From Python::

    with Cluster(hosts=2, rate="1gbit") as cluster:
        results = cluster.run(cluster.torchrun(["-m", "pyg_dist.cli", "train", ...],
                                               nproc_per_node=2), timeout=600)

From the shell (``{placeholders}`` are filled per host, see :meth:`Host.fields`)::

    python -m pyg_dist.testing.cluster --hosts 2 --rate 1gbit --distribute parts \
        --torchrun 2 -- -m pyg_dist.cli train --parts-dir parts
    python -m pyg_dist.testing.cluster --hosts 2 -- sh -c 'hostname; ip -4 addr show eth0'
    python -m pyg_dist.testing.cluster --cleanup

The pieces: :mod:`~.netns` (namespaces, their clean-up and the machine check),
:mod:`~.shaping` (``tc``), :mod:`~.hosts` and :mod:`~.processes` (a host, its
commands' processes), :mod:`~.testbed` (:class:`Cluster`) and :mod:`~.cli`.
"""
from pyg_dist.testing.cluster.cli import main
from pyg_dist.testing.cluster.hosts import Host, HostResult
from pyg_dist.testing.cluster.memory import MemoryCap, memory_cap_reason, parse_bytes
from pyg_dist.testing.cluster.netns import PREFIX, SUBNET, cleanup_stale, unavailable_reason
from pyg_dist.testing.cluster.shaping import netem_reason, parse_rate
from pyg_dist.testing.cluster.testbed import Cluster

__all__ = [
    "Cluster", "Host", "HostResult", "unavailable_reason", "netem_reason", "cleanup_stale",
    "parse_rate", "MemoryCap", "memory_cap_reason", "parse_bytes", "PREFIX", "SUBNET", "main",
]
