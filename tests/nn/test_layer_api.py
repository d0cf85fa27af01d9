"""The Dist layers as PyG layers, across layers: options the distributed path
cannot run fail clearly when a DistEdgeIndex arrives; PyG's module checks,
TorchScript and torch.compile on the plain path."""
import pytest
import torch
from graphs import awkward_graph
from tolerances import assert_close
from torch_geometric.nn import GCNConv, SAGEConv

from pyg_dist.nn import DistGCNConv, DistSAGEConv


@pytest.mark.parametrize("make,match", [
    (lambda: DistGCNConv(4, 2, flow="target_to_source"), r"flow='source_to_target' only.*flip"),
    (lambda: DistGCNConv(4, 2, aggr="softmax"), r"aggr in 'add', 'sum', 'mean', 'max'"),
    (lambda: DistGCNConv(4, 2, node_dim=1), r"node_dim=-2"),
    (lambda: DistSAGEConv(4, 2, flow="target_to_source"), r"flow='source_to_target'"),
])
def test_options_the_distributed_path_cannot_run_fail_on_a_dist_edge_index(one_part, make,
                                                                            match):
    layer = make()  # PyG accepts them, and so do we, on a plain edge_index
    with pytest.raises(ValueError, match=match):
        layer(one_part.x, one_part.edge_index)


@pytest.mark.parametrize("layer,pyg", [(lambda: DistGCNConv(6, 4), GCNConv),
                                       (lambda: DistSAGEConv(6, 4), SAGEConv),
                                       (lambda: DistSAGEConv((6, 3), 4), SAGEConv)])
def test_plain_path_passes_pygs_module_checks(layer, pyg):
    """PyG's own module checks (edge permutations, sparse layouts) on the plain
    path; for GCN the edge permutations only, as PyG's GCNConv itself does not
    pass the sparse-layout checks (self-loops added to a sparse adjacency)."""
    from torch_geometric.testing import assert_module

    conv = layer()
    edge_index = torch.tensor([[0, 1, 2, 3], [0, 0, 1, 1]])
    layouts = [] if pyg is GCNConv else None
    if conv.in_channels == (6, 3):
        x = (torch.randn(4, 6), torch.randn(2, 3))
        assert_module(conv, x, edge_index, expected_size=(2, 4), test_sparse_layouts=layouts)
    else:
        assert_module(conv, torch.randn(4, 6), edge_index, expected_size=(4, 4),
                      test_sparse_layouts=layouts)


def test_torchscript_compiles_the_plain_path():
    data = awkward_graph()
    x = torch.randn(data.num_nodes, 6)
    for conv in (DistGCNConv(6, 4), DistSAGEConv(6, 4, aggr="max"), DistGCNConv(6, 4, cached=True)):
        scripted = torch.jit.script(conv)
        assert_close(scripted(x, data.edge_index), conv(x, data.edge_index))
    gcn = DistGCNConv(6, 4)
    gcn.decomposed_layers = 2  # PyG scripts its class methods, without decomposition
    assert_close(torch.jit.script(gcn)(x, data.edge_index), gcn(x, data.edge_index))
    sage = DistSAGEConv((6, 3), 4)
    pair = (x, torch.randn(data.num_nodes, 3))
    assert_close(torch.jit.script(sage)(pair, data.edge_index), sage(pair, data.edge_index))


def test_plain_path_compiles_without_graph_breaks():
    import torch._dynamo as dynamo

    data = awkward_graph()
    x = torch.randn(data.num_nodes, 6)
    conv = DistSAGEConv(6, 8, aggr=["mean", "sum", "min", "max", "std"])
    explanation = dynamo.explain(conv)(x, data.edge_index)
    assert explanation.graph_break_count == 0
    assert_close(torch.compile(conv)(x, data.edge_index), conv(x, data.edge_index))
