"""The ledger against hand counts: per-epoch totals of a training run under
Adaptive (flag bytes included), and message tags that never collide."""
import pytest
import torch

from pyg_dist.halo import HaloChannel, HaloPlan, Ledger
from pyg_dist.halo.comm import MAX_TAG


def test_trained_epochs_book_a_hand_count(policy_results):
    """A 2-layer GCN (4 -> 6 -> 3) trained 5 epochs under Adaptive(tol=inf,
    max_staleness=2). Layer 0 aggregates its 4 input features: at step 0
    through Adaptive (rows and one flag byte per peer), at step 1 once more
    into the static-input cache, then never. Layer 1 sends 3-wide transformed
    rows at steps 0, 2, 4 (age 2), their gradients on the same steps, and flag
    bytes every step. Evaluation is exact: layer 0 twice (first call, cache
    fill), layer 1 every epoch. Totals are summed over ranks."""
    halo = sum(res["trained"]["num_halo"] for res in policy_results)  # = rows sent, all ranks
    peers = sum(res["trained"]["peers"] for res in policy_results)
    f4, f3 = halo * 4 * 4, halo * 3 * 4
    expected_fwd = [f4 + peers + f3 + peers, f4 + peers, f3 + peers, peers, f3 + peers]
    expected_bwd = [f3, 0, f3, 0, f3]
    expected_eval = [f4 + f3, f4 + f3, f3, f3, f3]
    for res in policy_results:  # every rank reports the global totals
        r = res["trained"]
        assert r["fwd"] == expected_fwd
        assert r["bwd"] == expected_bwd
        assert r["eval"] == expected_eval
    assert peers > 0


def channel():
    none = torch.zeros(0, dtype=torch.long)
    plan = HaloPlan(rank=0, world_size=1, send_idx=none, send_counts=[0], recv_counts=[0],
                    halo_global_id=none, send_global_id=none)
    return HaloChannel(plan, Ledger())


def test_tags_follow_first_use_and_never_collide():
    a, b = channel(), channel()
    names = [f"convs.{k}" for k in range(50)] + ["convs.0/flags", "degree"]
    tags = {(n, d): a.tag(n, d) for n in names for d in ("fwd", "bwd", "eval")}
    assert len(set(tags.values())) == len(tags)  # injective
    assert all(0 < t <= MAX_TAG for t in tags.values())
    # Another rank that uses the same exchanges in the same order agrees.
    assert {(n, d): b.tag(n, d) for n in names for d in ("fwd", "bwd", "eval")} == tags
    assert a.tag("convs.0", "fwd") == tags["convs.0", "fwd"]  # stable on reuse


def test_tags_refuse_to_wrap(monkeypatch):
    import pyg_dist.halo.exchange as exchange

    monkeypatch.setattr(exchange, "MAX_TAG", 6)
    c = channel()
    c.tag("a", "fwd")
    c.tag("b", "eval")  # 1 + 1 * 3 + 2 = 6
    with pytest.raises(RuntimeError, match="message tag 7 > 6"):
        c.tag("c", "fwd")
