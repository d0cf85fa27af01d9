"""DistGATConv as PyG's GATConv: the same parameters, exactly PyG's results
on a plain edge_index, its attention on a DistEdgeIndex, PyG's own checks."""
import collections

import pytest
import torch
from graphs import awkward_graph
from tolerances import assert_close
from torch_geometric.nn import GATConv

from pyg_dist.nn import DistGATConv

GAT_OPTIONS = [{}, {"heads": 3, "concat": False}, {"heads": 2, "residual": True},
               {"add_self_loops": False, "negative_slope": 0.1, "bias": False},
               {"heads": 2, "edge_dim": 1, "fill_value": 0.5},
               {"heads": 2, "edge_dim": 3, "fill_value": "mean"},
               {"edge_dim": 3, "fill_value": "max", "dropout": 0.3}]


@pytest.mark.parametrize("kwargs", GAT_OPTIONS, ids=str)
def test_gat_state_dict_moves_both_ways_and_plain_path_is_pyg(kwargs):
    """Every GATConv option: same parameters, and exactly GATConv's outputs
    and attention on a plain edge_index, a sparse adjacency and a bipartite pair."""
    data = awkward_graph()
    x = torch.randn(data.num_nodes, 6)
    edge_dim = kwargs.get("edge_dim")
    edge_attr = None if edge_dim is None else torch.randn(data.num_edges, edge_dim)
    torch.manual_seed(0)
    ref, ours = GATConv(6, 4, **kwargs), DistGATConv(6, 4, **kwargs)
    assert list(ref.state_dict()) == list(ours.state_dict())
    ours.load_state_dict(ref.state_dict())
    ref.eval(), ours.eval()
    out, (index, alpha) = ours(x, data.edge_index, edge_attr, return_attention_weights=True)
    ref_out, (ref_index, ref_alpha) = ref(x, data.edge_index, edge_attr,
                                          return_attention_weights=True)
    assert torch.equal(out, ref_out) and torch.equal(index, ref_index)
    assert torch.equal(alpha, ref_alpha)
    assert repr(ours) == "Dist" + repr(ref)
    if edge_dim is None:
        adj = torch.sparse_coo_tensor(data.edge_index.flip(0), torch.ones(data.num_edges),
                                      (data.num_nodes, data.num_nodes)).coalesce()
        assert_close(ours(x, adj), ref(x, adj))
    pair = (x, torch.randn(data.num_nodes // 2, 6))
    keep = data.edge_index[1] < data.num_nodes // 2
    bipartite = data.edge_index[:, keep]
    attr = None if edge_attr is None else edge_attr[keep]
    assert torch.equal(ours(pair, bipartite, attr), ref(pair, bipartite, attr))


def test_gat_attention_on_a_dist_edge_index_is_pygs_on_the_rank_in_edges(one_part):
    """One rank owns every node: the attention it returns (global ids of
    source and target, one row per in-edge after self-loop handling) is
    GATConv's, edge for edge."""
    data = awkward_graph(num_features=4)
    torch.manual_seed(0)
    ref = GATConv(4, 3, heads=2)
    ours = DistGATConv(4, 3, heads=2)
    ours.load_state_dict(ref.state_dict())
    out, (index, alpha) = ours(one_part.x, one_part.edge_index, return_attention_weights=True)
    ref_out, (ref_index, ref_alpha) = ref(data.x, data.edge_index, return_attention_weights=True)
    assert_close(out, ref_out[one_part.global_id])
    ours_edges = {(int(s), int(t)): a for (s, t), a in zip(index.t().tolist(), alpha)}
    ref_edges = {(int(s), int(t)): a for (s, t), a in zip(ref_index.t().tolist(), ref_alpha)}
    assert ours_edges.keys() == ref_edges.keys()
    unique = [e for e, n in collections.Counter(map(tuple, ref_index.t().tolist())).items()
              if n == 1]  # duplicate edges: any one of their (equal) rows
    for edge in unique:
        assert_close(ours_edges[edge], ref_edges[edge], what=f"attention of {edge}")


def test_gat_empty_graph_and_pyg_checks():
    from torch_geometric.testing import assert_module

    conv = DistGATConv(6, 4, heads=2)
    assert conv(torch.randn(0, 6), torch.empty(2, 0, dtype=torch.long)).shape == (0, 8)
    edge_index = torch.tensor([[0, 1, 2, 3], [0, 0, 1, 1]])
    assert_module(conv, torch.randn(4, 6), edge_index, expected_size=(4, 8),
                  test_sparse_layouts=[])
