"""The Dist layers as PyG layers: every PyG argument, the same parameters, repr,
TorchScript and torch.compile, and exactly PyG's results on a plain edge_index;
options the distributed path cannot run fail clearly when a DistEdgeIndex
arrives; to_distributed and the generic path keep layers' state."""
import collections
import copy
import pickle

import pytest
import torch
from graphs import awkward_graph
from tolerances import assert_close
from torch_geometric.nn import (
    APPNP,
    ChebConv,
    GATConv,
    GCNConv,
    GINConv,
    MFConv,
    MLPAggregation,
    SAGEConv,
    SGConv,
)
from torch_geometric.nn.models import GCN, GraphSAGE

import pyg_dist
from pyg_dist.halo import Stale
from pyg_dist.nn import (
    DistGATConv,
    DistGCNConv,
    DistMessagePassing,
    DistSAGEConv,
    register_exact,
    to_distributed,
)


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


def test_repr_shows_a_halo_policy():
    class Policy:
        def __repr__(self):
            return "Stale(every=4)"

    assert repr(DistGCNConv(3, 2, halo=Policy())) == "DistGCNConv(3, 2, halo=Stale(every=4))"


@pytest.fixture(scope="module")
def one_part(tmp_path_factory):
    """A one-rank partition of the awkward graph, loaded without a process group."""
    out = tmp_path_factory.mktemp("one_part") / "parts"
    pyg_dist.partition(awkward_graph(num_features=4), 1, out)
    return pyg_dist.DistData.load(out, rank=0)


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


def test_pyg_refuses_what_pyg_refuses():
    with pytest.raises(ValueError, match="does not support adding self-loops"):
        DistGCNConv(4, 2, add_self_loops=True, normalize=False)


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


def test_torchscript_compiles_a_module_around_a_generic_layer():
    """(PyG's GATConv does not script with this PyTorch; GINConv does.)"""
    class Around(torch.nn.Module):
        def __init__(self, conv):
            super().__init__()
            self.conv = conv

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            return self.conv(x, edge_index)

    data = awkward_graph()
    x = torch.randn(data.num_nodes, 6)
    conv = DistMessagePassing(GINConv(torch.nn.Linear(6, 4), train_eps=True))
    assert_close(torch.jit.script(Around(conv))(x, data.edge_index), conv(x, data.edge_index))


def test_plain_path_compiles_without_graph_breaks():
    import torch._dynamo as dynamo

    data = awkward_graph()
    x = torch.randn(data.num_nodes, 6)
    conv = DistSAGEConv(6, 8, aggr=["mean", "sum", "min", "max", "std"])
    explanation = dynamo.explain(conv)(x, data.edge_index)
    assert explanation.graph_break_count == 0
    assert_close(torch.compile(conv)(x, data.edge_index), conv(x, data.edge_index))


def test_plain_path_flows_target_to_source_like_pyg():
    data = awkward_graph()
    x = torch.randn(data.num_nodes, 6)
    ref = GCNConv(6, 4, flow="target_to_source")
    ours = DistGCNConv(6, 4, flow="target_to_source")
    ours.load_state_dict(ref.state_dict())
    assert_close(ours(x, data.edge_index), ref(x, data.edge_index))


def test_generic_layers_keep_class_state_and_pickle():
    data = awkward_graph()
    x = torch.randn(data.num_nodes, 6)
    conv = GINConv(torch.nn.Linear(6, 4), train_eps=True)
    state = {k: v.clone() for k, v in conv.state_dict().items()}
    expected = conv(x, data.edge_index)
    ours = DistMessagePassing(conv, halo=Stale(every=2))
    assert ours is conv and isinstance(ours, GINConv) and type(ours).__name__ == "DistGINConv"
    assert list(ours.state_dict()) == list(state)
    assert repr(ours).startswith("DistGINConv(") and "halo=Stale(every=2)" in repr(ours)
    for copied in (copy.deepcopy(ours), pickle.loads(pickle.dumps(ours))):
        assert type(copied) is type(ours) and copied.halo == Stale(every=2)
        assert_close(copied(x, data.edge_index), expected)


@pytest.mark.parametrize("layer,match", [
    (lambda: SGConv(4, 2, K=2), r"'SGConv' cannot run distributed exactly: it runs K hops"),
    (lambda: APPNP(K=3, alpha=0.1), r"'APPNP' cannot run distributed exactly"),
    (lambda: ChebConv(4, 2, K=2), r"normalises by source degrees"),
    (lambda: MFConv(4, 2), r"'MFConv' is not known to run distributed exactly.*register_exact"),
])
def test_layers_that_cannot_run_exactly_are_refused(layer, match):
    model = torch.nn.ModuleList([GINConv(torch.nn.Linear(4, 4)), layer()])
    with pytest.raises(ValueError, match=match):
        to_distributed(model)
    assert type(model[0]) is GINConv  # nothing was converted


def test_register_exact_declares_a_layer():
    from pyg_dist.nn.generic import EXACT, REFUSED

    saved = dict(EXACT), dict(REFUSED)
    try:
        register_exact(MFConv)
        conv = to_distributed(MFConv(4, 2))
        assert isinstance(conv, DistMessagePassing)
    finally:
        EXACT.clear()
        EXACT.update(saved[0])
        REFUSED.clear()
        REFUSED.update(saved[1])


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
