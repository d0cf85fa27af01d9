"""The recipe options of ``GNN`` (norms, residual connections, a
jumping-knowledge head, a linear skip, labels as input) on 1, 2 and 4 real
gloo ranks against single-process PyG models of the same structure on the
whole graph.

One launch per world size runs every case on a METIS and a random cut of the
awkward graph and of Cora: each option's outputs (training mode: batch norm
reads every rank's nodes) and parameter gradients, its evaluation outputs
(running statistics), and three training epochs with labels as input
through ``train``, whose splits must be the single process's for every cut.
The test process builds the references: the structure written with PyG's
layers here, PyG's own ``GraphSAGE`` where it has the option (``norm``,
``jk``), and a plain training loop of the label trick."""
import pytest
import torch
import torch.nn.functional as F
from graphs import awkward_graph, cora
from tolerances import assert_close
from torch import nn
from torch_geometric.nn import GCNConv, LayerNorm, SAGEConv
from torch_geometric.nn.models import GraphSAGE, JumpingKnowledge

import pyg_dist
from pyg_dist.config import Adam, GradientOnly
from pyg_dist.models import GNN
from pyg_dist.strategies.task import LabelTask
from pyg_dist.train import train
from pyg_dist.utils.labels import LabelInput

WORLD_SIZES = [1, 2, 4]
CUTS = {"awkward-metis": "metis", "awkward-random": "random", "cora-metis": "metis",
        "cora-random": "random"}
HIDDEN = 8
#: name -> GNN's options (kind sage unless given).
OPTIONS = {
    "batch-norm": {"norm": "batch"},
    "layer-norm": {"norm": "layer"},
    "jk-cat": {"jk": "cat", "layers": 3},
    "jk-max": {"jk": "max"},
    "skip": {"skip": True},
    "residual": {"residual": True, "layers": 3},
    "gcn-all": {"kind": "gcn", "norm": "batch", "jk": "cat", "skip": True, "residual": True,
                "layers": 3},
    "labels": {"label_input": True},
}
#: name -> options of the models trained with labels as input, and the graphs
#: they train on. Without conv biases under batch norm: their gradient is
#: zero up to float noise, which Adam's normalised steps (and the running mean)
#: follow. Batch norm trains on the awkward graph only: on Cora's sparse
#: binary features the weights of words absent from the loss's nodes get
#: gradients through the norm's statistics alone, sums that cancel to float
#: noise, and Adam's normalised steps turn that noise into 2e-5 differences
#: (batch norm on Cora is compared forward and backward above).
LABEL_RUNS = {"trained-labels": ({}, ("awkward", "cora")),
              "trained-labels-norm-skip-jk": ({"norm": "batch", "skip": True, "jk": "cat",
                                               "bias": False}, ("awkward",))}
EPOCHS = 3
LR, WEIGHT_DECAY = 0.01, 5e-4


class Reference(nn.Module):
    """The structure ``GNN``'s options describe, in PyG's layers: a hidden
    layer is ``[x +] relu(norm(conv(x) [+ W x]))``, the head a
    jumping-knowledge combination of every layer and a linear layer."""

    def __init__(self, f_in, classes, kind="sage", layers=2, norm=None, jk=None, skip=False,
                 residual=False, label_input=False, bias=True):
        super().__init__()
        kind = {"gcn": GCNConv, "sage": SAGEConv}[kind]

        def conv(i, o):
            return kind(i, o, bias=bias)

        f_in += classes if label_input else 0
        self.hidden = layers if jk else layers - 1
        sizes = [f_in] + [HIDDEN] * self.hidden + ([] if jk else [classes])
        pairs = list(zip(sizes[:-1], sizes[1:]))
        self.convs = nn.ModuleList(conv(i, o) for i, o in pairs)
        if norm:
            self.norms = nn.ModuleList(nn.BatchNorm1d(HIDDEN) if norm == "batch" else
                                       LayerNorm(HIDDEN, mode="node")
                                       for _ in range(self.hidden))
        if skip:
            self.skips = nn.ModuleList(nn.Linear(i, o, bias=False) for i, o in pairs)
        if jk:
            self.jk = JumpingKnowledge(jk)
            self.lin = nn.Linear(HIDDEN * layers if jk == "cat" else HIDDEN, classes)
        self.residual = residual

    def forward(self, x, edge_index):
        outs = []
        for k, conv in enumerate(self.convs):
            h = conv(x, edge_index)
            if hasattr(self, "skips"):
                h = h + self.skips[k](x)
            if k < self.hidden:
                h = (self.norms[k](h) if hasattr(self, "norms") else h).relu()
            x = x + h if self.residual and h.shape == x.shape else h
            outs.append(x)
        return self.lin(self.jk(outs)) if hasattr(self, "jk") else x


