"""The ledger against hand counts: per-epoch totals of a training run under
Adaptive (flag bytes included), and message tags that never collide."""
import pytest
import torch

from pyg_dist.halo import HaloChannel, HaloPlan, Ledger
from pyg_dist.halo.comm import MAX_TAG

EPOCHS, MAX_STALENESS = 5, 2
WIDTHS = [(4, 6), (6, 3)]  # the 2-layer GCN: (in, out) of each layer


def aggregated_width(f_in, f_out):
    """GCN aggregates before transforming when that is narrower, after otherwise."""
    return min(f_in, f_out)


def static_input_call(call):
    """What a layer fed the same input at its ``call``-th call (from 0)
    exchanges: the first call cannot know the input is static and goes
    through the policy; the second sees it again and fetches it once into
    the cache; later calls exchange nothing."""
    return {0: "policy", 1: "fill"}.get(call)


def refreshes(step):
    """Adaptive(tol=inf): blocks never drift past tol, so they are re-sent
    when max_staleness old (and at step 0)."""
    return step % MAX_STALENESS == 0


def test_trained_epochs_book_a_hand_count(policy_results):
    """A 2-layer GCN (4 -> 6 -> 3) trained 5 epochs under Adaptive(tol=inf,
    max_staleness=2), its input static: per epoch, the bytes the rules above
    give (rows of 4 bytes per value; Adaptive sends one flag byte per peer at
    every step it runs; the input's gradients are never sent; evaluation is
    exact, with its own static-input cache). Totals are summed over ranks."""
    halo = sum(res["trained"]["num_halo"] for res in policy_results)  # = rows sent, all ranks
    peers = sum(res["trained"]["peers"] for res in policy_results)
    rows = [halo * aggregated_width(*w) * 4 for w in WIDTHS]
    expected_fwd, expected_bwd, expected_eval = [], [], []
    for t in range(EPOCHS):
        first = static_input_call(t)
        layer0 = {"policy": rows[0] * refreshes(t) + peers, "fill": rows[0], None: 0}[first]
        layer1 = rows[1] * refreshes(t) + peers
        expected_fwd.append(layer0 + layer1)
        expected_bwd.append(rows[1] * refreshes(t))  # layer 0's input takes no gradient
        expected_eval.append((rows[0] if first is not None else 0) + rows[1])
    for res in policy_results:  # every rank reports the global totals
        r = res["trained"]
        assert r["fwd"] == expected_fwd
        assert r["bwd"] == expected_bwd
        assert r["eval"] == expected_eval
    assert peers > 0 and halo > 0


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


def test_a_long_run_folds_old_steps_and_keeps_every_total():
    """Steps booked by hand (two layers forward and backward, the gradient
    all-reduce): once twice ``keep_steps`` are kept the older ones fold into
    one entry per layer and direction at step -1; the run's totals, one kept
    step's totals and a chosen layer's traffic since its choice's step equal
    an unfolded ledger's, and a state dict reads back as the same ledger."""
    from pyg_dist.halo.choices import LayerChoice

    def book(ledger, steps):
        ledger.choices.layers["l1"] = LayerChoice("exact", 3, True, 1, 0.0, 0.0)
        for _ in range(steps):
            s = ledger.step
            for layer, width in (("l0", 4), ("l1", 2)):
                ledger.record(layer, "fwd", bytes_sent=width * (s + 1), exchanges=1,
                              seconds=0.5, staleness=s % 3)
                if layer == "l1":
                    ledger.record(layer, "bwd", bytes_sent=width, exchanges=1, seconds=0.25)
            ledger.record("gradients", "grad", bytes_sent=10, seconds=0.125)
            ledger.next_step()

    folded, every = Ledger(keep_steps=4), Ledger(keep_steps=None)
    book(folded, 30)
    book(every, 30)
    # folds come once more than 2 x 4 steps are kept; the last, at step 28, kept 24 on
    assert folded.folded_through == 23 and every.folded_through == -1
    assert sorted({s for s, _, _ in folded.entries}) == [-1, 24, 25, 26, 27, 28, 29]
    assert len(folded.entries) == 4 + 4 * 6 and len(every.entries) == 4 * 30
    assert folded.entries[(-1, "l0", "fwd")].bytes_sent == sum(4 * (s + 1) for s in range(24))
    assert folded.entries[(-1, "l0", "fwd")].exchanges == 24
    assert folded.entries[(-1, "l0", "fwd")].staleness == 2
    assert folded.totals() == every.totals()
    assert folded.totals(28) == every.totals(28)
    assert folded.layer_totals("l1", 3) == every.layer_totals("l1", 3) == {
        "bytes_sent": float(sum(2 * (s + 1) + 2 for s in range(3, 30))), "seconds": 27 * 0.75,
        "steps": 27.0}
    with pytest.raises(ValueError, match=r"^Ledger.totals\(step=7\): steps up to 23 were "
                                         r"folded into step -1; ask for a later step, or keep "
                                         r"every step with Ledger\(keep_steps=None\)$"):
        folded.totals(7)
    back = Ledger(keep_steps=4)
    back.load_state_dict(folded.state_dict())
    assert back.entries == folded.entries and back.folded_through == 23
    assert back.layer_totals("l1", 3) == folded.layer_totals("l1", 3)
