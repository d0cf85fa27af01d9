"""``pyg-dist check``: what a machine of a multi-host job gets wrong before
torchrun starts, each failure naming its fix."""
import socket

import pytest
from graphs import awkward_graph

import pyg_dist
from pyg_dist.cli import main, preflight


def test_node0_port_in_use_names_a_free_port():
    busy = socket.create_server(("127.0.0.1", 0))
    port = busy.getsockname()[1]
    address, free = preflight.check_master(0, "127.0.0.1", port)
    busy.close()
    assert address.ok and not free.ok
    assert f"port {port} is in use" in free.message and "--master-port" in free.message
    suggested = int(free.message.split("--master-port ")[1].split(",")[0])
    assert suggested != port


def test_node0_must_own_the_master_address():
    [check] = preflight.check_master(0, "192.0.2.1", 29500)
    assert not check.ok and "not an address of this machine" in check.message


def test_other_nodes_must_reach_node0_and_not_be_it(monkeypatch):
    [own] = preflight.check_master(1, "127.0.0.1", 29500)
    assert not own.ok and "this machine's own address, but this is node 1" in own.message

    def silent(address, timeout=None):  # a wrong address behind a firewall: no answer
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", silent)
    [far] = preflight.check_master(1, "192.0.2.1", 29500)
    assert not far.ok and "cannot reach --master-addr 192.0.2.1 (no answer" in far.message
    monkeypatch.undo()
    [typo] = preflight.check_master(1, "no-such-host.invalid", 29500)
    assert not typo.ok and "does not resolve" in typo.message


def test_interface_variables_must_name_an_interface(monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nope0")
    check = preflight.check_interface(2)
    assert not check.ok and "no interface nope0" in check.message
    assert "lo 127.0.0.1" in check.message
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    assert preflight.check_interface(2).ok
    monkeypatch.delenv("GLOO_SOCKET_IFNAME")
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    monkeypatch.setattr(socket, "gethostbyname", lambda name: "127.0.1.1")
    check = preflight.check_interface(2)
    assert not check.ok and "resolves to 127.0.1.1" in check.message
    assert preflight.check_interface(1).ok  # one machine: loopback is fine


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pre") / "parts"
    pyg_dist.partition(awkward_graph(num_features=4), 4, folder)
    (folder / "part_3.pt").unlink()  # node 1 of 2 x 2 lost one of its parts
    return folder


def test_parts_of_this_node_must_be_there(parts):
    assert preflight.check_parts(parts, 2, 0, 2).ok
    missing = preflight.check_parts(parts, 2, 1, 2)
    assert not missing.ok and "part 3 is missing" in missing.message
    wrong = preflight.check_parts(parts, 3, 0, 1)
    assert not wrong.ok and "holds 4 parts but 3 nodes x 1 ranks make 3" in wrong.message


def test_check_command_prints_each_check_and_fails(parts, capsys):
    code = main(["check", "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2",
                 "--master-addr", "127.0.0.1", "--parts-dir", str(parts)])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL  master address" in out and "FAIL  parts" in out and "ok    versions" in out
