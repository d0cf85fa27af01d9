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
    import pyg_dist

    out = {}
    for spec in ("exact", "exact,compress=int8", "isolated"):
        data = pyg_dist.DistData.load(parts)
        torch.manual_seed(0)
        model = GNN("gcn", 16, 8, 3)
        result = train(model, data, 3, evaluation=Evaluation(halo=spec), progress=False)
        out[spec] = {"eval": result.total("halo_bytes_eval"),
                     "train": result.total("halo_bytes_fwd") + result.total("halo_bytes_bwd"),
                     "weights": [p.detach().clone() for p in model.parameters()]}
    return out


def test_eval_halo_sets_evaluation_traffic_alone(tmp_path):
    import pyg_dist

    pyg_dist.partition(awkward_graph(num_features=16), 2, tmp_path / "parts")
    runs = pyg_dist.launch(eval_traffic, 2, args=(str(tmp_path / "parts"),), timeout=300)[0]
    exact, int8, isolated = runs["exact"], runs["exact,compress=int8"], runs["isolated"]
    assert isolated["eval"] == 0 < int8["eval"] < exact["eval"]
    assert exact["train"] == int8["train"] == isolated["train"] > 0
    for ours, ref in zip(isolated["weights"], exact["weights"]):  # training is untouched
        assert torch.equal(ours, ref)
