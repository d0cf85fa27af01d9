"""Correct & Smooth after training (``pyg_dist.train.correct_and_smooth``)
against PyG's CorrectAndSmooth applied by hand to the same model's soft
predictions on the whole graph: in one process and on 2 gloo ranks of a
METIS cut, for a model that reads labels as input (every training label
shown, as evaluation shows them)."""
import pytest
import torch
import torch.nn.functional as F
from graphs import awkward_graph
from torch_geometric.nn.models import CorrectAndSmooth

import pyg_dist
from pyg_dist.models import GNN
from pyg_dist.train import CorrectSmooth, correct_and_smooth

STEP = CorrectSmooth(correction_layers=5, correction_alpha=0.9, smoothing_layers=4,
                     smoothing_alpha=0.7)
CLASSES = 3


def model_of(num_features):
    torch.manual_seed(2)
    return GNN("sage", num_features, 8, CLASSES, dropout=0.0, norm="layer", label_input=True)


def reference(data, model):
    """PyG's C&S of the model's softmax, and its accuracies per mask, by hand."""
    model.eval()
    shown = F.one_hot(data.y, CLASSES).float() * data.train_mask[:, None]
    with torch.no_grad():
        y_soft = model(torch.cat([data.x, shown], dim=1), data.edge_index).softmax(dim=-1)
    cs = CorrectAndSmooth(STEP.correction_layers, STEP.correction_alpha, STEP.smoothing_layers,
                          STEP.smoothing_alpha)
    mask, y_true = data.train_mask, data.y[data.train_mask]
    out = cs.smooth(cs.correct(y_soft, y_true, mask, data.edge_index), y_true, mask,
                    data.edge_index)
    pred = out.argmax(dim=-1)
    return [int((pred[m] == data.y[m]).sum()) / int(m.sum())
            for m in (data.train_mask, data.val_mask, data.test_mask)]


def on_rank(path, state):
    part = pyg_dist.DistData.load(path)
    model = model_of(part.x.size(1))
    model.load_state_dict(state)
    return correct_and_smooth(model, part, STEP)


@pytest.fixture(scope="module")
def graph():
    data = awkward_graph(num_features=5)
    assert int(data.y.max()) + 1 == CLASSES
    return data


def test_one_process_equals_pyg(graph):
    model = model_of(graph.num_features)
    done = correct_and_smooth(model, graph, STEP)
    ref = reference(graph, model)
    assert [done.train_acc, done.val_acc, done.test_acc] == pytest.approx(ref, abs=1e-12)
    assert done.name == "cs" and done.bytes == 0 and done.seconds >= 0


def test_two_ranks_equal_pyg_on_the_whole_graph(graph, tmp_path):
    model = model_of(graph.num_features)
    pyg_dist.partition(graph, 2, tmp_path / "parts", method="metis")
    results = pyg_dist.launch(on_rank, 2, args=(str(tmp_path / "parts"), model.state_dict()),
                              timeout=300)
    ref = reference(graph, model)
    for done in results:  # every rank reports the global accuracies, seconds and bytes
        assert [done.train_acc, done.val_acc, done.test_acc] == pytest.approx(ref, abs=1e-12)
        assert (done.seconds, done.bytes) == (results[0].seconds, results[0].bytes)
    assert results[0].bytes > 0
