"""The testbed itself: :class:`Cluster` makes the switch and the hosts, runs
commands on them and tears everything down."""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pyg_dist.testing.cluster.hosts import INTERFACE, Host, HostResult, fill
from pyg_dist.testing.cluster.memory import MemoryCap, memory_cap_reason, parse_bytes
from pyg_dist.testing.cluster.netns import (
    address,
    cleanup_stale,
    delete_netns,
    disable_ipv6,
    ip,
    list_netns,
    new_name,
    unavailable_reason,
)
from pyg_dist.testing.cluster.processes import kill_group, wait_all
from pyg_dist.testing.cluster.shaping import netem_reason, parse_rate, shape

__all__ = ["Cluster"]

# Run on a host: its hostname, /etc/hosts naming every host, no DNS server
# (none is reachable from the namespace: lookups must fail at once, not time out).
_ENTER = ('hostname "$0" && mount --bind "$1/hosts" /etc/hosts && '
          'mount --bind "$1/resolv.conf" /etc/resolv.conf && shift && exec "$@"')


class Cluster:
    r"""``hosts`` hosts in network namespaces, joined by a switch, each link
    limited to ``rate`` in both directions. Use it as a context manager (or
    call :meth:`up` and :meth:`down`): everything is torn down on exit, on
    errors and on Ctrl-C, and :meth:`up` first removes testbeds of processes
    that no longer exist.

    Args:
        hosts (int, optional): Number of hosts. (default: :obj:`2`)
        rate (str, optional): Link rate in tc's spelling (``"1gbit"``,
            ``"10gbit"``, ``"100mbit"``); :obj:`None` leaves links unshaped.
            (default: :obj:`None`)
        delay (str, optional): One-way delay per link (``"1ms"``); needs netem.
            (default: :obj:`None`)
        loss (str, optional): Packet loss per link direction (``"1%"``); needs
            netem. (default: :obj:`None`)
        workdir (str, optional): Folder for the hosts' working folders
            (``<workdir>/host<i>``); a temporary folder, removed at
            :meth:`down`, when :obj:`None`. (default: :obj:`None`)
        memory (str or int, optional): Memory of each host (``"2G"``, or
            bytes): all its processes together, page cache included, in a
            cgroup of its own (:mod:`~.memory`); a process that would go over
            it is killed by the kernel, and :meth:`run` reports each host's
            peak and kills. :obj:`None` leaves hosts uncapped.
            (default: :obj:`None`)
    """

    def __init__(self, hosts: int = 2, rate: str | None = None, delay: str | None = None,
                 loss: str | None = None, workdir: str | os.PathLike | None = None,
                 memory: str | int | None = None) -> None:
        if isinstance(hosts, bool) or not isinstance(hosts, int) or not 1 <= hosts <= 250:
            raise ValueError(f"'Cluster' needs 1 <= hosts <= 250 (got {hosts!r})")
        if rate is not None:
            parse_rate(rate)
        self.memory = None if memory is None else parse_bytes(memory)
        self._caps: dict[int, MemoryCap] = {}
        self.num_hosts = hosts
        self.rate, self.delay, self.loss = rate, delay, loss
        self._own_workdir = workdir is None
        self.workdir = Path(workdir).resolve() if workdir is not None else None
        tag = new_name()
        self.switch = f"{tag}-sw"
        self._tag = tag
        self.hosts: list[Host] = []
        self._procs: list[subprocess.Popen] = []
        self._up = False

    # -- life cycle ---------------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> Cluster:
        """Creates the switch and the hosts, shapes the links; raises a
        :class:`RuntimeError` naming the reason where the machine cannot."""
        reason = unavailable_reason()
        if reason:
            raise RuntimeError(f"'Cluster' cannot make network namespaces here: {reason}")
        if self.memory is not None and memory_cap_reason():
            raise RuntimeError(f"'Cluster' got memory={self.memory} but cannot cap a host's "
                               f"memory here: {memory_cap_reason()}; leave memory unset")
        if (self.delay or self.loss) and netem_reason():
            raise RuntimeError(f"'Cluster' got delay={self.delay!r}, loss={self.loss!r} but "
                               f"{netem_reason()}; leave delay and loss unset")
        cleanup_stale()
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix=f"{self._tag}-"))
        atexit.register(self.down)
        self._up = True
        try:
            self._write_etc()
            ip("netns", "add", self.switch)
            ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            ip("-n", self.switch, "link", "set", "br0", "up")
            self.hosts = []
            for i in range(self.num_hosts):
                self.hosts.append(self._add_host(i))
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Stops every process on the hosts and deletes the namespaces (and
        the temporary working folder). Safe to call twice."""
        if not self._up:
            return
        self._up = False
        atexit.unregister(self.down)
        for proc in self._procs:
            kill_group(proc)
        self._procs = []
        for name in list_netns():  # also those of a set-up that was interrupted
            if name.startswith(f"{self._tag}-"):
                delete_netns(name)
        for cap in self._caps.values():
            cap.remove()
        self._caps = {}
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def _etc(self) -> Path:
        assert self.workdir is not None, "up() sets the working folder first"
        return self.workdir / ".etc"

    def _write_etc(self) -> None:
        """The hosts file every host sees (``host<i>`` -> its address)."""
        self._etc.mkdir(parents=True, exist_ok=True)
        names = "".join(f"{address(i)}\thost{i}\n::ffff:{address(i)}\thost{i}\n"
                        for i in range(self.num_hosts))
        (self._etc / "hosts").write_text(f"127.0.0.1\tlocalhost\n{names}")
        (self._etc / "resolv.conf").write_text("")

    def _add_host(self, i: int) -> Host:
        assert self.workdir is not None, "up() sets the working folder first"
        netns = f"{self._tag}-h{i}"
        host = Host(i, f"host{i}", netns, address(i), self.workdir / f"host{i}")
        host.workdir.mkdir(parents=True, exist_ok=True)
        port = f"p{i}"
        ip("netns", "add", netns)
        ip("-n", netns, "link", "set", "lo", "up")
        ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", INTERFACE,
           "netns", netns)
        ip("-n", self.switch, "link", "set", port, "master", "br0")
        ip("-n", self.switch, "link", "set", port, "up")
        disable_ipv6(netns)  # one address per host: gloo must not pick a link-local one
        ip("-n", netns, "addr", "add", f"{host.address}/24", "dev", INTERFACE)
        ip("-n", netns, "link", "set", INTERFACE, "up")
        shape(netns, INTERFACE, self.rate, self.delay, self.loss)
        shape(self.switch, port, self.rate, self.delay, self.loss)
        if self.memory is not None:
            self._caps[i] = MemoryCap.create(netns, self.memory)
        return host

    # -- links --------------------------------------------------------------------------------

    def cut(self, host: int | Host) -> None:
        """Cuts ``host``'s link (its switch port goes down): no packet in or
        out, no error to either side; TCP connections just stop moving."""
        ip("-n", self.switch, "link", "set", f"p{self._index(host)}", "down")

    def restore(self, host: int | Host) -> None:
        """Puts a link cut by :meth:`cut` back."""
        ip("-n", self.switch, "link", "set", f"p{self._index(host)}", "up")

    def _index(self, host: int | Host) -> int:
        return host.index if isinstance(host, Host) else int(host)

    # -- commands -----------------------------------------------------------------------------

    def environment(self, host: Host, env: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of ``host``'s commands: this process's, the socket
        interface variables of gloo and NCCL set to the host's interface, and ``env``."""
        return {**os.environ, "GLOO_SOCKET_IFNAME": host.interface,
                "NCCL_SOCKET_IFNAME": host.interface, **(env or {})}

    def spawn(self, host: int | Host, command: Sequence[str] | Callable[[Host], Sequence[str]],
              env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None,
              stdout: int | None = None, stderr: int | None = None) -> subprocess.Popen:
        """Starts ``command`` on ``host`` (in its namespace, under its hostname,
        in its working folder unless ``cwd`` is given) and returns the process;
        :meth:`down` stops it if it still runs. ``command`` is a list of
        arguments with ``{placeholders}`` (see :meth:`Host.fields`) or a
        function of the host that returns one."""
        host = self.hosts[self._index(host)]
        argv = list(command(host) if callable(command) else command)
        argv = [fill(arg, host.fields(self)) for arg in argv]
        # ip netns exec gives the command a mount namespace of its own: the
        # cluster's hosts file and an empty resolver configuration go there.
        wrapped = ["ip", "netns", "exec", host.netns, "unshare", "--uts", "--",
                   "sh", "-c", _ENTER, host.name, str(self._etc), *argv]
        cap = self._caps.get(host.index)
        proc = subprocess.Popen(
            wrapped, cwd=cwd or host.workdir, env=self.environment(host, env),
            stdout=stdout, stderr=stderr, start_new_session=True,
            preexec_fn=cap.enter if cap is not None else None,  # before the command starts
        )
        self._procs.append(proc)
        return proc

    def run(self, command: Sequence[str] | Callable[[Host], Sequence[str]],
            env: dict[str, str] | None = None, timeout: float = 600.0,
            hosts: Sequence[int] | None = None,
            during: Callable[[Cluster, list[subprocess.Popen]], None] | None = None,
            ) -> list[HostResult]:
        """Runs ``command`` on every host (or on ``hosts``) at once and waits
        for all, at most ``timeout`` seconds: then every process still running
        is stopped and its result says ``timed_out``. ``during(cluster, procs)``,
        if given, runs while the commands do (to cut a link, kill a process, ...).
        Returns each host's :class:`HostResult`, in host order."""
        chosen = [self.hosts[i] for i in (hosts if hosts is not None else range(len(self.hosts)))]
        for host in chosen:
            if host.index in self._caps:
                self._caps[host.index].reset_peak()
        logs = []
        procs = []
        start = time.monotonic()
        for host in chosen:
            out = open(host.workdir / "stdout.log", "w+")  # noqa: SIM115 - closed below
            err = open(host.workdir / "stderr.log", "w+")  # noqa: SIM115
            logs.append((out, err))
            procs.append(self.spawn(host, command, env, stdout=out.fileno(),
                                    stderr=err.fileno()))
        try:
            if during is not None:
                during(self, procs)
            ended = wait_all(procs, start, start + timeout)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    kill_group(proc)
        results = []
        for host, proc, (out, err), seconds in zip(chosen, procs, logs, ended):
            texts = []
            for f in (out, err):
                f.seek(0)
                texts.append(f.read())
                f.close()
            cap = self._caps.get(host.index)
            results.append(HostResult(host, proc.returncode, texts[0], texts[1],
                                      (seconds or timeout), timed_out=seconds is None,
                                      memory_peak=cap.peak() if cap else None,
                                      oom_kills=cap.oom_kills() if cap else 0))
        return results

    def torchrun(self, args: Sequence[str], nproc_per_node: int = 1, master_port: int = 29500,
                 max_restarts: int = 0, options: Sequence[str] = ()) -> list[str]:
        """The command that starts ``torchrun`` on every host, as a user would
        on each machine: ``python -m torch.distributed.run --nnodes H
        --node-rank i --nproc-per-node k --master-addr <host0> --master-port P
        [--max-restarts R] [options] args``. Pass it to :meth:`run`."""
        return ["{python}", "-m", "torch.distributed.run", "--nnodes", "{nnodes}",
                "--node-rank", "{node_rank}", "--nproc-per-node", str(nproc_per_node),
                "--master-addr", "{master_addr}", "--master-port", str(master_port),
                "--max-restarts", str(max_restarts), *options, *args]

    def distribute(self, parts_dir: str | os.PathLike, nproc_per_node: int = 1,
                   name: str = "parts") -> None:
        """Copies to each host's ``<workdir>/<name>`` what a machine of a
        multi-host job holds: ``meta.json`` and the part files of its own
        ranks (node ``i`` runs ranks ``i*k`` to ``i*k+k-1``)."""
        source = Path(parts_dir)
        for host in self.hosts:
            target = host.workdir / name
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(source / "meta.json", target)
            first = host.index * nproc_per_node
            for rank in range(first, first + nproc_per_node):
                shutil.copy(source / f"part_{rank}.pt", target)

    def pids(self, host: int | Host) -> list[int]:
        """Processes running on ``host`` now."""
        out = ip("netns", "pids", self.hosts[self._index(host)].netns)
        return [int(p) for p in out.split()]

    def __repr__(self) -> str:
        hosts = ", ".join(f"{h.name}={h.address}" for h in self.hosts)
        return f"Cluster({hosts or len(self.hosts)}, rate={self.rate!r})"
