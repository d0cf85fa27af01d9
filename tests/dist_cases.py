"""Oracle cases for the distributed layers, shared by the test process (which
builds the PyG reference on the whole graph) and the ranks (which run the Dist
layers on their parts). Everything a rank needs travels in the case dicts."""
import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch_geometric.nn import (
    MLP,
    GATConv,
    GATv2Conv,
    GCNConv,
    GINConv,
    GINEConv,
    GraphConv,
    ResGatedGraphConv,
    SAGEConv,
    TransformerConv,
)
from torch_geometric.nn.models import GCN, GIN, GraphSAGE

import pyg_dist
from pyg_dist.nn import DistGCNConv, DistMessagePassing, DistSAGEConv, to_distributed
from pyg_dist.ops import default_backend
from pyg_dist.utils.dropout import _keep

SINGLE = {"gcn": (GCNConv, DistGCNConv), "sage": (SAGEConv, DistSAGEConv)}
MODELS = {  # converted with to_distributed
    "gcn2": GCN, "sage2": GraphSAGE,
    # (no bias right before a norm that subtracts the feature mean: its
    # gradient is zero, float noise alone)
    "gcn2-batchnorm": lambda *a, **k: GCN(*a, norm="batch_norm", bias=False, **k),
    "sage2-graphnorm": lambda *a, **k: GraphSAGE(*a, norm="graph_norm", bias=False, **k),
    "gin2-layernorm": lambda *a, **k: GIN(*a, norm="layer_norm", **k),
}
# PyG layers converted with to_distributed (the specialised twin where there
# is one, e.g. DistGATConv, else the generic path; names ending in "-generic"
# are wrapped in DistMessagePassing instead): (factory of a layer with o
# output features, per-edge argument).
GENERIC = {
    "gat": (lambda i, o: GATConv(i, o // 2, heads=2), None),
    "gat-generic": (lambda i, o: GATConv(i, o // 2, heads=2), None),
    "gat-mean-edges": (lambda i, o: GATConv(i, o, heads=3, concat=False, edge_dim=1,
                                            residual=True), "edge_attr"),
    "gat-mean-edges-generic": (lambda i, o: GATConv(i, o, heads=3, concat=False, edge_dim=1,
                                                    residual=True), "edge_attr"),
    "gat-noloops": (lambda i, o: GATConv(i, o // 2, heads=2, add_self_loops=False,
                                         negative_slope=0.1, bias=False), None),
    "gat-fill-add": (lambda i, o: GATConv(i, o // 2, heads=2, edge_dim=1, fill_value="add"),
                     "edge_attr"),
    "gat-fill-const": (lambda i, o: GATConv(i, o, edge_dim=1, fill_value=0.5), "edge_attr"),
    "gat-dropout": (lambda i, o: GATConv(i, o // 2, heads=2, dropout=0.5), None),
    "gatv2": (lambda i, o: GATv2Conv(i, o // 2, heads=2, edge_dim=1), "edge_attr"),
    "gin": (lambda i, o: GINConv(MLP([i, 8, o], norm=None), train_eps=True), None),
    "gine": (lambda i, o: GINEConv(MLP([i, 8, o], norm=None), edge_dim=1), "edge_attr"),
    "graph": (lambda i, o: GraphConv(i, o, aggr="mean"), "edge_weight"),
    "transformer": (lambda i, o: TransformerConv(i, o // 2, heads=2, beta=True, edge_dim=1),
                    "edge_attr"),
    "resgated": (lambda i, o: ResGatedGraphConv(i, o), None),
    "sage-multi": (lambda i, o: SAGEConv(i, o, aggr=["mean", "max", "std"]), None),
    "sage-softmax": (lambda i, o: SAGEConv(i, o, aggr="softmax",
                                           aggr_kwargs={"learn": True}), None),
}


def layer_cases(graph, feats_from_data):
    """Cases on one graph. ``feats_from_data``: use the graph's own ``x`` (Cora)
    instead of seeded random features (then no input-gradient check for max
    aggregation: binary features make its subgradient ambiguous)."""
    cases = []
    gcn_options = [
        ({}, False),
        ({"improved": True}, True),
        ({"add_self_loops": False}, True),
        ({"normalize": False, "add_self_loops": False}, True),
        ({"bias": False}, False),
        ({"cached": True}, False),  # called twice: the second call reads the cache
        ({"cached": True, "improved": True}, True),
    ]
    sage_options = [
        {"aggr": "mean"},
        {"aggr": "sum"},
        {"aggr": "max"},
        {"aggr": "mean", "project": True},
        {"aggr": "mean", "normalize": True, "root_weight": False},
        {"aggr": "max", "root_weight": False, "bias": False},
    ]
    widths = [(5, 3), (3, 7)] if not feats_from_data else [(None, 16)]
    for f_in, f_out in widths:
        for kwargs, weights in gcn_options:
            cases.append(dict(kind="gcn", kwargs=kwargs, f_in=f_in, f_out=f_out, weights=weights))
        for kwargs in sage_options:
            cases.append(dict(kind="sage", kwargs=kwargs, f_in=f_in, f_out=f_out, weights=False))
        cases.append(dict(kind="gcn2", kwargs={"hidden_channels": 6, "num_layers": 2},
                          f_in=f_in, f_out=f_out, weights=True))
        cases.append(dict(kind="sage2", kwargs={"hidden_channels": 6, "num_layers": 2,
                                                "aggr": "max"},
                          f_in=f_in, f_out=f_out, weights=False))
    f_in, f_out = widths[0]
    for model in ("gcn2-batchnorm", "sage2-graphnorm", "gin2-layernorm"):
        cases.append(dict(kind=model, kwargs={"hidden_channels": 6, "num_layers": 2},
                          f_in=f_in, f_out=f_out, weights=False))
    for layer, (_, edge) in GENERIC.items():  # an even output width: two concatenated heads
        cases.append(dict(kind="generic", kwargs={"layer": layer}, f_in=f_in,
                          f_out=2 * (f_out // 2 + 1), weights=False, edge=edge))
    for i, case in enumerate(cases):
        has_max = "max" in str(case["kwargs"].get("aggr")) or "multi" in str(case["kwargs"])
        case.update(graph=graph, seed=1000 + i, x_from_data=feats_from_data,
                    x_grad=not (feats_from_data and has_max),
                    calls=2 if case["kwargs"].get("cached") else 1)
        case.setdefault("edge", "edge_weight" if case["weights"] else None)
        case["name"] = f"{graph}-{case['kind']}-{case['f_in']}x{case['f_out']}-{case['kwargs']}"
    return cases


#: The shared dropout seed of the attention-dropout cases (set on every rank).
DROPOUT_SEED = 4242


@contextlib.contextmanager
def shared_attention_dropout(edge_index, num_nodes):
    """PyG's GATConv on the whole graph, its attention dropout drawing the
    masks DistGATConv draws: key ``2e`` for edge ``e`` of ``edge_index`` that
    is not a self-loop (in order), ``2v + 1`` for the self-loop added at
    ``v``, call 0 of :data:`DROPOUT_SEED`."""
    from torch_geometric.nn.conv import gat_conv

    loops = edge_index[0] == edge_index[1]
    keys = torch.cat([2 * torch.nonzero(~loops).view(-1), 2 * torch.arange(num_nodes) + 1])

    class Functional:
        def __getattr__(self, name):
            return getattr(F, name)

        @staticmethod
        def dropout(alpha, p=0.5, training=True):
            if not training or p == 0.0:
                return alpha
            keep = _keep(keys, alpha.size(1), DROPOUT_SEED, 0, p)
            return alpha * keep.to(alpha.dtype) * (1.0 / (1.0 - p))

    original = gat_conv.F
    gat_conv.F = Functional()
    try:
        yield
    finally:
        gat_conv.F = original


def has_attention_dropout(case):
    return case["kind"] == "generic" and case["kwargs"]["layer"].endswith("-dropout")


def build_reference(case, num_features):
    """The PyG module of ``case`` (seeded), its input width resolved."""
    torch.manual_seed(case["seed"])
    f_in = case["f_in"] or num_features
    if case["kind"] in SINGLE:
        return SINGLE[case["kind"]][0](f_in, case["f_out"], **case["kwargs"])
    if case["kind"] == "generic":
        return GENERIC[case["kwargs"]["layer"]][0](f_in, case["f_out"])
    return MODELS[case["kind"]](f_in, out_channels=case["f_out"], **case["kwargs"])


def inputs(case, data):
    """Input features and upstream gradient over the whole graph (seeded)."""
    g = torch.Generator().manual_seed(case["seed"])
    num_nodes = data.meta.num_nodes if isinstance(data, pyg_dist.DistData) else data.num_nodes
    if case["x_from_data"]:
        x = None
    else:
        x = torch.randn(num_nodes, case["f_in"], generator=g)
    upstream = torch.randn(num_nodes, case["f_out"], generator=g)
    return x, upstream


def call(module, case, x, edge_index, edge_weight):
    """The module's output; cases with ``calls=2`` call it twice and return
    the second (cached) output."""
    for _ in range(case["calls"]):
        if case["edge"] == "edge_attr":
            out = module(x, edge_index, edge_attr=edge_weight.view(-1, 1))
        elif case["edge"] == "edge_weight":
            out = module(x, edge_index, edge_weight=edge_weight)
        else:
            out = module(x, edge_index)
    return out


def parameter_grads(module):
    """Every parameter's gradient (zeros for one the output did not use)."""
    return {n: p.grad.clone() if p.grad is not None else torch.zeros_like(p)
            for n, p in module.named_parameters()}


def buffers(module):
    return {n: b.detach().clone() for n, b in module.named_buffers()}


def reference(case, data):
    """Outputs and gradients of the PyG module on the whole graph."""
    module = build_reference(case, data.num_features if data.x is not None else 0)
    x, upstream = inputs(case, data)
    x = (data.x if x is None else x).clone().requires_grad_(case["x_grad"])
    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    dropout = (shared_attention_dropout(data.edge_index, data.num_nodes)
               if has_attention_dropout(case) else contextlib.nullcontext())
    with dropout:
        out = call(module, case, x, data.edge_index, data.edge_weight if case["edge"] else None)
    (out * upstream).sum().backward()
    return {
        "state": state,
        "out": out.detach(),
        "x_grad": x.grad,
        "grads": parameter_grads(module),
        "buffers": buffers(module),
    }


def run_cases(dirs, cases):
    """Rank side: each case's Dist module on this rank's part; parameter
    gradients are summed over ranks."""
    datas = {key: pyg_dist.DistData.load(path) for key, path in dirs.items()}
    results = []
    for case in cases:
        data = datas[case["graph"]]
        if case["kind"] in SINGLE:
            f_in = case["f_in"] or data.x.size(1)
            module = SINGLE[case["kind"]][1](f_in, case["f_out"], **case["kwargs"])
        else:
            module = build_reference(case, data.x.size(1) if "x" in data.keys() else 0)
            generic = case["kind"] == "generic" and case["kwargs"]["layer"].endswith("-generic")
            module = DistMessagePassing(module) if generic else to_distributed(module)
        module.load_state_dict(case["state"])
        if has_attention_dropout(case):
            data.edge_index.registry.dropout.seed = DROPOUT_SEED
            data.edge_index.registry.dropout.calls = 0
        x, upstream = inputs(case, data)
        x = (data.x if x is None else x[data.global_id]).clone().requires_grad_(case["x_grad"])
        weight = data.edge_weight if case["edge"] else None
        with default_backend(case.get("backend")):
            out = call(module, case, x, data.edge_index, weight)
            (out * upstream[data.global_id]).sum().backward()
        grads = parameter_grads(module)
        for grad in grads.values():
            dist.all_reduce(grad)
        results.append({
            "global_id": data.global_id.clone(),
            "out": out.detach(),
            "x_grad": x.grad,
            "grads": grads,
            "buffers": buffers(module),
            "ledger": data.ledger.totals(),
        })
    return results


def gather_rows(per_rank, key, num_nodes):
    """Reassembles per-rank rows into whole-graph order by global id."""
    first = per_rank[0][key]
    full = first.new_full((num_nodes, *first.shape[1:]), float("nan"))
    for res in per_rank:
        full[res["global_id"]] = res[key]
    return full
