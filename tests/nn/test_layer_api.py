"""The Dist layers as PyG layers: same arguments, parameters, repr, and exactly
PyG's results on a plain edge_index; unsupported options fail clearly."""
import pytest
import torch
from graphs import awkward_graph
from tolerances import assert_close
from torch_geometric.nn import GCNConv, SAGEConv
from torch_geometric.nn.models import GCN, GraphSAGE

from pyg_dist.nn import DistGCNConv, DistSAGEConv, to_distributed


@pytest.mark.parametrize("kwargs", [{}, {"improved": True, "cached": True},
                                    {"add_self_loops": False}, {"bias": False}])
def test_gcn_state_dict_moves_both_ways_and_plain_path_is_pyg(kwargs):
    data = awkward_graph()
    x = torch.randn(data.num_nodes, 6)
    ref, ours = GCNConv(6, 4, **kwargs), DistGCNConv(6, 4, **kwargs)
    assert list(ref.state_dict()) == list(ours.state_dict())
    ours.load_state_dict(ref.state_dict())
    assert torch.equal(ours(x, data.edge_index, data.edge_weight),
                       ref(x, data.edge_index, data.edge_weight))
    ours.reset_parameters()
    ref.reset_parameters()  # clears a cached normalisation, as ours did
    ref.load_state_dict(ours.state_dict())
    assert torch.equal(ours(x, data.edge_index), ref(x, data.edge_index))
    assert repr(ours) == "DistGCNConv(6, 4)" and repr(ref) == "GCNConv(6, 4)"


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


def test_repr_shows_a_halo_policy():
    class Policy:
        def __repr__(self):
            return "Stale(every=4)"

    assert repr(DistGCNConv(3, 2, halo=Policy())) == "DistGCNConv(3, 2, halo=Stale(every=4))"


@pytest.mark.parametrize("make,match", [
    (lambda: DistSAGEConv(4, 2, aggr="lstm"), r"supports aggr in 'mean', 'sum', 'add', 'max'"),
    (lambda: DistSAGEConv(4, 2, aggr=["mean", "max"]), r"supports aggr in"),
    (lambda: DistGCNConv(4, 2, flow="target_to_source"), r"flow='source_to_target' only.*flip"),
    (lambda: DistGCNConv(4, 2, aggr="mean"), r"supports aggr in 'add', 'sum'"),
    (lambda: DistGCNConv(4, 2, node_dim=1), r"node_dim=-2"),
    (lambda: DistGCNConv(4, 2, add_self_loops=True, normalize=False),
     r"does not support adding self-loops"),
])
def test_unsupported_options_name_the_supported_ones(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_to_distributed_swaps_layers_and_keeps_weights():
    data = awkward_graph()
    x = torch.randn(data.num_nodes, 5)
    for model in (GCN(5, 8, num_layers=3, out_channels=3),
                  GraphSAGE(5, 8, num_layers=2, out_channels=3, aggr="max")):
        model.eval()
        expected = model(x, data.edge_index)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        converted = to_distributed(model)
        assert converted is model
        convs = list(converted.convs)
        assert all(type(c) in (DistGCNConv, DistSAGEConv) for c in convs)
        assert [c.halo_name for c in convs] == [f"convs.{k}" for k in range(len(convs))]
        assert all(torch.equal(state[k], v) for k, v in converted.state_dict().items())
        assert_close(converted(x, data.edge_index), expected)
        assert not converted.training


def test_to_distributed_on_a_single_layer():
    conv = SAGEConv(4, 3, aggr="sum")
    twin = to_distributed(conv)
    assert type(twin) is DistSAGEConv and twin.aggr == "sum"
    assert all(torch.equal(a, b) for a, b in zip(conv.parameters(), twin.parameters()))
