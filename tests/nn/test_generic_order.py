"""Sequence aggregations through the generic path against PyG on the whole graph.

LSTM and GRU aggregation read each node's in-edges as a sequence, in their
order within ``edge_index``, padded to the longest sequence of the batch; an
MLP aggregation reads a fixed number of them, in order. On the whole graph
the batch is every node, so a rank must read the same sequence (the input's
order of a node's in-edges) with the same padding (the whole graph's largest
in-degree) whatever part holds the node."""
import functools

import pytest
import torch
import torch.distributed as dist
from graphs import awkward_graph
from tolerances import assert_close
from torch_geometric.nn import SAGEConv
from torch_geometric.nn.aggr import GRUAggregation, LSTMAggregation, MLPAggregation
from worlds import Battery

import pyg_dist
from pyg_dist.nn import DistMessagePassing, to_distributed

WORLD_SIZES = [1, 2, 3, 4]
METHODS = ["metis", "random"]
F_IN, F_OUT = 5, 3
#: name -> (layer factory, wrap with DistMessagePassing instead of to_distributed)
LAYERS = {
    "sage-lstm": (lambda: SAGEConv(F_IN, F_OUT, aggr="lstm"), False),
    "sage-lstm-generic": (lambda: SAGEConv(F_IN, F_OUT, aggr="lstm"), True),
    "sage-gru": (lambda: SAGEConv(F_IN, F_OUT, aggr=GRUAggregation(F_IN, F_IN)), True),
    "sage-lstm-max": (lambda: SAGEConv(F_IN, F_OUT, aggr=[LSTMAggregation(F_IN, F_IN), "max"]),
                      False),
    "sage-mlp": (lambda: SAGEConv(F_IN, F_OUT, aggr=MLPAggregation(
        F_IN, F_IN, max_num_elements=6, num_layers=1)), True),
}


def graph():
    """A directed graph with self-loops, duplicate edges and isolated nodes,
    its edges in random order (not sorted by target)."""
    data = awkward_graph(num_features=F_IN)
    g = torch.Generator().manual_seed(3)
    data.upstream = torch.randn(data.num_nodes, F_OUT, generator=g)
    return data


def by_target(edge_index):
    """``edge_index`` sorted by target, each target's in-edges in input order."""
    return edge_index[:, torch.sort(edge_index[1], stable=True).indices]


def build(name):
    torch.manual_seed(sum(map(ord, name)))
    return LAYERS[name][0]()


def reference(name, data):
    layer = build(name)
    state = {k: v.detach().clone() for k, v in layer.state_dict().items()}
    x = data.x.clone().requires_grad_()
    out = layer(x, by_target(data.edge_index))
    (out * data.upstream).sum().backward()
    grads = {n: p.grad for n, p in layer.named_parameters()}
    return state, {"out": out.detach(), "x_grad": x.grad, "grads": grads}


def run(dirs, states, x, upstream):
    """Rank side: every layer on every cut; parameter gradients summed."""
    results = {}
    for method, folder in dirs.items():
        data = pyg_dist.DistData.load(folder)
        for name, state in states.items():
            layer = build(name)
            layer.load_state_dict(state)
            layer = DistMessagePassing(layer) if LAYERS[name][1] else to_distributed(layer)
            h = x[data.global_id].clone().requires_grad_()
            out = layer(h, data.edge_index)
            (out * upstream[data.global_id]).sum().backward()
            grads = {n: p.grad.clone() for n, p in layer.named_parameters()}
            for grad in grads.values():
                dist.all_reduce(grad)
            results[method, name] = {"global_id": data.global_id, "out": out.detach(),
                                     "x_grad": h.grad, "grads": grads}
    return results


@functools.cache
def whole_graph():
    data = graph()
    refs = {name: reference(name, data) for name in LAYERS}
    return data, refs


def prepare(world_size, root):
    data, refs = whole_graph()
    dirs = {m: str(root / m) for m in METHODS}
    for method, folder in dirs.items():
        pyg_dist.partition(data, world_size, folder, method=method, seed=1)
    states = {name: state for name, (state, _) in refs.items()}
    return (dirs, states, data.x, data.upstream), None


RUNS = {world_size: Battery(world_size, run, functools.partial(prepare, world_size))
        for world_size in WORLD_SIZES}


@pytest.fixture(scope="module")
def whole():
    return whole_graph()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    yield lambda world_size: RUNS[world_size].results(tmp_path_factory)[1]
    for battery in RUNS.values():
        battery.release()


def gather(per_rank, method, name, key, num_nodes):
    first = per_rank[0][method, name][key]
    full = first.new_full((num_nodes, *first.shape[1:]), float("nan"))
    for res in per_rank:
        full[res[method, name]["global_id"]] = res[method, name][key]
    return full


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", list(LAYERS))
def test_sequence_aggregation_equals_pyg_on_whole_graph(whole, runs, world_size, method, name):
    data, refs = whole
    ref = refs[name][1]
    per_rank = runs(world_size)
    what = f"{name} on {world_size} ranks ({method})"
    for key in ("out", "x_grad"):
        assert_close(gather(per_rank, method, name, key, data.num_nodes), ref[key],
                     what=f"{what}: {key}")
    for param, grad in ref["grads"].items():
        for r, res in enumerate(per_rank):
            assert_close(res[method, name]["grads"][param], grad,
                         what=f"{what}: grad of {param} on rank {r}")
