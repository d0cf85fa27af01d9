"""DistGCNConv as PyG's GCNConv: every PyG argument, the same parameters and
repr, and exactly PyG's results on a plain edge_index (either flow)."""
import pytest
import torch
from graphs import awkward_graph
from tolerances import assert_close
from torch_geometric.nn import GCNConv

from pyg_dist.nn import DistGCNConv


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


def test_repr_shows_a_halo_policy():
    class Policy:
        def __repr__(self):
            return "Stale(every=4)"

    assert repr(DistGCNConv(3, 2, halo=Policy())) == "DistGCNConv(3, 2, halo=Stale(every=4))"


def test_pyg_refuses_what_pyg_refuses():
    with pytest.raises(ValueError, match="does not support adding self-loops"):
        DistGCNConv(4, 2, add_self_loops=True, normalize=False)


def test_plain_path_flows_target_to_source_like_pyg():
    data = awkward_graph()
    x = torch.randn(data.num_nodes, 6)
    ref = GCNConv(6, 4, flow="target_to_source")
    ours = DistGCNConv(6, 4, flow="target_to_source")
    ours.load_state_dict(ref.state_dict())
    assert_close(ours(x, data.edge_index), ref(x, data.edge_index))
