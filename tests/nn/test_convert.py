"""to_distributed: swaps every GCNConv/SAGEConv of a model (or a single
layer) for its Dist twin, weights kept."""
import torch
from graphs import awkward_graph
from tolerances import assert_close
from torch_geometric.nn import SAGEConv
from torch_geometric.nn.models import GCN, GraphSAGE

from pyg_dist.nn import DistGCNConv, DistSAGEConv, to_distributed


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
