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
(:func:`netem_reason`).

From Python::

    with Cluster(hosts=2, rate="1gbit") as cluster:
        results = cluster.run(cluster.torchrun(["-m", "pyg_dist.cli", "train", ...],
                                               nproc_per_node=2), timeout=600)

From the shell (``{placeholders}`` are filled per host, see :meth:`Host.fields`)::

    python -m pyg_dist.testing.cluster --hosts 2 --rate 1gbit --distribute parts \
        --torchrun 2 -- -m pyg_dist.cli train --parts-dir parts
    python -m pyg_dist.testing.cluster --hosts 2 -- sh -c 'hostname; ip -4 addr show eth0'
    python -m pyg_dist.testing.cluster --cleanup
"""
from __future__ import annotations

import argparse
import atexit
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Cluster", "Host", "HostResult", "unavailable_reason", "netem_reason", "cleanup_stale",
    "parse_rate", "PREFIX", "SUBNET", "main",
]

#: Every namespace this module makes is named ``PREFIX<pid>-<k>-...``.
PREFIX = "pyg_dist-"
#: Host addresses: 198.18.0.1, 198.18.0.2, ... (RFC 2544's benchmarking range).
SUBNET = "198.18.0.0/24"
INTERFACE = "eth0"
_GRACE_SECONDS = 5.0  # SIGTERM -> SIGKILL for a host's processes
_counter = itertools.count()
_NAME = re.compile(rf"^{re.escape(PREFIX)}(\d+)-\d+-")
_RATE = re.compile(r"^(\d+(?:\.\d+)?)([kmg]?)bit$")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
# Run on a host: its hostname, /etc/hosts naming every host, no DNS server
# (none is reachable from the namespace: lookups must fail at once, not time out).
_ENTER = ('hostname "$0" && mount --bind "$1/hosts" /etc/hosts && '
          'mount --bind "$1/resolv.conf" /etc/resolv.conf && shift && exec "$@"')


@dataclass
class Host:
    """One host of a :class:`Cluster`.

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

    def fields(self, cluster: Cluster) -> dict[str, str]:
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

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def describe(self) -> str:
        status = "timed out" if self.timed_out else f"exit {self.returncode}"
        return (f"{self.host.name} ({self.host.address}): {status} after {self.seconds:.1f} s"
                f"\n--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-3000:]}")


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
    """

    def __init__(self, hosts: int = 2, rate: str | None = None, delay: str | None = None,
                 loss: str | None = None, workdir: str | os.PathLike | None = None) -> None:
        if isinstance(hosts, bool) or not isinstance(hosts, int) or not 1 <= hosts <= 250:
            raise ValueError(f"'Cluster' needs 1 <= hosts <= 250 (got {hosts!r})")
        if rate is not None:
            parse_rate(rate)
        self.num_hosts = hosts
        self.rate, self.delay, self.loss = rate, delay, loss
        self._own_workdir = workdir is None
        self.workdir = Path(workdir).resolve() if workdir is not None else None
        tag = f"{PREFIX}{os.getpid()}-{next(_counter)}"
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
            _ip("netns", "add", self.switch)
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
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
            _kill_group(proc)
        self._procs = []
        for name in _list_netns():  # also those of a set-up that was interrupted
            if name.startswith(f"{self._tag}-"):
                _delete_netns(name)
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def _etc(self) -> Path:
        assert self.workdir is not None, "up() sets the working folder first"
        return self.workdir / ".etc"

    def _write_etc(self) -> None:
        """The hosts file every host sees (``host<i>`` -> its address)."""
        self._etc.mkdir(parents=True, exist_ok=True)
        names = "".join(f"{_address(i)}\thost{i}\n::ffff:{_address(i)}\thost{i}\n"
                        for i in range(self.num_hosts))
        (self._etc / "hosts").write_text(f"127.0.0.1\tlocalhost\n{names}")
        (self._etc / "resolv.conf").write_text("")

    def _add_host(self, i: int) -> Host:
        assert self.workdir is not None, "up() sets the working folder first"
        netns = f"{self._tag}-h{i}"
        host = Host(i, f"host{i}", netns, _address(i), self.workdir / f"host{i}")
        host.workdir.mkdir(parents=True, exist_ok=True)
        port = f"p{i}"
        _ip("netns", "add", netns)
        _ip("-n", netns, "link", "set", "lo", "up")
        _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", INTERFACE,
            "netns", netns)
        _ip("-n", self.switch, "link", "set", port, "master", "br0")
        _ip("-n", self.switch, "link", "set", port, "up")
        _disable_ipv6(netns)  # one address per host: gloo must not pick a link-local one
        _ip("-n", netns, "addr", "add", f"{host.address}/24", "dev", INTERFACE)
        _ip("-n", netns, "link", "set", INTERFACE, "up")
        self._shape(netns, INTERFACE)
        self._shape(self.switch, port)
        return host

    def _shape(self, netns: str, dev: str) -> None:
        """tbf (rate) under netem (delay, loss) on ``dev``'s egress."""
        parent = ["root"]
        if self.delay or self.loss:
            netem = (["delay", self.delay] if self.delay else []) + \
                    (["loss", self.loss] if self.loss else [])
            _tc("-n", netns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", *netem)
            parent = ["parent", "1:"]
        if self.rate is not None:
            burst = max(64 * 1024, int(parse_rate(self.rate) / 8 / 1000))  # 1 ms at line rate
            _tc("-n", netns, "qdisc", "add", "dev", dev, *parent, "handle", "10:", "tbf",
                "rate", self.rate, "burst", str(burst), "latency", "50ms")

    # -- links --------------------------------------------------------------------------------

    def cut(self, host: int | Host) -> None:
        """Cuts ``host``'s link (its switch port goes down): no packet in or
        out, no error to either side; TCP connections just stop moving."""
        _ip("-n", self.switch, "link", "set", f"p{self._index(host)}", "down")

    def restore(self, host: int | Host) -> None:
        """Puts a link cut by :meth:`cut` back."""
        _ip("-n", self.switch, "link", "set", f"p{self._index(host)}", "up")

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
        argv = [_fill(arg, host.fields(self)) for arg in argv]
        # ip netns exec gives the command a mount namespace of its own: the
        # cluster's hosts file and an empty resolver configuration go there.
        wrapped = ["ip", "netns", "exec", host.netns, "unshare", "--uts", "--",
                   "sh", "-c", _ENTER, host.name, str(self._etc), *argv]
        proc = subprocess.Popen(
            wrapped, cwd=cwd or host.workdir, env=self.environment(host, env),
            stdout=stdout, stderr=stderr, start_new_session=True,
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
            ended = _wait_all(procs, start, start + timeout)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    _kill_group(proc)
        results = []
        for host, proc, (out, err), seconds in zip(chosen, procs, logs, ended):
            texts = []
            for f in (out, err):
                f.seek(0)
                texts.append(f.read())
                f.close()
            results.append(HostResult(host, proc.returncode, texts[0], texts[1],
                                      (seconds or timeout), timed_out=seconds is None))
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
        out = _ip("netns", "pids", self.hosts[self._index(host)].netns)
        return [int(p) for p in out.split()]

    def __repr__(self) -> str:
        hosts = ", ".join(f"{h.name}={h.address}" for h in self.hosts)
        return f"Cluster({hosts or len(self.hosts)}, rate={self.rate!r})"


# -- machine checks and clean-up ------------------------------------------------------------

_REASONS: dict[str, str] = {}


def unavailable_reason() -> str:
    """Why this machine cannot make a testbed (``""`` if it can): not root,
    no iproute2, or namespaces refused (e.g. inside an unprivileged container)."""
    if "ns" not in _REASONS:
        _REASONS["ns"] = _probe_namespaces()
    return _REASONS["ns"]


def netem_reason() -> str:
    """Why delay and loss are unavailable (``""`` if the kernel has netem)."""
    if "netem" not in _REASONS:
        _REASONS["netem"] = unavailable_reason() or _probe_netem()
    return _REASONS["netem"]


def _probe_namespaces() -> str:
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 is not installed (apt-get install -y iproute2)"
    if shutil.which("unshare") is None:
        return "'unshare' (util-linux) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"{PREFIX}{os.getpid()}-{next(_counter)}-probe"
    try:
        _ip("netns", "add", probe)
        _ip("-n", probe, "link", "add", "name", "probe0", "type", "veth", "peer", "name", "probe1")
        _tc("-n", probe, "qdisc", "add", "dev", "probe0", "root", "tbf", "rate", "1gbit",
            "burst", "64k", "latency", "50ms")
    except RuntimeError as exc:
        return f"the kernel refused ({exc})"
    finally:
        _delete_netns(probe)
    return ""


def _probe_netem() -> str:
    probe = f"{PREFIX}{os.getpid()}-{next(_counter)}-probe"
    try:
        _ip("netns", "add", probe)
        _tc("-n", probe, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms")
    except RuntimeError as exc:
        return f"this kernel has no netem qdisc ({exc})"
    finally:
        _delete_netns(probe)
    return ""


def cleanup_stale() -> list[str]:
    """Deletes the namespaces (and temporary working folders) of testbeds
    whose process is gone (killed before it could tear them down); returns
    the namespaces' names. Those of live processes, and any not named by this
    module, are left alone."""
    removed = []
    for name in _list_netns():
        if _stale(name):
            _delete_netns(name)
            removed.append(name)
    for folder in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        if folder.is_dir() and _stale(folder.name):
            shutil.rmtree(folder, ignore_errors=True)
    return removed


def _stale(name: str) -> bool:
    match = _NAME.match(name)
    return match is not None and not Path(f"/proc/{match.group(1)}").exists()


def _list_netns() -> list[str]:
    try:
        out = _ip("netns", "list")
    except RuntimeError:
        return []
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _delete_netns(name: str) -> None:
    """Kills what runs in namespace ``name`` (only namespaces this module
    named), then deletes it."""
    assert name.startswith(PREFIX), f"refusing to touch namespace '{name}'"
    if name not in _list_netns():
        return
    try:
        pids = [int(p) for p in _ip("netns", "pids", name).split()]
    except RuntimeError:
        pids = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (_GRACE_SECONDS if sig == signal.SIGTERM else 1.0)
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if Path(f"/proc/{p}").exists() and not _zombie(p)]
            time.sleep(0.05)
    try:
        _ip("netns", "delete", name)
    except RuntimeError:
        pass


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return True


# -- helpers ---------------------------------------------------------------------------------

def parse_rate(rate: str) -> float:
    """Bits per second of a tc rate (``"1gbit"`` -> 1e9); raises naming the spelling."""
    match = _RATE.match(rate.strip().lower())
    if not match:
        raise ValueError(f"'Cluster' got rate={rate!r}; spell it like tc: '100mbit', '1gbit', "
                         f"'10gbit'")
    return float(match.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[match.group(2)]


def _address(i: int) -> str:
    return f"198.18.0.{i + 1}"


def _fill(arg: str, fields: dict[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: fields.get(m.group(1), m.group(0)), arg)


def _run(tool: str, *args: str) -> str:
    out = subprocess.run([tool, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"'{tool} {' '.join(args)}' failed: {out.stderr.strip()}")
    return out.stdout


def _ip(*args: str) -> str:
    return _run("ip", *args)


def _tc(*args: str) -> str:
    return _run("tc", *args)


def _disable_ipv6(netns: str) -> None:
    flag = "/proc/sys/net/ipv6/conf/all/disable_ipv6"
    if Path(flag).exists():
        _ip("netns", "exec", netns, "sh", "-c", f"echo 1 > {flag}")


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM to ``proc``'s process group, SIGKILL after a grace period."""
    for sig, grace in ((signal.SIGTERM, _GRACE_SECONDS), (signal.SIGKILL, 5.0)):
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


def _wait_all(procs: list[subprocess.Popen], start: float,
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


# -- command line ----------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pyg_dist.testing.cluster",
        description="Run a command on every host of a testbed of network namespaces.",
        epilog="Placeholders in COMMAND: {host} {index} {node_rank} {addr} {workdir} {nnodes} "
               "{master_addr} {python} {iface}.",
    )
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--rate", default=None, help="link rate, e.g. 1gbit (default: unshaped)")
    parser.add_argument("--delay", default=None, help="one-way delay per link, e.g. 1ms (netem)")
    parser.add_argument("--loss", default=None, help="loss per link direction, e.g. 1%% (netem)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds after which every host's command is stopped")
    parser.add_argument("--workdir", default=None,
                        help="folder holding host<i>/, each host's working folder (kept)")
    parser.add_argument("--torchrun", type=int, default=0, metavar="K",
                        help="prefix COMMAND with torchrun for K ranks per host")
    parser.add_argument("--distribute", default=None, metavar="PARTS",
                        help="copy meta.json and each host's own parts of this partition "
                             "folder to <workdir>/host<i>/parts (K ranks per host, K from "
                             "--torchrun, else 1)")
    parser.add_argument("--master-port", type=int, default=29500)
    parser.add_argument("--max-restarts", type=int, default=0)
    parser.add_argument("--cleanup", action="store_true",
                        help="only remove testbeds left behind by killed runs")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cleanup:
        for name in cleanup_stale():
            print(f"removed {name}")
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise SystemExit("give the command to run after --")
    signal.signal(signal.SIGTERM, _raise_interrupt)
    with Cluster(args.hosts, args.rate, args.delay, args.loss, args.workdir) as cluster:
        if args.distribute:
            cluster.distribute(args.distribute, max(args.torchrun, 1))
        if args.torchrun:
            command = cluster.torchrun(command, args.torchrun, args.master_port,
                                       args.max_restarts)
        results = cluster.run(command, timeout=args.timeout)
    for result in results:
        status = "timed out" if result.timed_out else f"exit {result.returncode}"
        print(f"== {result.host.name} ({result.host.address}): {status} after "
              f"{result.seconds:.1f} s ==", flush=True)
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
    failed = [r for r in results if not r.ok]
    if not failed:
        return 0
    return 124 if failed[0].timed_out else int(failed[0].returncode or 1)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    raise SystemExit(main())
