"""Oracle tests: Dist layers on 1-4 real gloo ranks against PyG on the whole graph.

One battery per world size (launched with the other modules' batteries of that
world, see worlds.py) runs every case (layers, options, two-layer models,
training steps) on METIS and random cuts of an awkward random graph, Cora and a
tiny graph; the test process compares with PyG's own layers, and the training
runs with plain single-process PyG training written here."""

import functools

import pytest
import torch
import torch.nn.functional as F
from dist_cases import gather_rows, layer_cases, reference, run_cases
from graphs import awkward_graph, cora, tiny_graph
from tolerances import assert_close
from torch_geometric.nn import GCNConv, SAGEConv
from worlds import Battery, once

import pyg_dist
from pyg_dist.config import Adam
from pyg_dist.models import GNN
from pyg_dist.testing import withTriton
from pyg_dist.train import train

WORLD_SIZES = [1, 2, 3, 4]
GRAPHS = ["awkward", "cora", "tiny"]
METHODS = ["metis", "random"]
TRAIN_EPOCHS = 3
TRAIN_KINDS = {"gcn": GCNConv, "sage": SAGEConv}
LR, WEIGHT_DECAY = 0.01, 5e-4  # pyg_dist.train's defaults, spelled out for the reference
# Every case also runs with the PyTorch kernels on the small graphs; the Triton
# kernels (interpreted on the CPU: slow) run one case per world size (2, 4) and
# cut of the awkward graph, so that GCN and SAGE each run on both world sizes
# and both cuts. An installed Triton whose backend does not load fails these
# cases instead of skipping them.
TORCH_GRAPHS = ("awkward", "tiny")
TRITON_CASES = {  # (world size, graph-method) -> case names
    (2, "awkward-metis"): ("gcn-5x3-{}",), (2, "awkward-random"): ("sage-3x7-{'aggr': 'max'}",),
    (4, "awkward-metis"): ("sage-5x3-{'aggr': 'mean'}",),
    (4, "awkward-random"): ("gcn-3x7-{'improved': True}",),
}


def triton_cases(world_size, key):
    """Names of the cases run on the Triton backend for a world size and cut."""
    return TRITON_CASES.get((world_size, key), ()) if withTriton.enabled else ()




LOADERS = {
    "awkward": lambda root: awkward_graph(num_features=5),
    "cora": cora,
    "tiny": lambda root: tiny_graph(),
}


@once
def load_graphs(root):
    """Every graph that loads, and the error of each one that does not: a
    graph that cannot be loaded fails its own tests, never the others'."""
    graphs, errors = {}, {}
    for name, load in LOADERS.items():
        try:
            data = load(root / f"graph-{name}")
        except Exception as exc:  # noqa: BLE001 - reported by the tests of that graph
            errors[name] = exc
            continue
        if "edge_weight" not in data:  # weighted-GCN cases need weights on every graph
            g = torch.Generator().manual_seed(data.num_edges)
            data.edge_weight = torch.rand(data.num_edges, generator=g) + 0.1
        graphs[name] = data
    return graphs, errors


@once
def layer_references(graphs):
    """PyG results per (graph, case name): they do not depend on the cut."""
    refs, cases = {}, {}
    for name, data in graphs.items():
        for case in layer_cases(name, feats_from_data=(name == "cora")):
            ref = reference(case, data)
            case["state"] = ref["state"]
            refs[case["name"]] = ref
            cases.setdefault(name, []).append(case)
    return cases, refs


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    yield load_graphs(tmp_path_factory.mktemp("graphs"))
    load_graphs.clear()


@pytest.fixture(scope="module")
def graphs(loaded):
    return loaded[0]


def require_graph(loaded, name):
    """Fails the calling test (only) when graph ``name`` could not be loaded."""
    if name in loaded[1]:
        pytest.fail(f"graph '{name}' could not be loaded: {loaded[1][name]!r}")


@pytest.fixture(scope="module")
def references(graphs):
    yield layer_references(graphs)
    layer_references.clear()


def battery(dirs, cases, train_specs):
    """Runs on every rank: all layer cases, then the training runs."""
    results = run_cases(dirs, cases)
    trained = {}
    for (key, kind), spec in train_specs.items():
        data = pyg_dist.DistData.load(dirs[key])
        model = GNN(kind, data.x.size(1), 8, spec["classes"], dropout=0.0)
        model.load_state_dict(spec["state"])
        result = train(model, data, TRAIN_EPOCHS, progress=False,
                       optimizer=Adam(lr=LR, weight_decay=WEIGHT_DECAY))
        trained[key, kind] = {
            "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "losses": [e.loss for e in result.history],
            "accs": [(e.train_acc, e.val_acc, e.test_acc) for e in result.history],
        }
    return results, trained


