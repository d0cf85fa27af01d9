"""Edge dropout drawn from the graph's shared hash: the same edges on every cut,
and Dist layers on the dropped graph equal PyG's on the same edges."""
import pytest
import torch
from graphs import cora
from tolerances import assert_close
from torch_geometric.nn import GCNConv, SAGEConv
from torch_geometric.utils import coalesce

import pyg_dist
from pyg_dist.models import GNN
from pyg_dist.nn import DistGCNConv, DistSAGEConv, dropout_edge
from pyg_dist.utils.dropout import DropoutState

P = 0.4
SEED = 1234
CALLS = 3  # masks drawn per rank; the layers run on the last one
F_IN, F_OUT = 12, 5


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return cora(tmp_path_factory.mktemp("cora"))


@pytest.fixture(scope="module")
def dirs(graph, tmp_path_factory):
    root = tmp_path_factory.mktemp("cuts")
    out = {}
    for parts in (1, 2, 4):
        out[parts] = root / f"parts{parts}"
        pyg_dist.partition(graph, parts, out[parts], method="random" if parts == 4 else "metis")
    return out


def _on_a_rank(folder, rank=None):
    """Rank side: the global (source, target) pairs kept by each of ``CALLS``
    calls, and two layers' outputs and gradients on the last dropped graph
    (one part: in this process, ``rank=0``)."""
    data = pyg_dist.DistData.load(folder, rank=rank)
    data.edge_index.registry.dropout.seed = SEED
    kept = []
    for _ in range(CALLS):
        dropped = dropout_edge(data.edge_index, P)
        kept.append(torch.stack(dropped.global_edges()))
    torch.manual_seed(0)
    x = torch.randn(data.meta.num_nodes, F_IN)[data.global_id].requires_grad_()
    layers = {}
    for name, cls in (("sage", DistSAGEConv), ("gcn", DistGCNConv)):
        torch.manual_seed(1)
        layer = cls(F_IN, F_OUT)
        out = layer(x, dropped)
        (out * _upstream(data.meta.num_nodes)[data.global_id]).sum().backward()
        grads = {k: v.grad.clone() for k, v in layer.named_parameters()}
        for grad in grads.values() if rank is None else ():
            torch.distributed.all_reduce(grad)
        layers[name] = {"out": out.detach(), "grads": grads}
        x.grad = None
    state = data.edge_index.registry.state_dict()
    return {"kept": kept, "global_id": data.global_id, "layers": layers, "state": state,
            "layer0_bytes": _gnn_layer0_bytes(data)}


def _gnn_layer0_bytes(data, steps=3):
    """Bytes layer 0 of a GNN with feature and edge dropout sends in each of
    ``steps`` training steps."""
    torch.manual_seed(2)
    model = GNN("sage", data.x.size(1), 16, 7, dropout=0.5, edge_dropout=0.5)
    out = []
    for _ in range(steps):
        step = data.ledger.next_step()
        model(data.x, data.edge_index).sum().backward()
        out.append(sum(r["bytes_sent"] for r in data.ledger.rows()
                       if r["layer"] == "convs.0" and r["step"] == step))
    return out


def _upstream(num_nodes):
    """``[num_nodes, F_OUT]`` gradient of the loss with respect to the output."""
    return torch.arange(num_nodes * F_OUT, dtype=torch.float32).view(num_nodes, F_OUT).sin()


@pytest.fixture(scope="module")
def runs(dirs):
    out = {parts: pyg_dist.launch(_on_a_rank, parts, args=(str(dirs[parts]),))
           for parts in (2, 4)}
    return {1: [_on_a_rank(dirs[1], rank=0)], **out}


def _pairs(per_rank, call):
    """The kept global pairs of all ranks, sorted, as one ``[2, E]`` tensor."""
    pairs = torch.cat([r["kept"][call] for r in per_rank], dim=1)
    return coalesce(pairs, sort_by_row=False)


def _all_pairs(edge_index):
    return coalesce(edge_index, sort_by_row=False)


def _lowbias32(h):
    """Wellons' lowbias32 on a Python int below 2**32."""
    h ^= h >> 16
    h = (h * 0x7FEB352D) & 0xFFFFFFFF
    h ^= h >> 15
    h = (h * 0x846CA68B) & 0xFFFFFFFF
    return h ^ (h >> 16)


def _reference_keep(edge_index, call, seed=SEED, p=P):
    """``[num_edges]`` bool: the edges call ``call`` keeps, by the documented
    rule in plain Python integers (no code shared with the implementation):
    the call's key is lowbias32 of ``seed * 0x9E3779B1 + call``; an edge
    ``u - v`` hashes its smaller endpoint with the key, then that with its
    larger endpoint, and is dropped when the hash lies in the lowest
    fraction ``p`` of [0, 2**32)."""
    mask = 0xFFFFFFFF
    key = _lowbias32((seed * 0x9E3779B1 + call) & mask)
    keep = []
    for u, v in edge_index.t().tolist():
        lo, hi = min(u, v), max(u, v)
        h = _lowbias32((lo * 0x85EBCA6B + key) & mask)
        keep.append(_lowbias32(h ^ ((hi * 0xC2B2AE35) & mask)) >= p * 2**32)
    return torch.tensor(keep)


