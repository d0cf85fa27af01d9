"""The testbed: hosts in network namespaces with shaped links, commands run on
them, and a clean machine afterwards, whatever happens. Needs root and
iproute2; skipped, with the reason, where the machine cannot make network
namespaces."""
import os
import signal
import subprocess
import sys
import time

import pytest

from pyg_dist.testing import withNamespaces
from pyg_dist.testing.cluster import (
    PREFIX,
    Cluster,
    cleanup_stale,
    memory_cap_reason,
    parse_bytes,
    parse_rate,
)

#: Sends N megabytes to host1 and prints the seconds it took (stdlib only).
SEND = """
import socket, sys, time
size = int(float(sys.argv[1]) * 1e6)
if sys.argv[2] == "recv":
    server = socket.create_server(("0.0.0.0", 5001))
    conn, _ = server.accept()
    got, start = 0, None
    while got < size:
        chunk = conn.recv(1 << 20)
        start = start or time.perf_counter()
        got += len(chunk)
    print(time.perf_counter() - start)
else:
    for _ in range(100):
        try:
            conn = socket.create_connection(("host1", 5001), timeout=5)
            break
        except OSError:
            time.sleep(0.05)
    conn.sendall(b"x" * size)
"""
#: Tries to connect to host1 within 1 s; prints ok or the error.
KNOCK = """
import socket
try:
    socket.create_connection(("host1", 9), timeout=1)
    print("ok")
except ConnectionRefusedError:
    print("refused")
except OSError as exc:
    print(type(exc).__name__)
"""


def _names():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_parse_rate():
    assert parse_rate("1gbit") == 1e9 and parse_rate("100mbit") == 1e8
    with pytest.raises(ValueError, match="spell it like tc"):
        parse_rate("1 Gbps")


#: Holds N megabytes of touched memory for a moment, then prints "held" (stdlib only).
HOLD = """
import sys, time
block = bytearray(int(sys.argv[1]) << 20)
for i in range(0, len(block), 4096):
    block[i] = 1
time.sleep(0.2)
print("held")
"""


def test_parse_bytes():
    assert parse_bytes("512M") == 512 * 2**20 and parse_bytes("2G") == 2 * 2**30
    assert parse_bytes("1.5GiB") == 3 * 2**29 and parse_bytes(4096) == 4096
    with pytest.raises(ValueError, match="'512M' or '2G'"):
        parse_bytes("lots")


@withNamespaces
def test_a_capped_host_kills_what_goes_over_its_memory():
    if memory_cap_reason():
        pytest.skip(memory_cap_reason())
    with Cluster(hosts=2, memory="160M") as cluster:
        caps = [cap.path for cap in cluster._caps.values()]
        assert len(caps) == 2 and all(path.is_dir() for path in caps)
        under, over = cluster.run(lambda h: [sys.executable, "-c", HOLD,
                                             "300" if h.index else "40"], timeout=60)
        assert under.ok and under.stdout.strip() == "held", under.describe()
        assert under.oom_kills == 0 and 40 << 20 < under.memory_peak <= 160 << 20
        assert over.returncode == -signal.SIGKILL or over.returncode == 128 + signal.SIGKILL
        assert over.oom_kills >= 1 and "held" not in over.stdout
        assert "killed for going over the memory cap" in over.describe()
    assert not any(path.exists() for path in caps)


@withNamespaces
def test_hosts_see_each_other_by_name_on_a_shaped_link():
    with Cluster(hosts=2, rate="100mbit") as cluster:
        names = {h.netns for h in cluster.hosts} | {cluster.switch}
        assert names <= _names()
        ident = cluster.run(["sh", "-c", "hostname; ip -4 -o addr show eth0; pwd"])
        for host, result in zip(cluster.hosts, ident):
            assert result.ok, result.describe()
            name, addr, cwd = result.stdout.split("\n")[:3]
            assert name == host.name and f"{host.address}/24" in addr
            assert cwd == str(host.workdir)
        # 2.5 MB at 100 Mbit/s: 0.2 s on the wire
        sent = cluster.run(lambda h: [sys.executable, "-c", SEND, "2.5",
                                      "recv" if h.index else "send"], timeout=60)
        seconds = float(sent[1].stdout)
        assert 0.16 < seconds < 0.5, f"2.5 MB took {seconds:.3f} s at 100 Mbit/s"
        cluster.cut(1)
        assert cluster.run([sys.executable, "-c", KNOCK], hosts=[0])[0].stdout.strip() \
            == "TimeoutError"
        cluster.restore(1)
        assert cluster.run([sys.executable, "-c", KNOCK], hosts=[0])[0].stdout.strip() \
            == "refused"  # host1 answers again: nothing listens on port 9
    assert not names & _names()


@withNamespaces
def test_deadline_stops_every_process_and_failures_still_tear_down():
    with pytest.raises(RuntimeError, match="boom"):
        with Cluster(hosts=2) as cluster:
            start = time.monotonic()
            results = cluster.run(["sleep", "60"], timeout=1)
            assert time.monotonic() - start < 10
            assert all(r.timed_out for r in results)
            assert all(not cluster.pids(h) for h in cluster.hosts)
            names = {h.netns for h in cluster.hosts} | {cluster.switch}
            raise RuntimeError("boom")
    assert not names & _names()


@withNamespaces
def test_ctrl_c_tears_down_and_a_killed_run_is_cleaned_next_time(tmp_path):
    command = [sys.executable, "-m", "pyg_dist.testing.cluster", "--hosts", "2", "--",
               "sleep", "60"]

    def start():
        # As a terminal's foreground job gets it: a test run started in the
        # background of a shell without job control inherits SIGINT ignored,
        # and the Ctrl-C below would then reach nothing.
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        mine = f"{PREFIX}{proc.pid}-"
        deadline = time.monotonic() + 60
        while len([n for n in _names() if n.startswith(mine)]) < 3:
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
        return proc, mine

    proc, mine = start()
    proc.send_signal(signal.SIGINT)
    proc.wait(30)
    assert not [n for n in _names() if n.startswith(mine)]
    proc, mine = start()
    proc.kill()  # no chance to clean up
    proc.wait(30)
    assert [n for n in _names() if n.startswith(mine)]
    removed = cleanup_stale()  # also stops the sleeps left running in them
    assert {n for n in removed if n.startswith(mine)} and \
        not [n for n in _names() if n.startswith(mine)]
    live = f"{PREFIX}{os.getpid()}-99-sw"  # this process's namespace: not stale
    subprocess.run(["ip", "netns", "add", live], check=True)
    try:
        assert live not in cleanup_stale() and live in _names()
    finally:
        subprocess.run(["ip", "netns", "delete", live], check=True)