def before_batch_norm(param, options):
    """Whether ``param`` is a bias right before a batch norm: the norm
    subtracts its mean, so its gradient is zero up to float noise (which
    Adam's normalised step then follows); not compared."""
    if options.get("norm") != "batch" or not param.endswith("bias"):
        return False
    part, k = param.split(".")[:2]
    hidden = options.get("layers", 2) - (0 if options.get("jk") else 1)
    return part == "convs" and int(k) < hidden


def with_labels(data, classes, shown):
    return torch.cat([data.x, F.one_hot(data.y, classes).float() * shown[:, None]], dim=1)


def upstream(num_nodes, classes):
    return torch.randn(num_nodes, classes, generator=torch.Generator().manual_seed(1))


def forward_backward(model, x, edge_index, up):
    """Training-mode output and parameter gradients of ``(out * up).sum()``,
    then the evaluation-mode output (running statistics updated once)."""
    model.train()
    model.zero_grad()
    out = model(x, edge_index)
    (out * up).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.eval()
    with torch.no_grad():
        evaluated = model(x, edge_index)
    return {"out": out.detach(), "grads": grads, "eval": evaluated}


def reference_training(data, classes, options, state):
    """Plain single-process training with labels as input: each epoch the
    split ``LabelInput.shown`` draws on the whole graph (ids 0..N-1), the
    loss on the other training nodes; evaluation reads every training label."""
    torch.manual_seed(0)
    model = Reference(data.num_features, classes, label_input=True, **options)
    model.load_state_dict(state)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    labels, ids, losses = LabelInput(classes), torch.arange(data.num_nodes), []
    for epoch in range(1, EPOCHS + 1):
        shown = labels.shown(ids, data.train_mask, epoch)
        model.train()
        optimizer.zero_grad()
        out = model(with_labels(data, classes, shown), data.edge_index)
        target = data.train_mask & ~shown
        loss = F.cross_entropy(out[target], data.y[target])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        evaluated = model(with_labels(data, classes, data.train_mask), data.edge_index)
    return {"state": model.state_dict(), "losses": losses, "eval": evaluated}


def battery(dirs, specs):
    """Runs on every rank: every option's forward and backward, the label
    splits, and training with labels as input, per cut."""
    import torch.distributed as dist

    out = {}
    for key, path in dirs.items():
        graph = key.split("-")[0]
        data = pyg_dist.DistData.load(path)
        classes = data.meta.num_classes
        res = {"global_id": data.global_id}
        up = upstream(data.meta.num_nodes, classes)[data.global_id]
        for name, options in OPTIONS.items():
            model = GNN(options.get("kind", "sage"), data.x.size(1), HIDDEN, classes,
                        dropout=0.0, **{k: v for k, v in options.items() if k != "kind"})
            model.load_state_dict(specs[graph, name])
            x = data.x
            if model.label_input is not None:
                x = LabelTask(data, model.label_input).inputs[0]
            res[name] = forward_backward(model, x, data.edge_index, up)
            for grad in res[name]["grads"].values():
                dist.all_reduce(grad)
        task = LabelTask(data, LabelInput(classes))
        res["shown"] = [task.train_mask & ~task.for_epoch(e).train_mask
                        for e in range(1, EPOCHS + 1)]
        res["columns"] = [task.for_epoch(e).inputs[0][:, data.x.size(1):]
                          for e in range(1, EPOCHS + 1)]
        res["eval_columns"] = task.inputs[0][:, data.x.size(1):]
        for name, (options, on) in LABEL_RUNS.items():
            if graph not in on:
                continue
            part = pyg_dist.DistData.load(path)
            model = GNN("sage", part.x.size(1), HIDDEN, classes, dropout=0.0,
                        label_input=True, **options)
            model.load_state_dict(specs[graph, name])
            result = train(model, part, EPOCHS, optimizer=Adam(lr=LR, weight_decay=WEIGHT_DECAY),
                           progress=False)
            model.eval()
            with torch.no_grad():
                evaluated = model(LabelTask(part, model.label_input).inputs[0], part.edge_index)
            res[f"train-{name}"] = {"state": model.state_dict(), "eval": evaluated,
                                    "losses": [e.loss for e in result.history]}
        try:
            train(GNN("sage", data.x.size(1), HIDDEN, classes, label_input=True), data, 1,
                  strategy=GradientOnly(), progress=False)
        except ValueError as exc:
            res["refused"] = str(exc)
        out[key] = res
    return out


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    return {"awkward": awkward_graph(num_features=5), "cora": cora(tmp_path_factory.mktemp("c"))}


