"""DistSAGEConv as PyG's SAGEConv: the same parameters, every PyG aggregation
(on a plain edge_index and on one rank's DistEdgeIndex), multi-aggregation
modes, and edge weights only where they mean something."""
import copy

import pytest
import torch
from graphs import awkward_graph
from tolerances import assert_close
from torch_geometric.nn import MLPAggregation, SAGEConv

import pyg_dist
from pyg_dist.nn import DistSAGEConv


@pytest.mark.parametrize("kwargs", [{}, {"aggr": "max"}, {"aggr": "sum", "project": True},
                                    {"root_weight": False, "normalize": True}])
def test_sage_state_dict_moves_both_ways_and_plain_path_is_pyg(kwargs):
    data = awkward_graph()
    x = torch.randn(data.num_nodes, 6)
    ref, ours = SAGEConv(6, 4, **kwargs), DistSAGEConv(6, 4, **kwargs)
    assert list(ref.state_dict()) == list(ours.state_dict())
    ours.load_state_dict(ref.state_dict())
    assert torch.equal(ours(x, data.edge_index), ref(x, data.edge_index))
    aggr = kwargs.get("aggr", "mean")
    assert repr(ours) == f"DistSAGEConv(6, 4, aggr={aggr})"


SAGE_AGGRS = [
    "lstm", ["mean", "max", "std"], "softmax", "powermean",
    MLPAggregation(in_channels=6, out_channels=6, max_num_elements=40, num_layers=1),
]


@pytest.fixture(scope="module")
def sorted_part(tmp_path_factory):
    """The awkward graph with edges sorted by target (LSTM and MLP
    aggregations need it), and its one-rank partition."""
    data = awkward_graph(num_nodes=60, num_edges=200)
    order = torch.sort(data.edge_index[1] * 100 + data.edge_index[0]).indices
    data.edge_index = data.edge_index[:, order]
    data.edge_weight = data.edge_weight[order]
    out = tmp_path_factory.mktemp("sorted") / "parts"
    pyg_dist.partition(data, 1, out)
    return data, pyg_dist.DistData.load(out, rank=0)


@pytest.mark.parametrize("aggr", SAGE_AGGRS, ids=str)
def test_sage_takes_every_pyg_aggregation(sorted_part, aggr):
    """With a plain edge_index exactly SAGEConv; on a one-rank DistEdgeIndex
    (the generic path) the same rows."""
    data, part = sorted_part
    kwargs = {"aggr_kwargs": {"learn": True}} if aggr == "softmax" else {}
    torch.manual_seed(0)
    ref = SAGEConv(6, 4, aggr=copy.deepcopy(aggr), **kwargs)
    ours = DistSAGEConv(6, 4, aggr=copy.deepcopy(aggr), **kwargs)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(data.num_nodes, 6)
    expected = ref(x, data.edge_index)
    assert_close(ours(x, data.edge_index), expected)
    assert_close(ours(x, part.edge_index), expected)
    assert repr(ours) == "Dist" + repr(ref)


@pytest.mark.parametrize("mode,mode_kwargs", [
    ("cat", None), ("proj", {"in_channels": 6, "out_channels": 8}),
    ("attn", {"in_channels": 6, "out_channels": 8, "num_heads": 2}), ("sum", None),
])
def test_sage_multi_aggregation_modes(mode, mode_kwargs):
    data = awkward_graph()
    aggr_kwargs = {"mode": mode, "aggrs_kwargs": [{}, {}, {}, {"learn": True, "t": 1.0}]}
    if mode_kwargs:
        aggr_kwargs["mode_kwargs"] = mode_kwargs
    aggrs = ["mean", "max", "sum", "softmax"]
    torch.manual_seed(0)
    ref = SAGEConv(6, 4, aggr=aggrs, aggr_kwargs=copy.deepcopy(aggr_kwargs))
    ours = DistSAGEConv(6, 4, aggr=aggrs, aggr_kwargs=copy.deepcopy(aggr_kwargs))
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(data.num_nodes, 6)
    assert_close(ours(x, data.edge_index), ref(x, data.edge_index))


def test_sage_edge_weights_only_where_they_mean_something(one_part):
    """A weighted mean (or sum) on a DistEdgeIndex; with all weights equal the
    weighted mean is the plain mean; elsewhere edge weights are refused."""
    data = awkward_graph(num_features=4)
    torch.manual_seed(0)
    layer = DistSAGEConv(4, 3)
    ones = torch.full((one_part.edge_index.num_edges,), 2.5)
    assert_close(layer(one_part.x, one_part.edge_index, edge_weight=ones),
                 layer(one_part.x, one_part.edge_index))
    with pytest.raises(ValueError, match="PyG's SAGEConv takes none"):
        layer(data.x, data.edge_index, edge_weight=torch.ones(data.edge_index.size(1)))
    with pytest.raises(ValueError, match="aggr 'mean' or 'sum'.*aggr='max'"):
        DistSAGEConv(4, 3, aggr="max")(one_part.x, one_part.edge_index, edge_weight=ones)
