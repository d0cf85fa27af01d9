"""The training loop on one process: evaluation schedule, errors, NaN guard."""
import math

import pytest
import torch
from graphs import awkward_graph

from pyg_dist.config import Evaluation
from pyg_dist.models import GNN
from pyg_dist.train import train


def test_eval_every_evaluates_on_schedule_and_picks_best_among_them():
    data = awkward_graph(num_features=4)
    torch.manual_seed(0)
    calls = []
    model = GNN("gcn", 4, 8, 3)
    real_forward = model.forward

    def counting_forward(x, edge_index):
        calls.append(model.training)
        return real_forward(x, edge_index)

    model.forward = counting_forward
    result = train(model, data, 7, evaluation=Evaluation(every=3), progress=False)
    assert calls.count(False) == 3  # epochs 3, 6 and the last
    assert all(math.isnan(e.val_acc) for e in result.history[:2])
    assert result.history[3].val_acc == result.history[2].val_acc
    assert result.best_epoch in (3, 6, 7)


def test_missing_training_data_is_named():
    data = awkward_graph()  # no x
    with pytest.raises(ValueError, match=r"needs data\.x"):
        train(GNN("gcn", 4, 8, 3), data, epochs=1, progress=False)


def test_non_finite_loss_raises():
    data = awkward_graph(num_features=4)
    data.x[0, 0] = float("inf")
    with pytest.raises(FloatingPointError, match="not finite"):
        train(GNN("gcn", 4, 8, 3), data, epochs=1, progress=False)


def eval_traffic(parts):
    """Three epochs evaluated under each halo spec, and trained under int4."""
    import pyg_dist
    from pyg_dist.config import GraphParallel

    out = {}
    for spec in ("exact", "exact,compress=int8", "isolated", "train:exact,compress=int4"):
        data = pyg_dist.DistData.load(parts)
        torch.manual_seed(0)
        model = GNN("gcn", 16, 8, 3)
        trained = spec.removeprefix("train:") if spec.startswith("train:") else None
        result = train(model, data, 3, strategy=GraphParallel(halo=trained),
                       evaluation=Evaluation(halo=None if trained else spec), progress=False)
        plan = data.edge_index.plan
        out[spec] = {"eval": result.total("halo_bytes_eval"),
                     "train": result.total("halo_bytes_fwd") + result.total("halo_bytes_bwd"),
                     "weights": [p.detach().clone() for p in model.parameters()],
                     "loss": [e.loss for e in result.history],
                     "rows": {"fwd": plan.num_send, "bwd": plan.num_halo},
                     "ledger": [r for r in data.ledger.rows() if r["direction"] in ("fwd", "bwd")]}
    return out


def test_eval_halo_sets_evaluation_traffic_alone_and_int4_trains(tmp_path):
    """Evaluation's halo moves evaluation's bytes alone. Training with int4
    halos runs forward and backward on 2 ranks and books, per exchange, the
    rows times int4's row bytes, ceil(F / 2) + 4, where exact booked 4 F."""
    import pyg_dist

    pyg_dist.partition(awkward_graph(num_features=16), 2, tmp_path / "parts")
    ranks = pyg_dist.launch(eval_traffic, 2, args=(str(tmp_path / "parts"),), timeout=300)
    for runs in ranks:
        int4, exact = runs["train:exact,compress=int4"], runs["exact"]
        assert all(math.isfinite(loss) for loss in int4["loss"])
        assert not torch.equal(int4["weights"][0], exact["weights"][0])  # the noise shows
        assert [(r["step"], r["layer"], r["direction"]) for r in int4["ledger"]] == \
            [(r["step"], r["layer"], r["direction"]) for r in exact["ledger"]]
        assert {r["direction"] for r in exact["ledger"] if r["bytes_sent"]} == {"fwd", "bwd"}
        for ours, ref in zip(int4["ledger"], exact["ledger"]):
            rows = ref["exchanges"] * exact["rows"][ref["direction"]]
            width = ref["bytes_sent"] // (4 * rows) if rows else 0
            assert ref["bytes_sent"] == 4 * width * rows
            assert ours["bytes_sent"] == rows * (math.ceil(width / 2) + 4), (ours, ref)
    runs = ranks[0]
    exact, int8, isolated = runs["exact"], runs["exact,compress=int8"], runs["isolated"]
    assert isolated["eval"] == 0 < int8["eval"] < exact["eval"]
    assert exact["train"] == int8["train"] == isolated["train"] > 0
    for ours, ref in zip(isolated["weights"], exact["weights"]):  # training is untouched
        assert torch.equal(ours, ref)


def test_a_first_use_compile_is_not_training_time(monkeypatch):
    """The kernels load (a first use compiles them, here 2 s of sleep) before
    the training clock starts, with or without the progress bar."""
    import time

    from pyg_dist.ops import backends

    calls = []

    def first_use():
        if not calls:
            time.sleep(2.0)
        calls.append(time.perf_counter())
        return None

    monkeypatch.setattr(backends, "_cpu_kernels", first_use)
    data = awkward_graph(num_features=4)
    start = time.perf_counter()
    result = train(GNN("gcn", 4, 8, 3), data, epochs=2, progress=False)
    assert calls, "the kernels were never asked for"
    assert time.perf_counter() - start >= 2.0
    assert result.seconds < 1.5, result.seconds