@pytest.fixture(scope="module")
def references(graphs):
    """Per (graph, option): the model's initial state and the reference's
    results; per (graph, label run): the initial state and the reference
    training's results (``trained``)."""
    refs = {}
    for graph, data in graphs.items():
        classes = int(data.y.max()) + 1
        up = upstream(data.num_nodes, classes)
        for name, options in OPTIONS.items():
            torch.manual_seed(len(name))
            ref = Reference(data.num_features, classes, **options)
            x = data.x
            if options.get("label_input"):
                x = with_labels(data, classes, data.train_mask)
            refs[graph, name] = {"state": {k: v.clone() for k, v in ref.state_dict().items()},
                                 **forward_backward(ref, x, data.edge_index, up)}
        for name, (options, on) in LABEL_RUNS.items():
            if graph not in on:
                continue
            torch.manual_seed(len(name))
            state = Reference(data.num_features, classes, label_input=True,
                              **options).state_dict()
            refs[graph, name] = {"state": state,
                                 "trained": reference_training(data, classes, options, state)}
    return refs


@pytest.fixture(scope="module")
def runs(graphs, references, tmp_path_factory):
    cache = {}

    def get(world_size):
        if world_size not in cache:
            root = tmp_path_factory.mktemp(f"recipes{world_size}")
            dirs = {}
            for key, method in CUTS.items():
                dirs[key] = str(root / key)
                pyg_dist.partition(graphs[key.split("-")[0]], world_size, dirs[key],
                                   method=method, seed=11)
            specs = {k: ref["state"] for k, ref in references.items()}
            cache[world_size] = pyg_dist.launch(battery, world_size, args=(dirs, specs),
                                                timeout=600)
        return cache[world_size]

    return get


def gathered(per_rank, key, rows, num_nodes):
    """Per-rank rows (``rows(result)``) in whole-graph order."""
    first = rows(per_rank[0][key])
    full = first.new_zeros((num_nodes, *first.shape[1:]))
    for res in per_rank:
        full[res[key]["global_id"]] = rows(res[key])
    return full


def test_options_equal_the_pyg_structure_in_one_process(graphs, references):
    """GNN on a plain edge_index against the reference written here."""
    data = graphs["awkward"]
    classes = int(data.y.max()) + 1
    up = upstream(data.num_nodes, classes)
    for name, options in OPTIONS.items():
        model = GNN(options.get("kind", "sage"), data.num_features, HIDDEN, classes,
                    dropout=0.0, **{k: v for k, v in options.items() if k != "kind"})
        model.load_state_dict(references["awkward", name]["state"])
        x = with_labels(data, classes, data.train_mask) if model.label_input else data.x
        ours, ref = forward_backward(model, x, data.edge_index, up), references["awkward", name]
        assert_close(ours["out"], ref["out"], what=f"{name}: output")
        assert_close(ours["eval"], ref["eval"], what=f"{name}: evaluation output")
        assert ours["grads"].keys() == ref["grads"].keys()
        for param, grad in ref["grads"].items():
            if not before_batch_norm(param, options):
                assert_close(ours["grads"][param], grad, what=f"{name}: gradient of {param}")