def test_kept_edges_do_not_depend_on_the_cut(runs, graph):
    for call in range(CALLS):
        one = _pairs(runs[1], call)
        for parts in (2, 4):
            assert torch.equal(_pairs(runs[parts], call), one), (parts, call)
    # and each call draws a new mask
    assert not torch.equal(_pairs(runs[1], 0), _pairs(runs[1], 1))


def test_kept_edges_are_the_hash_on_global_ids(runs, graph):
    """The ranks, and one process on a plain edge_index, keep the edges the
    documented hash of the global ids keeps, call after call."""
    state = DropoutState(seed=SEED)
    for call in range(CALLS):
        ref = _all_pairs(graph.edge_index[:, _reference_keep(graph.edge_index, call)])
        assert 0 < ref.size(1) < graph.edge_index.size(1)
        for parts in (1, 2, 4):
            assert torch.equal(_pairs(runs[parts], call), ref), (parts, call)
        assert torch.equal(_all_pairs(dropout_edge(graph.edge_index, P, state=state)), ref), call
    assert state.calls == CALLS


def test_kept_graph_is_symmetric_and_keeps_about_1_minus_p(runs, graph):
    kept = _pairs(runs[4], 0)
    assert torch.equal(_all_pairs(kept.flip(0)), kept)
    undirected = _all_pairs(graph.edge_index)
    frac = kept.size(1) / undirected.size(1)
    assert abs(frac - (1 - P)) < 0.02, frac
    assert kept.size(1) < undirected.size(1)


@pytest.mark.parametrize("kind", ["sage", "gcn"])
def test_layers_on_the_dropped_graph_equal_pyg(runs, graph, kind):
    ref_edges = graph.edge_index[:, _reference_keep(graph.edge_index, CALLS - 1)]  # the last
    torch.manual_seed(0)
    x = torch.randn(graph.num_nodes, F_IN)
    torch.manual_seed(1)
    ref = (SAGEConv if kind == "sage" else GCNConv)(F_IN, F_OUT)
    out = ref(x, ref_edges)
    (out * _upstream(graph.num_nodes)).sum().backward()
    for parts in (1, 2, 4):
        full = torch.full_like(out, float("nan"))
        for r in runs[parts]:
            full[r["global_id"]] = r["layers"][kind]["out"]
        assert_close(full, out.detach(), what=f"{kind} out, {parts} ranks")
        for name, param in ref.named_parameters():
            grad = runs[parts][0]["layers"][kind]["grads"][name]
            assert_close(grad, param.grad, what=f"{kind} {name}.grad, {parts} ranks")
    # the full graph gives other outputs: the edges were dropped
    assert (ref(x, graph.edge_index) - out).abs().max() > 1e-3


def test_gnn_keeps_the_first_layers_halo_cached_under_edge_dropout(runs):
    # Step 0 sends the input's transformed rows; step 1 sees the input unchanged
    # and fills the cache with its rows; from step 2 on nothing crosses.
    for parts in (2, 4):
        for r in runs[parts]:
            sent = r["layer0_bytes"]
            assert sent[0] > 0 and sent[1] > 0 and sent[2] == 0, (parts, sent)


def test_call_count_is_checkpointed(runs, dirs):
    state = runs[2][0]["state"]
    assert state["dropout"] == {"seed": SEED, "calls": CALLS}
    data = pyg_dist.DistData.load(dirs[1], rank=0)
    data.edge_index.registry.load_state_dict(state)
    restored = data.edge_index.registry.dropout
    assert (restored.seed, restored.calls) == (SEED, CALLS)


def test_evaluation_and_p_zero_return_the_graph(graph):
    assert dropout_edge(graph.edge_index, P, training=False) is graph.edge_index
    assert dropout_edge(graph.edge_index, 0.0) is graph.edge_index


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5])
def test_bad_p_names_the_fix(graph, p):
    with pytest.raises(ValueError, match=r"0 <= p < 1 \(got p=.*pass the fraction of edges"):
        dropout_edge(graph.edge_index, p)
    with pytest.raises(ValueError, match="0 <= edge_dropout < 1"):
        GNN("sage", 4, 8, 2, edge_dropout=p)


def test_gnn_drops_edges_in_training_only(graph):
    torch.manual_seed(0)
    model = GNN("sage", graph.num_features, 16, 7, dropout=0.0, edge_dropout=0.5)
    x, ei = graph.x, graph.edge_index
    model.eval()
    assert torch.equal(model(x, ei), model(x, ei))
    model.train()
    torch.manual_seed(3)
    a = model(x, ei)
    torch.manual_seed(3)
    assert torch.equal(model(x, ei), a)  # the plain-tensor seed comes from torch's generator
    assert not torch.allclose(model(x, ei), a)
    with pytest.raises(ValueError, match="set edge_dropout=0"):
        model(x, ei, edge_weight=torch.ones(ei.size(1)))
