"""Pre-aggregation on a minimum vertex cover: the Dist layers with
``pre_aggregate=True`` against PyG on the whole graph (outputs, input and
parameter gradients), under exact and lossy policies and codecs, the rows and
partial sums the ledger books against the cover's size, and the errors of
layers that cannot pre-aggregate.

One battery per world size (2 and 4) runs every case on a METIS and a random
cut of the awkward graph (directed, self-loops, duplicates, isolated nodes,
weights), a METIS cut of Cora and a random cut of a tiny graph; the test
process builds the references."""
import functools

import pytest
import torch
import torch.distributed as dist
from graphs import awkward_graph, cora, tiny_graph
from tolerances import SAME, assert_close
from torch_geometric.nn import MLP, GATConv, GCN2Conv, GCNConv, GINConv, SAGEConv
from torch_geometric.nn.models import GCN
from worlds import Battery, once

import pyg_dist
from pyg_dist.config import GraphParallel
from pyg_dist.halo import Adaptive, Auto, Exact, Isolated, Pipelined, Sampled, Stale
from pyg_dist.halo.compress import CODECS
from pyg_dist.halo.exchange import exchange_halo
from pyg_dist.models import GNN
from pyg_dist.nn import (
    DistGATConv,
    DistGCN2Conv,
    DistGCNConv,
    DistMessagePassing,
    DistSAGEConv,
    to_distributed,
)
from pyg_dist.ops import spmm
from pyg_dist.partitioning.cover import vertex_cover_plan
from pyg_dist.train import train

WORLD_SIZES = [2, 4]
GRAPHS = {"awkward-metis": "metis", "awkward-random": "random", "cora-metis": "metis",
          "tiny-random": "random"}
#: The cases on the tiny graph (one edge, one self-loop: most ranks have no halo).
TINY_CASES = ("gcn-5x3", "sage-mean-3x5")
F_IN, F_OUT = 5, 3

# name -> (PyG factory, Dist factory, edge argument: None | "weight"); widths
# (F_IN, F_OUT) transform before exchanging, (F_OUT, F_IN) exchange inputs.
LAYERS = {
    "gcn": (lambda i, o: GCNConv(i, o), lambda i, o: DistGCNConv(i, o, pre_aggregate=True),
            None),
    "gcn-weighted": (lambda i, o: GCNConv(i, o),
                     lambda i, o: DistGCNConv(i, o, pre_aggregate=True), "weight"),
    "gcn-improved-weighted": (lambda i, o: GCNConv(i, o, improved=True),
                              lambda i, o: DistGCNConv(i, o, improved=True, pre_aggregate=True),
                              "weight"),
    "gcn-noloops": (lambda i, o: GCNConv(i, o, add_self_loops=False),
                    lambda i, o: DistGCNConv(i, o, add_self_loops=False, pre_aggregate=True),
                    None),
    "gcn-plain-weighted": (
        lambda i, o: GCNConv(i, o, normalize=False, add_self_loops=False),
        lambda i, o: DistGCNConv(i, o, normalize=False, add_self_loops=False,
                                 pre_aggregate=True), "weight"),
    "sage-sum": (lambda i, o: SAGEConv(i, o, aggr="sum"),
                 lambda i, o: DistSAGEConv(i, o, aggr="sum", pre_aggregate=True), None),
    "sage-mean": (lambda i, o: SAGEConv(i, o, aggr="mean"),
                  lambda i, o: DistSAGEConv(i, o, aggr="mean", pre_aggregate=True), None),
    "sage-mean-project": (lambda i, o: SAGEConv(i, o, aggr="mean", project=True),
                          lambda i, o: DistSAGEConv(i, o, aggr="mean", project=True,
                                                    pre_aggregate=True), None),
    "gin": (lambda i, o: GINConv(MLP([i, 4, o], norm=None), train_eps=True),
            lambda i, o: DistMessagePassing(GINConv(MLP([i, 4, o], norm=None), train_eps=True),
                                            pre_aggregate=True), None),
}
WIDTHS = [(F_IN, F_OUT), (F_OUT, F_IN)]
# Policies whose first step exchanges exactly (then reuse what they hold).
FIRST_EXACT = {"stale2": Stale(every=2), "pipelined": Pipelined(), "adaptive": Adaptive(0.1)}
CODEC_NAMES = ["int8", "int4"]
GCN2_ALPHA = 0.2