def test_norm_and_jk_equal_pyg_graphsage(graphs):
    """PyG's own GraphSAGE with batch norm and a concatenating JK head (its
    batch norm wraps torch's under ``module``)."""
    data = graphs["cora"]
    classes = int(data.y.max()) + 1
    torch.manual_seed(3)
    theirs = GraphSAGE(data.num_features, HIDDEN, 3, classes, norm="batch_norm", jk="cat")
    ours = GNN("sage", data.num_features, HIDDEN, classes, layers=3, dropout=0.0, norm="batch",
               jk="cat")
    ours.load_state_dict({k.replace(".module.", "."): v for k, v in theirs.state_dict().items()})
    up = upstream(data.num_nodes, classes)
    a = forward_backward(ours, data.x, data.edge_index, up)
    b = forward_backward(theirs, data.x, data.edge_index, up)
    assert_close(a["out"], b["out"], what="output")
    assert_close(a["eval"], b["eval"], what="evaluation output")
    for name, grad in b["grads"].items():
        name = name.replace(".module.", ".")
        if not before_batch_norm(name, {"norm": "batch", "jk": "cat", "layers": 3}):
            assert_close(a["grads"][name], grad, what=f"gradient of {name}")


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("key", list(CUTS))
def test_options_equal_pyg_on_the_whole_graph(runs, references, graphs, world_size, key):
    per_rank = runs(world_size)
    graph = key.split("-")[0]
    num_nodes = graphs[graph].num_nodes
    for name in OPTIONS:
        ref, what = references[graph, name], f"{name} on {key}, {world_size} ranks"
        for field in ("out", "eval"):
            assert_close(gathered(per_rank, key, lambda r, f=field, n=name: r[n][f], num_nodes),
                         ref[field], what=f"{what}: {field}")
        for res in per_rank:
            for param, grad in ref["grads"].items():
                if not before_batch_norm(param, OPTIONS[name]):
                    assert_close(res[key][name]["grads"][param], grad,
                                 what=f"{what}: gradient of {param}")


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("key", list(CUTS))
def test_label_splits_are_the_single_process_splits(runs, graphs, world_size, key):
    """Every cut shows the labels of the training nodes one process shows,
    epoch by epoch; evaluation shows every training label."""
    per_rank = runs(world_size)
    data = graphs[key.split("-")[0]]
    classes = int(data.y.max()) + 1
    labels, ids = LabelInput(classes), torch.arange(data.num_nodes)
    for epoch in range(1, EPOCHS + 1):
        shown = labels.shown(ids, data.train_mask, epoch)
        got = gathered(per_rank, key, lambda r, e=epoch: r["shown"][e - 1], data.num_nodes)
        differ = int((got != shown).sum())
        assert differ == 0, (f"epoch {epoch} on {key}, {world_size} ranks: {differ} of "
                             f"{int(data.train_mask.sum())} training nodes split otherwise")
        columns = gathered(per_rank, key, lambda r, e=epoch: r["columns"][e - 1],
                           data.num_nodes)
        assert torch.equal(columns, with_labels(data, classes, shown)[:, data.num_features:])
    assert torch.equal(gathered(per_rank, key, lambda r: r["eval_columns"], data.num_nodes),
                       with_labels(data, classes, data.train_mask)[:, data.num_features:])


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("key", list(CUTS))
def test_training_with_labels_as_input_equals_single_process(runs, references, graphs,
                                                             world_size, key):
    per_rank = runs(world_size)
    graph = key.split("-")[0]
    for name, (_, on) in LABEL_RUNS.items():
        if graph not in on:
            continue
        ref, what = references[graph, name]["trained"], f"{name} on {key}, {world_size} ranks"
        for res in per_rank:
            ours = res[key][f"train-{name}"]
            for param, value in ref["state"].items():
                if not before_batch_norm(param, LABEL_RUNS[name][0]):
                    assert_close(ours["state"][param].float(), value.float(),
                                 what=f"{what}: {param} after {EPOCHS} epochs")
            assert ours["losses"] == pytest.approx(ref["losses"], rel=1e-5), what
        assert_close(gathered(per_rank, key, lambda r, n=name: r[f"train-{n}"]["eval"],
                              graphs[graph].num_nodes), ref["eval"],
                     what=f"{what}: evaluation output")


def test_strategies_without_label_inputs_refuse_them(runs):
    refused = runs(2)[0]["awkward-metis"]["refused"]
    assert refused.startswith("GradientOnly(") and refused.endswith(
        "cannot train a model that reads labels as input: its steps read the graph's features "
        "alone; train it with strategy=GraphParallel(halo=...) (CLI: --strategy "
        "graph-parallel)"), refused