def prepare(world_size, root):
    """Every graph cut both ways into ``world_size`` parts, every case on
    each (PyTorch and Triton kernels as above), the training runs' models."""
    graphs, _ = load_graphs(root / "graphs")
    cases_by_graph, _ = layer_references(graphs)
    dirs, cases, train_specs = {}, [], {}
    for name, data in graphs.items():
        for method in METHODS:
            key = f"{name}-{method}"
            dirs[key] = str(root / key)
            pyg_dist.partition(data, world_size, dirs[key], method=method, seed=7)
            for case in cases_by_graph[name]:
                cases.append({**case, "graph": key, "backend": None})
                if name in TORCH_GRAPHS and case["kind"] != "generic":
                    cases.append({**case, "graph": key, "backend": "torch"})
                if case["name"].split("-", 1)[1] in triton_cases(world_size, key):
                    cases.append({**case, "graph": key, "backend": "triton"})
            if name != "tiny" and method == "metis":
                for kind in TRAIN_KINDS:
                    torch.manual_seed(world_size)
                    classes = int(data.y.max()) + 1
                    model = GNN(kind, data.num_features, 8, classes, dropout=0.0)
                    train_specs[key, kind] = {"classes": classes,
                                              "state": model.state_dict()}
    return (dirs, cases, train_specs), (cases, train_specs)


#: One battery per world size, launched with the other modules' of that world.
BATTERIES = {world_size: Battery(world_size, battery, functools.partial(prepare, world_size),
                                 timeout=900)
             for world_size in WORLD_SIZES}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    def get(world_size):
        (cases, train_specs), per_rank = BATTERIES[world_size].results(tmp_path_factory)
        return cases, [r[0] for r in per_rank], [r[1] for r in per_rank], train_specs

    yield get
    for battery in BATTERIES.values():  # gigabytes of Cora's gradients
        battery.release()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("method", METHODS)
def test_layers_equal_pyg_on_whole_graph(runs, references, loaded, graphs, world_size, graph,
                                         method):
    require_graph(loaded, graph)
    _, refs = references
    cases, results, _, _ = runs(world_size)
    key = f"{graph}-{method}"
    num_nodes = graphs[graph].num_nodes
    checked = {}
    for i, case in enumerate(cases):
        if case["graph"] != key:
            continue
        ref = refs[case["name"]]
        per_rank = [results[r][i] for r in range(world_size)]
        what = f"{case['name']} on {world_size} ranks ({method}, {case['backend'] or 'default'})"
        assert_close(gather_rows(per_rank, "out", num_nodes), ref["out"], what=f"{what}: output")
        if case["x_grad"]:
            assert_close(gather_rows(per_rank, "x_grad", num_nodes), ref["x_grad"],
                         what=f"{what}: input gradient")
        for name, grad in ref["grads"].items():
            for r in range(world_size):
                assert_close(per_rank[r]["grads"][name], grad, what=f"{what}: grad of {name}")
        for name, buffer in ref["buffers"].items():  # running statistics of norms
            for r in range(world_size):
                assert_close(per_rank[r]["buffers"][name].float(), buffer.float(),
                             what=f"{what}: buffer {name}")
        checked[case["backend"]] = checked.get(case["backend"], 0) + 1
    assert checked[None] == len(references[0][graph])
    if graph in TORCH_GRAPHS:
        assert checked["torch"] == sum(c["kind"] != "generic" for c in references[0][graph])
    if triton_cases(world_size, key):
        assert checked["triton"] == len(triton_cases(world_size, key))


def single_process_training(kind, data, state, classes):
    """Plain PyG training of the same model on the whole graph: two layers
    with ReLU between, Adam, cross entropy averaged over the training nodes;
    accuracy of each mask in evaluation mode after every step."""
    conv = TRAIN_KINDS[kind]
    layers = torch.nn.ModuleList([conv(data.num_features, 8), conv(8, classes)])
    layers.load_state_dict({k[len("convs."):]: v for k, v in state.items()})
    optimizer = torch.optim.Adam(layers.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)

    def forward():
        return layers[1](layers[0](data.x, data.edge_index).relu(), data.edge_index)

    losses, accs = [], []
    for _ in range(TRAIN_EPOCHS):
        optimizer.zero_grad()
        loss = F.cross_entropy(forward()[data.train_mask], data.y[data.train_mask])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        with torch.no_grad():
            correct = forward().argmax(dim=-1) == data.y
        accs.append(tuple(int(correct[data[m]].sum()) / int(data[m].sum())
                          for m in ("train_mask", "val_mask", "test_mask")))
    state = {f"convs.{k}": v for k, v in layers.state_dict().items()}
    return state, losses, accs


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("graph", ["awkward", "cora"])
@pytest.mark.parametrize("kind", sorted(TRAIN_KINDS))
def test_training_steps_equal_single_process(runs, loaded, graphs, world_size, graph, kind):
    require_graph(loaded, graph)
    _, _, trained, specs = runs(world_size)
    key = f"{graph}-metis"
    data = graphs[graph]
    state, losses, accs = single_process_training(kind, data, specs[key, kind]["state"],
                                                  specs[key, kind]["classes"])
    # Accuracies come from an argmax: logits equal to 1e-7 may still flip a
    # near-tie, so they may differ by one node per mask.
    one_node = [1 / int(data[m].sum()) for m in ("train_mask", "val_mask", "test_mask")]
    for r in range(world_size):
        ours = trained[r][key, kind]
        for name, value in state.items():
            assert_close(ours["state"][name], value,
                         what=f"{graph} {kind}, rank {r}/{world_size}: {name} after "
                              f"{TRAIN_EPOCHS} steps")
        assert ours["losses"] == pytest.approx(losses, rel=1e-5)
        for epoch, ref in zip(ours["accs"], accs):
            for ours_acc, ref_acc, tol in zip(epoch, ref, one_node):
                assert abs(ours_acc - ref_acc) <= tol + 1e-9