def features(num_nodes, width, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(num_nodes, width, generator=g), torch.randn(num_nodes, 8, generator=g)


def layer_specs():
    """Every (case name, layer, widths, seed) of the oracle battery."""
    specs = []
    for name in LAYERS:
        for f_in, f_out in WIDTHS:
            specs.append((f"{name}-{f_in}x{f_out}", name, f_in, f_out, 10 + len(specs)))
    return specs


SEEDS = {case: seed for case, *_, seed in layer_specs()}


def pyg_reference(factory, f_in, f_out, seed, data, weighted, gcn2=False):
    """The PyG layer's output and gradients on the whole graph, and its state."""
    torch.manual_seed(seed)
    module = GCN2Conv(f_in, GCN2_ALPHA, theta=0.5, layer=2) if gcn2 else factory(f_in, f_out)
    x, up = features(data.num_nodes, f_in, seed)
    x.requires_grad_()
    weight = data.edge_weight if weighted else None
    out = module(x, x.detach() * 0.5, data.edge_index, weight) if gcn2 else (
        module(x, data.edge_index, weight) if weight is not None else module(x, data.edge_index))
    (out * up[:, : out.size(1)]).sum().backward()
    grads = {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}
    return {"state": module.state_dict(), "out": out.detach(), "x_grad": x.grad, "grads": grads}


def run_layer(module, data, f_in, seed, weighted, gcn2=False, steps=1):
    """This rank's output and gradients (parameter gradients summed over
    ranks) of ``module`` on ``data``, for ``steps`` steps of the same input."""
    x_all, up_all = features(data.meta.num_nodes, f_in, seed)
    weight = data.edge_weight if weighted else None
    outs = []
    for _ in range(steps):
        module.zero_grad()
        x = x_all[data.global_id].clone().requires_grad_()
        if gcn2:
            out = module(x, x.detach() * 0.5, data.edge_index, weight)
        elif weight is not None:
            out = module(x, data.edge_index, weight)
        else:
            out = module(x, data.edge_index)
        (out * up_all[data.global_id][:, : out.size(1)]).sum().backward()
        data.ledger.next_step()
        outs.append(out.detach())
    grads = {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}
    for grad in grads.values():
        dist.all_reduce(grad)
    return {"out": outs[0], "outs": outs, "x_grad": x.grad, "grads": grads}


def codec_bound(module, data, codec, f_in, seed):
    """Rank side: the bound on this rank's output rows of a GCN layer whose
    halo (transformed rows, ``f_in > out``) crosses through ``codec``: the
    codec's per-element bound on the exact partial sums and rows this rank
    receives, aggregated with the absolute coefficients."""
    x_all, _ = features(data.meta.num_nodes, f_in, seed)
    h = module.lin(x_all[data.global_id]).detach()
    graph, value = module._pre_aggregated(data.edge_index, None, h.dtype)
    rows = exchange_halo(h, graph.channel, "bound/exact")
    bound = CODECS[codec].error_bound(rows)
    return spmm(graph.rowptr, graph.col, torch.zeros_like(h), value.abs(), "sum", x_halo=bound)


def battery(dirs, specs, refs_state):
    """Runs on every rank: every check, each result keyed by (graph, case)."""
    out = {}
    for key, path in dirs.items():
        weighted_graph = key.startswith("awkward")
        for case, name, f_in, f_out, seed in specs:
            if LAYERS[name][2] == "weight" and not weighted_graph:
                continue
            if key.startswith("tiny") and case not in TINY_CASES:
                continue
            data = pyg_dist.DistData.load(path)
            module = LAYERS[name][1](f_in, f_out)
            module.load_state_dict(refs_state[key, case])
            out[key, case] = run_layer(module, data, f_in, seed, LAYERS[name][2] is not None)
            if case == "gcn-5x3":
                rows = [(e["layer"], e["direction"], e["rows_sent"], e["partial_sums_sent"])
                        for e in data.ledger.rows()]
                out[key, case]["ledger"] = rows
                plain = pyg_dist.DistData.load(path)
                out[key, case]["plain_rows"] = plain.edge_index.plan.num_send
        if key.startswith("tiny"):
            continue
        data = pyg_dist.DistData.load(path)
        gcn2 = DistGCN2Conv(F_IN, GCN2_ALPHA, theta=0.5, layer=2, pre_aggregate=True)
        gcn2.load_state_dict(refs_state[key, "gcn2"])
        out[key, "gcn2"] = run_layer(gcn2, data, F_IN, 7, weighted_graph, gcn2=True)
        if key != "awkward-metis":
            continue
        # Policies whose first step is exact: step 0 equals PyG; with the
        # same input, a step that reuses what it holds gives the same rows.
        for policy_name, policy in FIRST_EXACT.items():
            data = pyg_dist.DistData.load(path)
            module = DistGCNConv(F_OUT, F_IN, halo=policy, pre_aggregate=True)
            module.load_state_dict(refs_state[key, "gcn-3x5"])
            out[key, policy_name] = run_layer(module, data, F_OUT, SEEDS["gcn-3x5"], False,
                                              steps=3)
            data.edge_index.flush()
        # Auto isolating a pre-aggregated layer: as Isolated on rows.
        for case in ("gcn-3x5", "sage-mean-3x5", "gin-3x5"):
            name = case.rsplit("-", 1)[0]
            for label, policy in (("auto", Auto(isolate_below=0.99)), ("isolated", Isolated())):
                data = pyg_dist.DistData.load(path, halo=policy)
                module = LAYERS[name][1](F_OUT, F_IN)
                module.pre_aggregate = label == "auto"
                module.load_state_dict(refs_state[key, case])
                out[key, f"{label}-{case}"] = run_layer(module, data, F_OUT, SEEDS[case], False)
        # Compressed halos: within the codec's bound of PyG.
        for codec in CODEC_NAMES:
            data = pyg_dist.DistData.load(path)
            module = DistGCNConv(F_IN, F_OUT, halo=Exact(compress=codec), pre_aggregate=True)
            module.load_state_dict(refs_state[key, "gcn-5x3"])
            result = run_layer(module, data, F_IN, SEEDS["gcn-5x3"], False)
            result["bound"] = codec_bound(module, data, codec, F_IN, SEEDS["gcn-5x3"])
            out[key, codec] = result
        # The graph's default: a model of GCN layers (converted) pre-aggregates
        # and a GAT layer exchanges rows; static inputs (called twice).
        data = pyg_dist.DistData.load(path, pre_aggregate=True)
        model = to_distributed(GCN(F_IN, 6, 2, F_OUT))
        model.load_state_dict(refs_state[key, "model"])
        model.eval()
        x_all, _ = features(data.meta.num_nodes, F_IN, 3)
        with torch.no_grad():
            x = x_all[data.global_id]
            first, second = model(x, data.edge_index), model(x, data.edge_index)
        gat = DistGATConv(F_IN, F_OUT)
        gat.load_state_dict(refs_state[key, "gat"])
        gat_out = gat(x_all[data.global_id], data.edge_index).detach()
        out[key, "model"] = {"first": first, "second": second, "gat": gat_out,
                             "ledger": data.ledger.rows(), "gat_name": data.edge_index.registry
                             .name(gat)}
        out[key, "errors"] = bad_inputs(path)
        out[key, "train"] = {flag: train_run(path, flag) for flag in (False, True)}
        out[key, "retrain"] = retrain_run(path)
    return {"gids": {k: pyg_dist.DistData.load(p).global_id for k, p in dirs.items()},
            "results": out}


def train_run(path, pre_aggregate):
    """Three steps of a two-layer GCN with dropout, from the same weights."""
    data = pyg_dist.DistData.load(path)
    torch.manual_seed(0)
    model = GNN("gcn", F_IN, 6, 3, dropout=0.5)
    result = train(model, data, 3, progress=False,
                   strategy=GraphParallel(pre_aggregate=pre_aggregate))
    return {"state": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "losses": [e.loss for e in result.history], "ledger": data.ledger.rows()}


def retrain_run(path):
    """On one graph, training pre-aggregated, then with pre_aggregate=False,
    then with the graph's own setting (off, as loaded): the partial sums each
    run sent, and the graph's setting after them."""
    data = pyg_dist.DistData.load(path)
    sums = []
    for flag in (True, False, None):
        start = data.ledger.step
        torch.manual_seed(0)
        train(GNN("gcn", F_IN, 6, 3, dropout=0.5), data, 2, progress=False,
              strategy=GraphParallel(pre_aggregate=flag))
        sums.append(sum(e["partial_sums_sent"] for e in data.ledger.rows()
                        if e["step"] >= start))
    return {"partial_sums": sums, "after": data.edge_index.pre_aggregate}


def bad_inputs(path):
    """The error each layer that cannot pre-aggregate raises when asked."""
    data = pyg_dist.DistData.load(path)
    x = torch.randn(data.num_nodes, F_IN)
    weight = data.edge_weight.clone().requires_grad_()
    gat = DistGATConv(F_IN, F_OUT)
    gat.pre_aggregate = True
    attempts = {
        "gat": lambda: gat(x, data.edge_index),
        "sage-max": lambda: DistSAGEConv(F_IN, F_OUT, aggr="max", pre_aggregate=True)(
            x, data.edge_index),
        "gcn-grad-weights": lambda: DistGCNConv(F_IN, F_OUT, pre_aggregate=True)(
            x, data.edge_index, weight),
        "sampled": lambda: DistGCNConv(F_IN, F_OUT, halo=Sampled(0.5), pre_aggregate=True)(
            x, data.edge_index),
        "gat-generic": lambda: DistMessagePassing(GATConv(F_IN, F_OUT), pre_aggregate=True)(
            x, data.edge_index),
    }
    errors = {}
    for name, attempt in attempts.items():
        try:
            attempt()
        except ValueError as exc:
            errors[name] = str(exc)
    return errors


def gather(per_rank, key, case, field, num_nodes):
    first = per_rank[0]["results"][key, case][field]
    full = first.new_full((num_nodes, *first.shape[1:]), float("nan"))
    for res in per_rank:
        full[res["gids"][key]] = res["results"][key, case][field]
    return full


@once
def load_graphs(root):
    return {"awkward": awkward_graph(num_features=F_IN), "cora": cora(root / "cora"),
            "tiny": tiny_graph()}


@once
def pyg_references(whole_graphs):
    """PyG references per (graph, case), and the states the ranks load."""
    refs = {}
    for graph_name, data in whole_graphs.items():
        weighted_graph = graph_name == "awkward"
        for case, name, f_in, f_out, seed in layer_specs():
            factory, _, edge = LAYERS[name]
            if edge == "weight" and not weighted_graph:
                continue
            if graph_name == "tiny" and case not in TINY_CASES:
                continue
            refs[graph_name, case] = pyg_reference(factory, f_in, f_out, seed, data,
                                                   edge is not None)
        if graph_name == "tiny":
            continue
        refs[graph_name, "gcn2"] = pyg_reference(None, F_IN, F_IN, 7, data, weighted_graph,
                                                 gcn2=True)
    data = whole_graphs["awkward"]
    torch.manual_seed(5)
    model, gat = GCN(F_IN, 6, 2, F_OUT).eval(), GATConv(F_IN, F_OUT)
    x, _ = features(data.num_nodes, F_IN, 3)
    with torch.no_grad():
        refs["awkward", "model"] = {"state": model.state_dict(),
                                    "out": model(x, data.edge_index)}
        refs["awkward", "gat"] = {"state": gat.state_dict(), "out": gat(x, data.edge_index)}
    return refs


def prepare(world_size, root):
    whole_graphs = load_graphs(root / "graphs")
    references = pyg_references(whole_graphs)
    dirs = {}
    for key, method in GRAPHS.items():
        dirs[key] = str(root / key)
        pyg_dist.partition(whole_graphs[key.split("-")[0]], world_size, dirs[key],
                           method=method, seed=3)
    states = {(key, case): ref["state"] for (g, case), ref in references.items()
              for key in GRAPHS if key.split("-")[0] == g}
    return (dirs, layer_specs(), states), None


RUNS = {world_size: Battery(world_size, battery, functools.partial(prepare, world_size))
        for world_size in WORLD_SIZES}


@pytest.fixture(scope="module")
def whole_graphs(tmp_path_factory):
    yield load_graphs(tmp_path_factory.mktemp("graphs"))
    load_graphs.clear()


@pytest.fixture(scope="module")
def references(whole_graphs):
    yield pyg_references(whole_graphs)
    pyg_references.clear()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    yield lambda world_size: RUNS[world_size].results(tmp_path_factory)[1]
    for battery in RUNS.values():
        battery.release()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_layers_equal_pyg(runs, references, whole_graphs, world_size):
    per_rank = runs(world_size)
    checked = 0
    for key in GRAPHS:
        graph = key.split("-")[0]
        num_nodes = whole_graphs[graph].num_nodes
        for case in [c[0] for c in layer_specs()] + ["gcn2"]:
            if (graph, case) not in references:
                continue
            ref = references[graph, case]
            what = f"{case} on {key}, {world_size} ranks"
            assert_close(gather(per_rank, key, case, "out", num_nodes), ref["out"],
                         what=f"{what}: output")
            assert_close(gather(per_rank, key, case, "x_grad", num_nodes), ref["x_grad"],
                         what=f"{what}: input gradient")
            for name, grad in ref["grads"].items():
                for res in per_rank:
                    assert_close(res["results"][key, case]["grads"][name], grad,
                                 what=f"{what}: gradient of {name}")
            checked += 1
    assert checked == 2 * (2 * len(LAYERS) + 1) + (2 * len(LAYERS) - 6 + 1) + len(TINY_CASES)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_rows_and_partial_sums_match_the_cover(runs, whole_graphs, world_size):
    """The ledger's forward rows plus partial sums of a layer's exchange are
    the minimum cover's size, and fewer than the rows sent without it."""
    per_rank = runs(world_size)
    for key in GRAPHS:
        data = whole_graphs[key.split("-")[0]]
        parts = torch.empty(data.num_nodes, dtype=torch.long)
        for rank, res in enumerate(per_rank):
            parts[res["gids"][key]] = rank
        cover = vertex_cover_plan(data.edge_index, parts, world_size)
        moved, sums = 0, {"fwd": [0, 0], "bwd": [0, 0]}
        for rank, res in enumerate(per_rank):
            entries = {(layer, d): (r, p) for layer, d, r, p in
                       res["results"][key, "gcn-5x3"]["ledger"]}
            rows, partial = entries.get(("layer0", "fwd"), (0, 0))
            assert rows + partial == int(cover.rows_cover[rank].sum()), (key, rank)
            assert rows == sum(int(s.numel()) for s in cover.sources[rank]), (key, rank)
            moved += rows + partial
            for direction, total in sums.items():
                got = entries.get(("layer0", direction), (0, 0))
                total[0], total[1] = total[0] + got[0], total[1] + got[1]
        assert sums["bwd"] == sums["fwd"], key  # every row's gradient goes back
        today = sum(res["results"][key, "gcn-5x3"]["plain_rows"] for res in per_rank)
        assert today == int(cover.rows_today.sum())
        if key == "cora-metis":
            assert sums["fwd"][1] > 0 and moved < today, (moved, today)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_policies_and_codecs(runs, references, whole_graphs, world_size):
    per_rank = runs(world_size)
    key, num_nodes = "awkward-metis", whole_graphs["awkward"].num_nodes
    ref = references["awkward", "gcn-3x5"]
    for name in FIRST_EXACT:
        full = [torch.full_like(ref["out"], float("nan")) for _ in range(3)]
        for res in per_rank:
            for step in range(3):
                full[step][res["gids"][key]] = res["results"][key, name]["outs"][step]
        assert_close(full[0], ref["out"], what=f"{name}: step 0 against PyG")
        for step in (1, 2):  # same input: reused rows and partial sums are the same
            assert_close(full[step], full[0], tol=SAME, what=f"{name}: step {step}")
    for case in ("gcn-3x5", "sage-mean-3x5", "gin-3x5"):
        auto, isolated = (gather(per_rank, key, f"{label}-{case}", "out", num_nodes)
                          for label in ("auto", "isolated"))
        assert_close(auto, isolated, what=f"{case}: Auto isolating against Isolated")
        assert_close(gather(per_rank, key, f"auto-{case}", "x_grad", num_nodes),
                     gather(per_rank, key, f"isolated-{case}", "x_grad", num_nodes),
                     what=f"{case}: Auto isolating against Isolated, input gradient")
        assert float((auto - references["awkward", case]["out"]).abs().max()) > 1e-3
    ref = references["awkward", "gcn-5x3"]
    for codec in CODEC_NAMES:
        out = gather(per_rank, key, codec, "out", num_nodes)
        bound = gather(per_rank, key, codec, "bound", num_nodes)
        excess = (out - ref["out"]).abs() - bound
        assert float(excess.max()) <= 1e-5 * max(float(ref["out"].abs().max()), 1.0), codec
        assert float((out - ref["out"]).abs().max()) > 0, f"{codec} changed nothing"


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_graph_default_and_bad_layers(runs, references, whole_graphs, world_size):
    per_rank = runs(world_size)
    key, num_nodes = "awkward-metis", whole_graphs["awkward"].num_nodes
    for field in ("first", "second"):
        assert_close(gather(per_rank, key, "model", field, num_nodes),
                     references["awkward", "model"]["out"], what=f"to_distributed ({field})")
    assert_close(gather(per_rank, key, "model", "gat", num_nodes),
                 references["awkward", "gat"]["out"], what="GAT under the graph's default")
    sent = {}  # (layer, direction) -> rows and partial sums sent, over all ranks
    for res in per_rank:
        for e in res["results"][key, "model"]["ledger"]:
            total = sent.setdefault((e["layer"], e["direction"]), [0, 0])
            total[0] += e["rows_sent"]
            total[1] += e["partial_sums_sent"]
    for layer in ("convs.0", "convs.1"):
        assert sent[layer, "eval"][1] > 0, layer
    gat = per_rank[0]["results"][key, "model"]["gat_name"]
    assert sent[gat, "fwd"][0] > 0 and sent[gat, "fwd"][1] == 0  # rows only
    errors = per_rank[0]["results"][key, "errors"]
    assert set(errors) == {"gat", "sage-max", "gcn-grad-weights", "sampled", "gat-generic"}
    for name, message in errors.items():
        assert "cannot pre-aggregate" in message and "pre_aggregate=False" in message, name
    assert "attention" in errors["gat"]
    assert "aggr='max'" in errors["sage-max"]
    assert "require grad" in errors["gcn-grad-weights"]
    assert "'sampled'" in errors["sampled"]


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_training_equals_training_with_rows(runs, world_size):
    """GraphParallel(pre_aggregate=True) trains the same weights; layer 0's
    dropped-out static input keeps its cached rows, layer 1 sends partial sums."""
    per_rank = runs(world_size)
    for res in per_rank:
        rows, pre = (res["results"]["awkward-metis", "train"][flag] for flag in (False, True))
        assert pre["losses"] == pytest.approx(rows["losses"], rel=1e-5)
        for name, value in rows["state"].items():
            assert_close(pre["state"][name], value, what=f"trained {name}")
    sent = {}
    for res in per_rank:
        for e in res["results"]["awkward-metis", "train"][True]["ledger"]:
            total = sent.setdefault((e["layer"], e["direction"]), [0, 0])
            total[0] += e["rows_sent"]
            total[1] += e["partial_sums_sent"]
    assert sent["convs.1", "fwd"][1] > 0 and sent["convs.1", "bwd"][1] > 0
    assert sent["convs.0", "fwd"][1] == 0 < sent["convs.0", "fwd"][0]
    assert sent["convs.0", "eval"][1] > 0  # evaluation: no dropout, partial sums


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_pre_aggregation_holds_for_its_run_only(runs, world_size):
    """pre_aggregate=False turns it off, and a run leaves the graph's own
    setting as it found it: after a pre-aggregated run, neither a run with
    False nor one with the graph's setting sends a partial sum."""
    retrains = [res["results"]["awkward-metis", "retrain"] for res in runs(world_size)]
    on, off, default = (sum(r["partial_sums"][i] for r in retrains) for i in range(3))
    assert on > 0 and off == 0 and default == 0
    assert not any(r["after"] for r in retrains)
