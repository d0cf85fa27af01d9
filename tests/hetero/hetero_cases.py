"""Oracle cases of heterogeneous models, shared by the test process (PyG on
the whole HeteroData) and the ranks (the same model, distributed, on their
parts of a DistHeteroData). Everything a rank needs travels in the case dicts."""
import copy
from collections import defaultdict

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch_geometric.nn import GATConv, GraphConv, HeteroConv, SAGEConv, to_hetero

import pyg_dist
from pyg_dist.nn import DistGATConv, DistSAGEConv, to_distributed


class TwoLayers(torch.nn.Module):
    """Two convolutions of ``conv(in, out)`` with a ReLU between."""

    def __init__(self, conv, hidden, out):
        super().__init__()
        self.conv1 = conv((-1, -1), hidden)
        self.conv2 = conv((-1, -1), out)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


class HeteroConvs(torch.nn.Module):
    """Two HeteroConv layers, a different convolution per relation."""

    def __init__(self, edge_types, hidden, out, sage=SAGEConv, gat=GATConv):
        super().__init__()

        def layer(width):
            convs = {}
            for e in edge_types:
                if e[1] == "writes":
                    convs[e] = gat((-1, -1), width, heads=1, add_self_loops=False)
                elif e[1] == "has_topic":
                    convs[e] = GraphConv((-1, -1), width, aggr="mean")
                else:
                    convs[e] = sage((-1, -1), width, aggr="sum" if e[0] == e[2] else "mean")
            return HeteroConv(convs, aggr="sum")

        self.conv1, self.conv2 = layer(hidden), layer(out)

    def forward(self, x_dict, edge_index_dict):
        x_dict = {k: v.relu() for k, v in self.conv1(x_dict, edge_index_dict).items()}
        return self.conv2(x_dict, edge_index_dict)


def sage(i, o, **kw):
    return SAGEConv(i, o, **kw)


def gat(i, o, **kw):
    return GATConv(i, o, heads=2, concat=False, add_self_loops=False, **kw)


def build(case, metadata):
    """The PyG model of ``case`` (seeded), or with ``dist_layers`` the same
    model built from Dist layers."""
    torch.manual_seed(case["seed"])
    dist_layers = case.get("dist_layers", False)
    if case["kind"] == "heteroconv":
        return HeteroConvs(metadata[1], case["hidden"], case["out"],
                           *((DistSAGEConv, DistGATConv) if dist_layers else ()))
    conv = {"sage": sage, "gat": gat}[case["kind"]]
    if dist_layers:
        conv = {"sage": DistSAGEConv, "gat": lambda i, o, **kw: DistGATConv(
            i, o, heads=2, concat=False, add_self_loops=False, **kw)}[case["kind"]]
    return to_hetero(TwoLayers(conv, case["hidden"], case["out"]), metadata, aggr="sum")


def upstream(case, num_nodes):
    g = torch.Generator().manual_seed(case["seed"] + 1)
    return {t: torch.randn(n, case["out"], generator=g) for t, n in num_nodes.items()}


def reference(case, data):
    """Outputs, input and parameter gradients of the PyG model on the whole graph."""
    model = build(case, data.metadata())
    with torch.no_grad():
        model(data.x_dict, data.edge_index_dict)  # materialise lazy parameters
    state = copy.deepcopy(model.state_dict())
    x = {t: v.clone().requires_grad_() for t, v in data.x_dict.items()}
    out = model(x, data.edge_index_dict)
    up = upstream(case, {t: data[t].num_nodes for t in data.node_types})
    sum((out[t] * up[t]).sum() for t in out).backward()
    return {"state": state, "out": {t: v.detach() for t, v in out.items()},
            "x_grad": {t: v.grad for t, v in x.items()},
            "grads": {n: p.grad.clone() for n, p in model.named_parameters()}}


def distributed_model(case, data, state):
    model = build(case, data.metadata())
    if not case.get("dist_layers"):
        model = to_distributed(model)
    else:
        to_distributed(model)  # names the layers by module path
    model.load_state_dict(state)
    return model


def run_cases(folder, cases, states, num_nodes):
    """Rank side: each case's model on this rank's part; parameter gradients
    summed over ranks; the ledger's forward bytes per exchange name."""
    data = pyg_dist.DistHeteroData.load(folder)
    results = []
    for case, state in zip(cases, states):
        model = distributed_model(case, data, state)
        data.ledger.next_step()
        step = data.ledger.step
        x = {t: v.clone().requires_grad_() for t, v in data.x_dict.items()}
        out = model(x, data.edge_index_dict)
        up = upstream(case, num_nodes)
        sum((out[t] * up[t][data[t].global_id]).sum() for t in out).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        for g in grads.values():
            dist.all_reduce(g)
        traffic = {}
        for (s, name, direction), entry in data.ledger.entries.items():
            if s == step:
                traffic[name, direction] = (entry.bytes_recv, entry.exchanges)
        results.append({"global_id": {t: data[t].global_id for t in data.node_types},
                        "out": {t: v.detach() for t, v in out.items()},
                        "x_grad": {t: v.grad for t, v in x.items()},
                        "grads": grads, "traffic": traffic})
    return results


def train_steps(folder, case, state, steps, lr):
    """Rank side: ``steps`` SGD steps of the model on the paper nodes' training
    loss (mean over every rank's training nodes); returns the weights."""
    data = pyg_dist.DistHeteroData.load(folder)
    model = distributed_model(case, data, state)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    paper = data["paper"]
    total = torch.tensor(float(paper.train_mask.sum()))
    dist.all_reduce(total)
    for _ in range(steps):
        optimizer.zero_grad()
        out = model(data.x_dict, data.edge_index_dict)["paper"]
        loss = F.cross_entropy(out[paper.train_mask], paper.y[paper.train_mask],
                               reduction="sum") / total
        loss.backward()
        pyg_dist.runtime.distributed.all_reduce_gradients(model.parameters())
        optimizer.step()
        data.ledger.next_step()
    exchanges = defaultdict(int)
    for (_, name, direction), entry in data.ledger.entries.items():
        if direction == "fwd" and entry.bytes_recv:
            exchanges[name] += entry.exchanges
    return {n: p.detach().clone() for n, p in model.named_parameters()}, dict(exchanges)


def train_reference(data, case, state, steps, lr):
    model = build(case, data.metadata())
    with torch.no_grad():
        model(data.x_dict, data.edge_index_dict)
    model.load_state_dict(state)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    mask = data["paper"].train_mask
    for _ in range(steps):
        optimizer.zero_grad()
        out = model(data.x_dict, data.edge_index_dict)["paper"]
        F.cross_entropy(out[mask], data["paper"].y[mask]).backward()
        optimizer.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def run_all(folder, cases, states, num_nodes, train_case, train_state, steps, lr):
    """Every oracle case, then the training steps, in one battery."""
    return run_cases(folder, cases, states, num_nodes), \
        train_steps(folder, train_case, train_state, steps, lr)
