"""The helpers of one's own loop in one process: PyG's arithmetic, and bad
input refused with the fix named."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from graphs import awkward_graph

import pyg_dist


def test_in_one_process_the_helpers_are_pyg_s_arithmetic():
    torch.manual_seed(0)
    out, y = torch.randn(10, 3, requires_grad=True), torch.randint(0, 3, (10,))
    mask = torch.tensor([True, False] * 5)
    ours = pyg_dist.cross_entropy(out, y, mask)
    ref = F.cross_entropy(out[mask], y[mask])
    assert torch.allclose(ours, ref)
    (grad,) = torch.autograd.grad(ours, out)
    (expected,) = torch.autograd.grad(ref, out)
    assert torch.allclose(grad, expected)
    pred = out.argmax(-1)
    assert pyg_dist.accuracy(out, y, mask) == int((pred[mask] == y[mask]).sum()) / 5
    assert pyg_dist.accuracy(pred.view(-1, 1), y.view(-1, 1)) == int((pred == y).sum()) / 10
    assert math.isnan(pyg_dist.accuracy(pred, y, torch.zeros(10, dtype=torch.bool)))


@pytest.mark.parametrize("call,message", [
    (lambda: pyg_dist.cross_entropy(torch.randn(4, 3), torch.zeros(5, dtype=torch.long)),
     r"takes a row per node of this rank, \[N, C\], and a label per node, \[N\] \(got "
     r"\(4, 3\) and \(5,\)\)"),
    (lambda: pyg_dist.cross_entropy(torch.randn(4, 3), torch.zeros(4, dtype=torch.long),
                                    torch.ones(4)),
     r"takes a bool mask .* \(got torch.float32 of shape \(4,\) .*or mask.bool\(\)"),
    (lambda: pyg_dist.global_mean(torch.ones(3), 3),
     r"summed to a scalar tensor \(got shape \(3,\)\); sum it first"),
    (lambda: pyg_dist.accuracy(torch.zeros(2, 3, 4), torch.zeros(2)),
     r"takes classes \[N\] or logits \[N, C\] .*got shape \(2, 3, 4\)"),
    (lambda: pyg_dist.DistributedModel(pyg_dist.DistributedModel(torch.nn.Linear(2, 2))),
     r"wraps a torch.nn.Module once \(got DistributedModel\)"),
])
def test_bad_input_names_the_fix(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_save_predictions_refuses_rows_of_another_part(tmp_path):
    pyg_dist.partition(awkward_graph(num_features=4), 1, tmp_path / "parts")
    data = pyg_dist.DistData.load(tmp_path / "parts")
    with pytest.raises(ValueError, match=r"one row per node of this rank \(150 rows.*got \(7, 3\)"):
        pyg_dist.save_predictions(torch.zeros(7, 3), data, tmp_path / "p.npy")
    pyg_dist.save_predictions(torch.arange(150), data, tmp_path / "p.npy")
    written = np.load(tmp_path / "p.npy")
    assert (written[data.global_id.numpy()] == np.arange(150)).all()  # row i at global id i
