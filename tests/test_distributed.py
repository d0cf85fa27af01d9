"""pyg_dist.runtime.distributed: a peer lost during point-to-point messages or a
collective raises PeerLost naming it, on the rank left waiting; the rows of a
sum reduce-scattered in pieces and gathered back, on 4 ranks, against the
sum of every rank's tensor."""
import time
from pathlib import Path

import pytest
import torch
from worlds import Battery

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


#: Rows of the tensors the row helpers cut: none, fewer than the ranks (empty
#: pieces), a multiple of the ranks, and neither.
ROWS = (0, 2, 8, 9)


def values(rows, rank):
    """Rank ``rank``'s ``[rows, 3]`` values (seeded; integers, so that any
    order of the sum is exact)."""
    g = torch.Generator().manual_seed(100 * rows + rank)
    return torch.randint(-50, 50, (rows, 3), generator=g).float()


def rows_body():
    out = {}
    for rows in ROWS:
        mine = values(rows, distributed.rank())
        piece = distributed.reduce_scatter_rows(mine)
        unchanged = torch.equal(mine, values(rows, distributed.rank()))
        again = distributed.reduce_scatter_rows(mine.clone(), inplace=True)
        out[rows] = (piece, again, unchanged, distributed.all_gather_rows(piece, rows))
    try:
        distributed.all_gather_rows(torch.zeros(1, 3), 9)
    except ValueError as exc:
        out["error"] = str(exc)
    odd = distributed.new_group([1, 3])  # a group whose ranks are not the global ones
    for name, group, size in (("world", None, 4), ("odd", odd, 2)):
        if distributed.rank() in (1, 3) or group is None:
            me = distributed.rank(group)
            for lo, hi in RANGES:
                mine = values(9, 10 + distributed.rank())[lo:hi].contiguous()
                at, summed = distributed.reduce_row_range(mine, 9, lo, group)
                p_lo, p_hi = distributed.row_piece(9, size, me)
                piece = values(9, 20 + me)[p_lo:p_hi]
                out[name, lo, hi] = (at, summed.clone(),
                                     distributed.gather_row_range(piece, 9, lo, hi, group))
    return out


#: Row ranges of 9 rows (pieces of 4 ranks: 0-2, 2-4, 4-6, 6-9; of 2: 0-4,
#: 4-9): the whole, one that straddles three pieces, one inside a piece,
#: one that ends where a piece ends, and none.
RANGES = ((0, 9), (1, 7), (6, 8), (2, 4), (5, 5))
ROWS_BATTERY = Battery(4, rows_body, lambda root: ((), None))


def test_row_pieces_are_near_equal_runs():
    assert [distributed.row_piece(9, 4, q) for q in range(4)] == [(0, 2), (2, 4), (4, 6),
                                                                  (6, 9)]
    assert [distributed.row_piece(2, 4, q) for q in range(4)] == [(0, 0), (0, 1), (1, 1),
                                                                  (1, 2)]


def test_a_sum_reduce_scattered_in_pieces_gathers_back_whole(tmp_path_factory):
    per_rank = ROWS_BATTERY.results(tmp_path_factory)[1]
    for rows in ROWS:
        total = sum(values(rows, r) for r in range(4))
        for r, out in enumerate(per_rank):
            piece, again, unchanged, whole = out[rows]
            lo, hi = distributed.row_piece(rows, 4, r)
            assert torch.equal(piece, total[lo:hi]) and torch.equal(again, total[lo:hi]), (
                rows, r)
            assert unchanged, f"reduce_scatter_rows overwrote its input ({rows} rows, rank {r})"
            assert torch.equal(whole, total), (rows, r)
    # ranks 0-2 hold 2 of 9 rows, rank 3 holds 3: a piece of 1 row is refused on each
    assert [out["error"] for out in per_rank] == [
        f"'all_gather_rows' was given 1 rows on rank {r} of 4; piece {r} of 9 rows holds "
        f"{n} (row_piece)" for r, n in enumerate((2, 2, 2, 3))]


def test_a_range_of_rows_sums_into_and_gathers_from_the_pieces_it_meets(tmp_path_factory):
    """reduce_row_range leaves each rank the sums of its piece's rows in the
    range (where they start in its piece); gather_row_range gives every rank
    the range's rows of the pieces: over the world and over ranks 1 and 3."""
    per_rank = ROWS_BATTERY.results(tmp_path_factory)[1]
    for name, members in (("world", [0, 1, 2, 3]), ("odd", [1, 3])):
        size = len(members)
        total = sum(values(9, 10 + r) for r in members)
        whole = torch.cat([values(9, 20 + q)[slice(*distributed.row_piece(9, size, q))]
                           for q in range(size)])
        for me, r in enumerate(members):
            p_lo, p_hi = distributed.row_piece(9, size, me)
            for lo, hi in RANGES:
                at, summed, gathered = per_rank[r][name, lo, hi]
                s, e = max(lo, p_lo), min(hi, p_hi)
                expected = total[s:e] if e > s else total[:0]
                assert torch.equal(summed, expected), (name, r, lo, hi)
                assert at == (s - p_lo if e > s else 0), (name, r, lo, hi)
                assert torch.equal(gathered, whole[lo:hi]), (name, r, lo, hi)


def test_helpers_are_no_ops_in_a_group_of_one():
    t = torch.arange(3.0)
    assert distributed.broadcast(t, src=0) is t
    assert distributed.batch_send_recv({}, {}) == []
    assert distributed.reduce_scatter_rows(t) is t
    assert distributed.all_gather_rows(t, 3) is t
