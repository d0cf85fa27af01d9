"""DistGCN2Conv against PyG's GCN2Conv: the same layer on a plain edge_index,
the same rows on one rank, and on 2 and 3 real gloo ranks (one battery per
world size runs every case on METIS and random cuts of an awkward random
graph and of a tiny graph) the gathered rows, input gradients and parameter
gradients of GCN2Conv on the whole graph."""
import functools

import pytest
import torch
import torch.distributed as dist
from dist_cases import gather_rows
from graphs import awkward_graph, tiny_graph
from tolerances import assert_close
from torch_geometric.nn import GCN2Conv
from worlds import Battery

import pyg_dist
from pyg_dist.halo import Isolated
from pyg_dist.nn import DistGCN2Conv, DistMessagePassing, to_distributed

CHANNELS, ALPHA = 5, 0.1  # a width that is not a power of two
WORLD_SIZES = [2, 3]
GRAPHS = {"awkward": lambda: awkward_graph(num_nodes=120, num_edges=500),
          "tiny": tiny_graph}
CUTS = ["awkward-metis", "awkward-random", "tiny-metis", "tiny-random"]
# (GCN2Conv arguments, with edge weights)
OPTIONS = [
    ({}, False),
    ({}, True),
    ({"shared_weights": False, "theta": 0.5, "layer": 3}, False),
    ({"shared_weights": False, "theta": 0.5, "layer": 3}, True),
    ({"add_self_loops": False}, True),
    ({"normalize": False}, True),
    ({"cached": True}, True),  # called twice: the second call reads the cache
    ({"aggr": "mean"}, False),
]


class GCNII(torch.nn.Module):
    """A small GCNII: input projection, GCN2Conv layers with the projection as
    initial residual (shared and separate weights), output projection."""

    def __init__(self, f_in, f_out, num_layers=2):
        super().__init__()
        self.lin_in = torch.nn.Linear(f_in, CHANNELS)
        self.convs = torch.nn.ModuleList(
            GCN2Conv(CHANNELS, ALPHA, theta=0.5, layer=k + 1, shared_weights=k % 2 == 0)
            for k in range(num_layers))
        self.lin_out = torch.nn.Linear(CHANNELS, f_out)

    def forward(self, x, edge_index, edge_weight=None):
        x = x_0 = self.lin_in(x).relu()
        for conv in self.convs:
            x = conv(x, x_0, edge_index, edge_weight).relu()
        return self.lin_out(x)


def graph(name):
    data = GRAPHS[name]()
    if "edge_weight" not in data:
        g = torch.Generator().manual_seed(data.num_edges)
        data.edge_weight = torch.rand(data.num_edges, generator=g) + 0.1
    return data


