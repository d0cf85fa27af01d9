"""pyg_dist.runtime.distributed: a peer lost during point-to-point messages or a
collective raises PeerLost naming it, on the rank left waiting."""
import time
from pathlib import Path

import pytest
import torch

import pyg_dist
from pyg_dist.runtime import distributed, peers

#: Seconds a collective waits before it gives up (the ranks' process group timeout).
WAIT = 3.0


def _batch(what):
    works = distributed.batch_send_recv({}, {1: torch.empty(4)}, what=what)
    distributed.wait_all(works, what)


def _broadcast(what):
    distributed.broadcast(torch.zeros(4), src=1)


def _recv(what):
    distributed.recv(torch.empty(4), 1, what=what)


def _all_to_all(what):
    works = distributed.all_to_all_single(torch.empty(2), torch.zeros(2), [1, 1], [1, 1],
                                          what=what)
    distributed.wait_all(works, what)


OPERATIONS = {"batch_send_recv": _batch, "broadcast": _broadcast, "recv": _recv,
              "all_to_all_single": _all_to_all}


def lose_rank_one(done):
    """Rank 1 is lost (its beacon closed, as when its process has exited) and
    takes part in nothing; rank 0 waits for it in each operation."""
    if distributed.rank() == 1:
        peers.close()
        while not Path(done).exists():
            time.sleep(0.1)
        return {}
    out = {}
    for name, operation in OPERATIONS.items():
        try:
            operation(f"test {name}")
        except Exception as exc:  # noqa: BLE001 - the error is what the test checks
            out[name] = (type(exc).__name__, str(exc))
        else:
            out[name] = (None, "")
    Path(done).touch()
    return out


@pytest.fixture(scope="module")
def lost(tmp_path_factory):
    done = tmp_path_factory.mktemp("lost") / "done"
    return pyg_dist.launch(lose_rank_one, 2, args=(str(done),), timeout=120,
                           comm_timeout=WAIT)[0]


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_a_lost_peer_raises_peer_lost_naming_it(lost, operation):
    kind, message = lost[operation]
    assert kind == "PeerLost", message
    what = "broadcast" if operation == "broadcast" else f"test {operation}"
    assert message.startswith(f"{what} failed on rank 0 on "), message
    assert "the process of rank 1 on " in message and "has exited" in message


def test_helpers_are_no_ops_in_a_group_of_one():
    t = torch.arange(3.0)
    assert distributed.broadcast(t, src=0) is t
    assert distributed.batch_send_recv({}, {}) == []
