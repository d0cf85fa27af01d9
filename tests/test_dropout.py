"""Dropout drawn alike on every rank: a function of (seed, call, node, feature)."""
import pytest
import torch
from graphs import awkward_graph

import pyg_dist
from pyg_dist.nn import dropout
from pyg_dist.utils.dropout import _keep, dropped_input


@pytest.fixture(scope="module")
def part(tmp_path_factory):
    graph = awkward_graph(num_nodes=300, num_edges=1200, seed=2, num_features=40)
    out = tmp_path_factory.mktemp("dropout") / "parts"
    pyg_dist.partition(graph, 1, out)
    return pyg_dist.DistData.load(out, rank=0)


def test_masks_depend_on_node_feature_and_call_only(part):
    ids = torch.arange(5000)
    keep = _keep(ids, 64, seed=3, call=0, p=0.3)
    assert abs(keep.float().mean().item() - 0.7) < 0.01
    assert torch.equal(keep[1234:1240], _keep(ids[1234:1240], 64, 3, 0, 0.3))  # any subset alike
    assert (keep != _keep(ids, 64, 3, 1, 0.3)).float().mean() > 0.3  # a new mask every call
    assert (keep != _keep(ids, 64, 4, 0, 0.3)).float().mean() > 0.3  # and every seed
    # columns and rows are not correlated: feature 0's and 1's masks differ
    assert (keep[:, 0] != keep[:, 1]).float().mean() > 0.3


def test_dropout_on_a_part_scales_kept_entries_and_counts_calls(part):
    x = part.x
    torch.manual_seed(0)
    y = dropout(x, 0.5, True, part.edge_index)
    state = part.edge_index.registry.dropout
    keep = _keep(part.global_id, x.size(1), state.seed, 0, 0.5)
    assert torch.equal(y, x * keep * 2.0)
    assert dropped_input(y, part.edge_index).source is x
    dropout(x, 0.5, True, part.edge_index)
    assert state.calls == 2
    # evaluation, p = 0 and plain edge_index tensors are torch's dropout
    assert dropout(x, 0.5, False, part.edge_index) is x
    assert dropped_input(dropout(x, 0.5, True, None), part.edge_index) is None
    # inputs that need grad are dropped alike, but never reused as static
    z = x.clone().requires_grad_()
    assert dropped_input(dropout(z, 0.5, True, part.edge_index), part.edge_index) is None


def test_dropout_rejects_bad_p(part):
    with pytest.raises(ValueError, match="0 <= p < 1"):
        dropout(part.x, 1.0, True, part.edge_index)