def inputs(seed, num_nodes):
    """Features, initial features and upstream gradient over the whole graph
    (``[num_nodes, CHANNELS]`` each, seeded)."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(num_nodes, CHANNELS, generator=g) for _ in range(3))


def run_layer(conv, x, x_0, upstream, edge_index, edge_weight, calls=1):
    """Output, gradients of x and x_0 and parameter gradients of ``conv``."""
    x, x_0 = x.clone().requires_grad_(), x_0.clone().requires_grad_()
    for _ in range(calls):
        out = conv(x, x_0, edge_index, edge_weight)
    (out * upstream).sum().backward()
    grads = {n: p.grad.clone() for n, p in conv.named_parameters()}
    return {"out": out.detach(), "x_grad": x.grad, "x0_grad": x_0.grad, "grads": grads}


def run_model(model, x, upstream, edge_index, edge_weight):
    x = x.clone().requires_grad_()
    out = model(x, edge_index, edge_weight)
    (out * upstream).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return {"out": out.detach(), "x_grad": x.grad, "grads": grads}


def layer_cases():
    cases = []
    for i, (kwargs, weights) in enumerate(OPTIONS):
        torch.manual_seed(i)
        state = GCN2Conv(CHANNELS, ALPHA, **kwargs).state_dict()
        cases.append(dict(name=f"{kwargs}-{'weighted' if weights else 'unweighted'}",
                          kwargs=kwargs, weights=weights, seed=100 + i, state=state,
                          calls=2 if kwargs.get("cached") else 1))
    return cases


def model_state():
    torch.manual_seed(7)
    return GCNII(CHANNELS, 3).state_dict()


def rank_body(dirs, cases, state):
    """Rank side: every layer case, the converted GCNII model and an isolated
    layer on each cut; parameter gradients summed over ranks."""
    results = {}
    for key, path in dirs.items():
        data = pyg_dist.DistData.load(path)
        gid = data.global_id
        per_cut = {"global_id": gid.clone(), "layers": {}}
        for case in cases:
            conv = DistGCN2Conv(CHANNELS, ALPHA, **case["kwargs"])
            conv.load_state_dict(case["state"])
            x, x_0, up = inputs(case["seed"], data.meta.num_nodes)
            weight = data.edge_weight if case["weights"] else None
            res = run_layer(conv, x[gid], x_0[gid], up[gid], data.edge_index, weight,
                            case["calls"])
            per_cut["layers"][case["name"]] = res
            if case is cases[0]:  # a static input: its halo is cached, then served at call 3
                conv.eval()
                x_owned, sent = x[gid], [data.ledger.totals()["bytes_eval"]]
                with torch.no_grad():
                    for _ in range(3):
                        res["static_out"] = conv(x_owned, x_0[gid], data.edge_index)
                        sent.append(data.ledger.totals()["bytes_eval"])
                res["static_bytes"] = [b - a for a, b in zip(sent, sent[1:])]
        model = to_distributed(GCNII(CHANNELS, 3))
        per_cut["model_types"] = [type(c).__name__ for c in model.convs]
        per_cut["model_keys"] = list(model.state_dict())
        model.load_state_dict(state)
        x, _, up = inputs(0, data.meta.num_nodes)
        per_cut["model"] = run_model(model, x[gid], up[gid, :3], data.edge_index,
                                     data.edge_weight)
        conv = DistGCN2Conv(CHANNELS, ALPHA, halo=Isolated())
        conv.load_state_dict(cases[0]["state"])
        x, x_0, up = inputs(1, data.meta.num_nodes)
        per_cut["isolated"] = run_layer(conv, x[gid], x_0[gid], up[gid], data.edge_index,
                                        data.edge_weight)
        for res in (*per_cut["layers"].values(), per_cut["model"]):
            for grad in res["grads"].values():
                dist.all_reduce(grad)
        results[key] = per_cut
    return results


@functools.cache
def whole_graphs():
    return {name: graph(name) for name in GRAPHS}


def prepare(world_size, root):
    cases, state = layer_cases(), model_state()
    dirs = {}
    for key in CUTS:
        name, method = key.split("-")
        dirs[key] = str(root / key)
        pyg_dist.partition(whole_graphs()[name], world_size, dirs[key], method=method, seed=3)
    return (dirs, cases, state), (cases, state)


RUNS = {world_size: Battery(world_size, rank_body, functools.partial(prepare, world_size),
                            timeout=300)
        for world_size in WORLD_SIZES}


@pytest.fixture(scope="module")
def graphs():
    return whole_graphs()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    def get(world_size):
        (cases, state), per_rank = RUNS[world_size].results(tmp_path_factory)
        return cases, state, per_rank

    yield get
    for battery in RUNS.values():
        battery.release()


def assert_gathered(per_rank, ref, num_nodes, keys, what):
    """Rows gathered from all ranks, and every rank's summed parameter
    gradients, against the whole-graph reference."""
    for key in keys:
        assert_close(gather_rows(per_rank, key, num_nodes), ref[key], what=f"{what}: {key}")
    for name, grad in ref["grads"].items():
        for r, res in enumerate(per_rank):
            assert_close(res["grads"][name], grad, what=f"{what}: grad of {name} on rank {r}")


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("cut", CUTS)
def test_distributed_equals_gcn2conv_on_whole_graph(runs, graphs, world_size, cut):
    cases, _, per_rank = runs(world_size)
    data = graphs[cut.split("-")[0]]
    for case in cases:
        ref_conv = GCN2Conv(CHANNELS, ALPHA, **case["kwargs"])
        ref_conv.load_state_dict(case["state"])
        x, x_0, up = inputs(case["seed"], data.num_nodes)
        weight = data.edge_weight if case["weights"] else None
        ref = run_layer(ref_conv, x, x_0, up, data.edge_index, weight, case["calls"])
        results = [{"global_id": res[cut]["global_id"], **res[cut]["layers"][case["name"]]}
                   for res in per_rank]
        what = f"{case['name']} on {world_size} ranks ({cut})"
        assert_gathered(results, ref, data.num_nodes, ("out", "x_grad", "x0_grad"), what)
        if "static_out" in results[0]:
            assert_close(gather_rows(results, "static_out", data.num_nodes), ref["out"],
                         what=f"{what}: static input")
            sent = [res["static_bytes"] for res in results]
            assert all(third == 0 for *_, third in sent), f"{what}: static halo re-sent"
            if cut.startswith("awkward"):
                assert all(first > 0 for first, *_ in sent), f"{what}: {sent}"


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_to_distributed_gcnii_model_equals_single_process(runs, graphs, world_size):
    _, state, per_rank = runs(world_size)
    keys = list(GCNII(CHANNELS, 3).state_dict())
    for cut in CUTS:
        data = graphs[cut.split("-")[0]]
        model = GCNII(CHANNELS, 3)
        model.load_state_dict(state)
        x, _, up = inputs(0, data.num_nodes)
        ref = run_model(model, x, up[:, :3], data.edge_index, data.edge_weight)
        for res in per_rank:
            assert res[cut]["model_types"] == ["DistGCN2Conv", "DistGCN2Conv"]
            assert res[cut]["model_keys"] == keys
        results = [{"global_id": res[cut]["global_id"], **res[cut]["model"]} for res in per_rank]
        assert_gathered(results, ref, data.num_nodes, ("out", "x_grad"),
                        f"GCNII on {world_size} ranks ({cut})")


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_isolated_is_gcn2conv_on_each_part_alone(runs, graphs, world_size):
    """No halo: each rank's rows are GCN2Conv on the subgraph of its own nodes
    (degrees renormalised over the edges left)."""
    cases, _, per_rank = runs(world_size)
    data = graphs["awkward"]
    x_all, x0_all, up_all = inputs(1, data.num_nodes)
    for res in per_rank:
        res = res["awkward-metis"]
        owned = res["global_id"]
        local = torch.full((data.num_nodes,), -1, dtype=torch.long)
        local[owned] = torch.arange(owned.numel())
        src, dst = data.edge_index
        keep = (local[src] >= 0) & (local[dst] >= 0)
        ref_conv = GCN2Conv(CHANNELS, ALPHA)
        ref_conv.load_state_dict(cases[0]["state"])
        ref = run_layer(ref_conv, x_all[owned], x0_all[owned], up_all[owned],
                        torch.stack([local[src[keep]], local[dst[keep]]]),
                        data.edge_weight[keep])
        for key in ("out", "x_grad", "x0_grad"):
            assert_close(res["isolated"][key], ref[key], what=f"isolated GCN2Conv: {key}")


@pytest.fixture(scope="module")
def one_part(graphs, tmp_path_factory):
    """A one-rank partition of the awkward graph, loaded without a process group."""
    out = tmp_path_factory.mktemp("gcn2-one-part") / "parts"
    pyg_dist.partition(graphs["awkward"], 1, out)
    return pyg_dist.DistData.load(out, rank=0)


@pytest.mark.parametrize("kwargs,weights", OPTIONS, ids=str)
def test_plain_path_is_gcn2conv_and_one_rank_equals_it(graphs, one_part, kwargs, weights):
    """Same state-dict keys both ways, exactly GCN2Conv's outputs and gradients
    on a plain edge_index, and its rows on a one-rank DistEdgeIndex."""
    data = graphs["awkward"]
    torch.manual_seed(0)
    ref, ours = GCN2Conv(CHANNELS, ALPHA, **kwargs), DistGCN2Conv(CHANNELS, ALPHA, **kwargs)
    assert list(ref.state_dict()) == list(ours.state_dict())
    ours.load_state_dict(ref.state_dict())
    x, x_0, up = inputs(5, data.num_nodes)
    weight = data.edge_weight if weights else None
    calls = 2 if kwargs.get("cached") else 1
    expected = run_layer(ref, x, x_0, up, data.edge_index, weight, calls)
    plain = run_layer(ours, x, x_0, up, data.edge_index, weight, calls)
    for key in ("out", "x_grad", "x0_grad"):
        assert torch.equal(plain[key], expected[key]), key
    for name, grad in expected["grads"].items():
        assert torch.equal(plain["grads"][name], grad), name
    gid = one_part.global_id
    part_weight = one_part.edge_weight if weights else None
    ours.zero_grad()
    local = run_layer(ours, x[gid], x_0[gid], up[gid], one_part.edge_index, part_weight, calls)
    for key in ("out", "x_grad", "x0_grad"):
        assert_close(local[key], expected[key][gid], what=f"one rank: {key}")
    for name, grad in expected["grads"].items():
        assert_close(local["grads"][name], grad, what=f"one rank: grad of {name}")
    assert (ours._dist_cache is not None) == bool(kwargs.get("cached"))
    ours.reset_parameters()
    assert ours._dist_cache is None and ours._cached_edge_index is None


def test_repr_and_torchscript():
    conv = DistGCN2Conv(CHANNELS, ALPHA, theta=0.5, layer=2, shared_weights=False)
    ref = GCN2Conv(CHANNELS, ALPHA, theta=0.5, layer=2, shared_weights=False)
    assert repr(conv) == "Dist" + repr(ref)
    assert repr(DistGCN2Conv(4, 0.2, halo=Isolated())).endswith(", halo=Isolated())")
    data = awkward_graph()
    x, x_0, _ = inputs(0, data.num_nodes)
    assert_close(torch.jit.script(conv)(x, x_0, data.edge_index), conv(x, x_0, data.edge_index))


def test_to_distributed_converts_gcn2conv_and_keeps_weights():
    data = awkward_graph()
    torch.manual_seed(0)
    model = GCNII(CHANNELS, 3).eval()
    x, _, _ = inputs(0, data.num_nodes)
    expected = model(x, data.edge_index, data.edge_weight)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    assert to_distributed(model) is model
    assert all(type(c) is DistGCN2Conv for c in model.convs)
    assert [c.halo_name for c in model.convs] == ["convs.0", "convs.1"]
    assert list(model.state_dict()) == list(state)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert torch.equal(model(x, data.edge_index, data.edge_weight), expected)
    assert model.convs[1].weight2 is not None and model.convs[0].weight2 is None


@pytest.mark.parametrize("make,x_0_rows,match", [
    (lambda: DistGCN2Conv(CHANNELS, ALPHA), "all", r"x_0 with one row per owned node.*"
                                                   r"x_0\[data.global_id\]"),
    (lambda: DistGCN2Conv(CHANNELS, ALPHA), "vector", r"\[num_owned, channels\]"),
    (lambda: DistGCN2Conv(CHANNELS, ALPHA, flow="target_to_source"), "owned",
     r"flow='source_to_target' only.*flip"),
    (lambda: DistGCN2Conv(CHANNELS, ALPHA, aggr="softmax"), "owned",
     r"aggr in 'add', 'sum', 'mean', 'max'"),
])
def test_what_the_distributed_path_cannot_run_fails_clearly(one_part, make, x_0_rows, match):
    num_owned = one_part.edge_index.num_owned
    x = torch.randn(num_owned, CHANNELS)
    x_0 = {"all": torch.randn(num_owned + 3, CHANNELS), "vector": torch.randn(num_owned),
           "owned": x}[x_0_rows]
    with pytest.raises(ValueError, match=match):
        make()(x, x_0, one_part.edge_index)


def test_generic_path_refuses_gcn2conv_naming_the_twin():
    with pytest.raises(ValueError, match=r"'GCN2Conv' cannot run.*DistGCN2Conv"):
        DistMessagePassing(GCN2Conv(CHANNELS, ALPHA))
