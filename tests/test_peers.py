"""Start-up errors raised together on every rank, and lost peers named by rank,
host and address."""
import re
import socket

import pytest
from graphs import awkward_graph

import pyg_dist
from pyg_dist.runtime.peers import Peer, PeerLost, VersionMismatch, check_versions, probe

VERSIONS = {"python": "3.11.7", "torch": "2.13.0", "torch_geometric": "2.8.1", "pyg_dist": "0.1.0"}


def test_probe_tells_alive_gone_and_unreachable(monkeypatch):
    server = socket.create_server(("127.0.0.1", 0))
    closed = socket.create_server(("127.0.0.1", 0))
    gone_port = closed.getsockname()[1]
    closed.close()
    connect = socket.create_connection

    def no_answer_from_far_away(address, timeout=None):
        if address[0] == "192.0.2.1":  # a cut link: the handshake times out
            raise TimeoutError("timed out")
        return connect(address, timeout=timeout)

    monkeypatch.setattr(socket, "create_connection", no_answer_from_far_away)
    peers = [Peer(0, "a", "127.0.0.1", server.getsockname()[1]),
             Peer(1, "b", "127.0.0.1", gone_port),
             Peer(2, "c", "192.0.2.1", 9)]
    assert probe(peers, timeout=1.0) == {0: "alive", 1: "gone", 2: "unreachable"}
    server.close()


def test_version_mismatch_names_every_host_and_the_fix():
    peers = [Peer(r, f"host{r // 2}", f"10.0.0.{r // 2 + 1}", 1, dict(VERSIONS))
             for r in range(4)]
    check_versions(peers)
    for r in (2, 3):
        peers[r].versions["torch"] = "2.12.0"
    with pytest.raises(VersionMismatch) as info:
        check_versions(peers)
    message = str(info.value)
    assert "torch: 2.13.0 on ranks 0, 1 on host0 (10.0.0.1); 2.12.0 on ranks 2, 3 on host1" \
        in message
    assert "Install the same versions on every machine" in message


def startup_errors(root):
    """Each check fails on one rank only; every rank must raise, at once."""
    import shutil
    from pathlib import Path

    import torch

    from pyg_dist.cli.job import resolve
    from pyg_dist.cli.run import train_joined
    from pyg_dist.runtime import distributed, peers
    from pyg_dist.train.checkpoint import find_checkpoint

    rank, out = distributed.rank(), {}
    folder = Path(root) / f"copy{rank}"  # each rank's own machine
    shutil.copytree(Path(root) / "parts", folder)
    if rank == 1:
        (folder / "part_1.pt").unlink()
    try:
        pyg_dist.DistData.load(folder)
    except FileNotFoundError as exc:
        out["part"] = str(exc)
    real = peers.package_versions
    if rank == 1:
        peers.package_versions = lambda: {**real(), "torch_geometric": "2.7.0"}
    try:
        peers.publish(distributed.all_gather_objects, rank, 10.0)
    except VersionMismatch as exc:
        out["versions"] = str(exc)
    peers.package_versions = real
    peers.publish(distributed.all_gather_objects, rank, 10.0)
    try:
        train_joined(resolve({}, {"graph": {"parts": 3, "parts_dir": str(folder)}}))
    except ValueError as exc:
        out["parts"] = str(exc)
    ckpt = Path(root) / f"ckpt{rank}"
    ckpt.mkdir()
    if rank == 0:  # rank 1's machine lost its files
        (ckpt / "latest.json").write_text('{"epoch": 4, "world_size": 2}')
        torch.save({"epoch": 4}, ckpt / "rank_0.pt")
    try:
        find_checkpoint(ckpt)
    except ValueError as exc:
        out["checkpoint"] = str(exc)
    return out


@pytest.fixture(scope="module")
def errors(tmp_path_factory):
    root = tmp_path_factory.mktemp("startup")
    pyg_dist.partition(awkward_graph(num_features=4), 2, root / "parts")
    return pyg_dist.launch(startup_errors, 2, args=(str(root),), timeout=120)


@pytest.mark.parametrize("rank", [0, 1])
def test_a_missing_part_fails_every_rank_naming_the_fix(errors, rank):
    message = errors[rank]["part"]
    assert "failed on 1 of 2 ranks" in message and "rank 1 on " in message
    assert "part 1 is missing" in message and "copy part_1.pt there" in message


@pytest.mark.parametrize("rank", [0, 1])
def test_different_versions_fail_every_rank(errors, rank):
    assert "torch_geometric: 2.8.1 on rank 0" in errors[rank]["versions"]
    assert "2.7.0 on rank 1" in errors[rank]["versions"]


@pytest.mark.parametrize("rank", [0, 1])
def test_mismatched_parts_name_the_world_size(errors, rank):
    assert "--parts 3 but torchrun started 2 ranks" in errors[rank]["parts"]
    assert "pass --parts 2" in errors[rank]["parts"]


@pytest.mark.parametrize("rank", [0, 1])
def test_a_checkpoint_missing_on_one_machine_fails_every_rank(errors, rank):
    message = errors[rank]["checkpoint"]
    assert "checkpoint of epoch 4" in message and "rank 1 on " in message
    assert "has epochs none" in message


def test_peer_lost_message_names_rank_host_and_remedy():
    from pyg_dist.runtime import peers

    lost = [(Peer(2, "host1", "198.18.0.2", 1), "unreachable"),
            (Peer(3, "host1", "198.18.0.2", 2), "unreachable"),
            (Peer(1, "host0", "198.18.0.1", 3), "gone")]
    message = peers.describe_loss("halo exchange", lost, 20.0)
    assert "ranks 2, 3 on host1 (198.18.0.2) did not answer within 2 s" in message
    assert "the process of rank 1 on host0 (198.18.0.1) has exited" in message
    assert "--resume" in message and "PYG_DIST_TIMEOUT" in message
    assert issubclass(PeerLost, RuntimeError)


def test_a_timeout_with_every_peer_answering_is_a_stalled_network(monkeypatch):
    """A link that went down and came back: the collective timed out, but the
    store holds no failure and every beacon answers now. The error says the
    network stalled and names the fix; any other error passes unchanged."""
    from pyg_dist.runtime import peers

    server = socket.create_server(("127.0.0.1", 0))
    me, other = Peer(0, "host0", "127.0.0.1", 1), Peer(1, "host1", "127.0.0.1",
                                                        server.getsockname()[1])
    monkeypatch.setattr(peers._state, "me", me)
    monkeypatch.setattr(peers._state, "peers", [me, other])
    monkeypatch.setattr(peers._state, "timeout", 2.0)
    monkeypatch.setattr(peers._state, "store", None)
    gloo = RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 2000ms "
                        "for recv operation to complete")
    with pytest.raises(peers.NetworkStalled) as info, peers.guard("halo exchange"):
        raise gloo
    assert isinstance(info.value, PeerLost) and info.value.lost == []
    assert info.value.__cause__ is gloo
    assert re.match(  # the seconds the guard waited: 0.0, or a little more on a busy machine
        r"halo exchange timed out on rank 0 on host0 \(127\.0\.0\.1\) after \d+\.\d s, but "
        r"every peer answers now: the network stalled for longer than PYG_DIST_TIMEOUT \(2 s\)",
        str(info.value)), str(info.value)
    assert "pyg-dist train --checkpoint DIR --resume" in str(info.value)
    with pytest.raises(RuntimeError, match="^shapes differ$"), peers.guard("all-reduce"):
        raise RuntimeError("shapes differ")
    server.close()
