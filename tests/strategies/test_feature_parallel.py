"""Feature-parallel training (``FeatureParallel``) against single-process PyG
on the whole graph: every grid of parts × feature slices on 2, 3 and 4 real
gloo ranks, GCN with and without edge weights, SAGE with mean and sum (and a
projected, normalised one), GIN, GraphConv on the generic path and PyG's
GCN with batch norm; METIS and random cuts of a directed graph with
self-loops, duplicates and isolated nodes; dropout on. Outputs, parameter
gradients and norm statistics; three training steps end with PyG's weights;
the planner's bytes are the ledger's; halo policies apply per slice. Layer
0's aggregate of the features, kept after the first step where nothing
random comes before it, gives every step's outputs and gradients of one
process, and is made again when the features change in place; with input
dropout it is moved every step.

One rank battery per world size (tests/worlds.py) runs every case (the test
process builds the references); the checks that need no ranks run in this
process, the command line's in subprocesses."""
import dataclasses
import functools
import json

import pytest
import torch
import torch.nn.functional as F
from command_line import json_lines
from graphs import awkward_graph
from tolerances import assert_close
from torch_geometric.nn import GraphConv, SAGEConv
from torch_geometric.nn.models import GCN, GraphSAGE
from torch_geometric.nn.models.basic_gnn import BasicGNN
from worlds import Battery

import pyg_dist
from pyg_dist.config import Adam, FeatureParallel, GradSync
from pyg_dist.datasets import write_graph_folder
from pyg_dist.halo.compress import CODECS
from pyg_dist.models import GNN
from pyg_dist.nn import DistSAGEConv, to_distributed
from pyg_dist.partitioning import io
from pyg_dist.strategies import Settings, planner
from pyg_dist.strategies.feature_parallel import (
    AGGREGATE_FIRST,
    COLUMNS,
    RUNS,
    TRANSFORM_FIRST,
    FeatureParallelModel,
    choose_orders,
    compile_model,
    load_grid,
    loss_on_columns,
)
from pyg_dist.strategies.feature_parallel.model import _Value
from pyg_dist.train import train

#: Grids (parts, slices) per world size: every one whose product is the world.
GRIDS = {2: [(2, 1), (1, 2)], 3: [(3, 1), (1, 3)], 4: [(4, 1), (2, 2), (1, 4)]}
F_IN, HIDDEN, CLASSES = 7, 6, 3  # 3 classes on 4 slices: one slice has no column
LOSS_CLASSES = 10  # more than twice the slices of any grid: a loss on the columns pays
P_DROP = 0.5
SEED = 4242  # the shared dropout seed, set on every rank
EPOCHS = 3
CUTS = ("metis", "random")


def graph():
    data = awkward_graph(num_features=F_IN)
    return data


def model_of(name):
    """A fresh model of case ``name`` (seeded) and whether it takes edge weights."""
    torch.manual_seed(sum(map(ord, name)))
    if name in ("gcn", "gcn-weighted"):
        return GNN("gcn", F_IN, HIDDEN, CLASSES, dropout=P_DROP), name == "gcn-weighted"
    if name in ("sage-mean", "sage-sum"):
        return GNN("sage", F_IN, HIDDEN, CLASSES, dropout=P_DROP, aggr=name[5:]), False
    if name == "gin":
        return GNN("gin", F_IN, HIDDEN, CLASSES, dropout=P_DROP), False
    if name == "sage-project":
        return DistSAGEConv(F_IN, CLASSES, aggr="mean", project=True, normalize=True), False
    if name == "graphconv":
        return to_distributed(GraphConv(F_IN, CLASSES, aggr="mean")), True
    if name == "gcn-late":  # dropout after layer 0 only: layer 0's aggregate is static
        return to_distributed(GCN(F_IN, HIDDEN, 2, CLASSES, dropout=P_DROP)), False
    if name == "gcn-no-input-dropout":
        return GNN("gcn", F_IN, HIDDEN, CLASSES, dropout=P_DROP, input_dropout=0.0), False
    if name == "gcn-classes":  # layer 1 narrows to more classes than twice the slices
        return GNN("gcn", F_IN, 4 * LOSS_CLASSES, LOSS_CLASSES, dropout=P_DROP), False
    if name == "sage-late":
        return to_distributed(GraphSAGE(F_IN, HIDDEN, 2, CLASSES, dropout=P_DROP)), False
    assert name == "gcn-batchnorm"
    return to_distributed(GCN(F_IN, HIDDEN, 2, CLASSES, norm="batch_norm")), False


CASES = ["gcn", "gcn-weighted", "sage-mean", "sage-sum", "gin", "sage-project", "graphconv",
         "gcn-batchnorm", "gcn-late"]
#: Runs of several steps: (case, the step before which every rank doubles its
#: features in place, or None). "kept": layer 0 aggregates the unchanged
#: features (its aggregate kept after step 0); "dropped": input dropout.
#: The cases trained with train() on every grid.
TRAIN_CASES = ("gcn", "gcn-late", "gcn-classes")
STEP_CASES = {"kept": ("gcn-late", None), "kept-sage": ("sage-late", None),
              "kept-gnn": ("gcn-no-input-dropout", None), "changed": ("gcn-late", 1),
              "dropped": ("gcn", None)}


M32 = 0xFFFFFFFF


def _lowbias32(h):
    """Wellons' lowbias32 on a Python integer below 2**32."""
    h ^= h >> 16
    h = (h * 0x7FEB352D) & M32
    h ^= h >> 15
    h = (h * 0x846CA68B) & M32
    return h ^ (h >> 16)


def keep_reference(ids, width, seed, call, p, columns=None):
    """The documented dropout hash (pyg_dist.utils.hashing), in Python
    integers: the call's key lowbias32((seed * 0x9E3779B1 + call) mod 2**32),
    a row's key lowbias32((v * 0x85EBCA6B + key) mod 2**32), a column's
    lowbias32((f * 0xC2B2AE35 + key) mod 2**32), an entry's hash the
    multiply-xorshift steps of a lowbias32 round on their xor, read as int32;
    the entry survives when that lies above the lowest fraction p of its range."""
    key = _lowbias32((seed * 0x9E3779B1 + call) & M32)
    columns = list(range(width)) if columns is None else list(columns)
    cols = [_lowbias32((f * 0xC2B2AE35 + key) & M32) for f in columns]
    out = []
    for v in ids:
        row = _lowbias32((int(v) * 0x85EBCA6B + key) & M32)
        line = []
        for c in cols:
            h = ((row ^ c) * 0x7FEB352D) & M32
            h ^= h >> 15
            h = (h * 0x846CA68B) & M32
            h ^= h >> 16
            line.append((h - 2**32 if h >= 2**31 else h) >= int(p * 2**32) - 2**31)
        out.append(line)
    return torch.tensor(out, dtype=torch.bool).view(len(ids), len(columns))


def masks(num_nodes, width, call):
    """The shared dropout scale of call ``call`` on the whole graph."""
    keep = keep_reference(range(num_nodes), width, SEED, call, P_DROP)
    return keep * (1.0 / (1.0 - P_DROP))


def gnn_dropouts(model):
    """GNN's dropout probability before each layer."""
    return [model.input_dropout if k == 0 else model.dropout for k in range(len(model.convs))]


def dropout_calls(model):
    """Dropout draws per forward pass of ``model``."""
    if isinstance(model, GNN):
        return sum(p > 0 for p in gnn_dropouts(model))
    if isinstance(model, BasicGNN):
        return model.num_layers - 1 if model.dropout.p > 0 else 0
    return 0


def reference_forward(model, data, weighted, first_call=0):
    """The model on the whole graph as PyG runs it (Dist layers on a plain
    edge_index are PyG's), GNN's and BasicGNN's dropout drawing the shared masks."""
    weight = data.edge_weight if weighted else None
    if isinstance(model, BasicGNN) and model.dropout.p > 0:
        x = data.x
        for k, conv in enumerate(model.convs):
            x = conv(x, data.edge_index)
            if k < model.num_layers - 1:
                x = model.act(x)
                if model.training:
                    x = x * masks(data.num_nodes, x.size(1), first_call + k)
        return x
    if not isinstance(model, GNN):
        if weight is not None:
            return model(data.x, data.edge_index, edge_weight=weight)
        return model(data.x, data.edge_index)
    x, call = data.x, first_call
    for k, conv in enumerate(model.convs):
        if model.training and gnn_dropouts(model)[k] > 0:
            x = x * masks(data.num_nodes, x.size(1), call)
            call += 1
        x = conv(x, data.edge_index) if weight is None else conv(x, data.edge_index, weight)
        if k < len(model.convs) - 1:
            x = x.relu()
    return x


def upstream(num_nodes):
    return torch.randn(num_nodes, CLASSES, generator=torch.Generator().manual_seed(5))


def reference_run(data, name):
    """Case ``name`` on the whole graph: its initial state, output, parameter
    gradients and buffers."""
    model, weighted = model_of(name)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    result = reference_forward(model, data, weighted)
    (result * upstream(data.num_nodes)).sum().backward()
    return {"state": state, "out": result.detach(),
            "grads": {n: p.grad.clone() for n, p in model.named_parameters()},
            "buffers": {n: b.clone() for n, b in model.named_buffers()}}


@functools.cache
def whole_graph():
    """The graph and every case's reference (for the batteries and the tests)."""
    data = graph()
    return data, {name: reference_run(data, name) for name in CASES}


@pytest.fixture(scope="module")
def data():
    return whole_graph()[0]


@pytest.fixture(scope="module")
def references():
    return whole_graph()[1]


def reference_training(data, state, name="gcn"):
    """Three steps of plain single-process training of case ``name`` with
    the shared masks and Adam: the weights after each step."""
    model, _ = model_of(name)
    model.load_state_dict(state)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    calls = dropout_calls(model)
    for epoch in range(EPOCHS):
        model.train()
        optimizer.zero_grad()
        out = reference_forward(model, data, False, first_call=calls * epoch)
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def reference_steps(data, name, changed_at):
    """Case ``name`` trained ``EPOCHS`` steps on the whole graph (Adam, the
    upstream gradient of :func:`upstream`), the features doubled before step
    ``changed_at``: each step's output and gradients, the output in
    evaluation after them, the final weights."""
    model, _ = model_of(name)  # seeded: the ranks' initial state
    data = data.clone()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    calls, steps = dropout_calls(model), []
    for epoch in range(EPOCHS):
        if epoch == changed_at:
            data.x = data.x * 2
        model.train()
        optimizer.zero_grad()
        out = reference_forward(model, data, False, first_call=calls * epoch)
        (out * upstream(data.num_nodes)).sum().backward()
        steps.append({"out": out.detach(),
                      "grads": {n: p.grad.clone() for n, p in model.named_parameters()}})
        optimizer.step()
    model.eval()
    with torch.no_grad():
        evaluated = reference_forward(model, data, False)
    return {"steps": steps, "eval": evaluated,
            "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}


# -- the ranks ------------------------------------------------------------------------------

def run_case(folder, slices, name, state, num_nodes, **load):
    """One case on this rank: output rows, gradients summed over the grid,
    buffers, the ledger's totals."""
    data = load_grid(folder, slices, **load)
    data.edge_index.registry.dropout.seed = SEED
    model, weighted = model_of(name)
    model.load_state_dict(state)
    net = FeatureParallelModel(model, data)
    model.train()
    out = net(data.edge_weight if weighted else None)
    (out * upstream(num_nodes)[data.row_global_id]).sum().backward()
    net.sum_gradients()
    return {"rows": data.row_global_id.clone(), "out": out.detach(),
            "grads": {n: p.grad.clone() if p.grad is not None else torch.zeros_like(p)
                      for n, p in model.named_parameters()},
            "buffers": {n: b.clone() for n, b in model.named_buffers()},
            "orders": net.orders, "ledger": data.ledger.entries}


def steps_case(folder, slices, name, state, num_nodes, changed_at):
    """``EPOCHS`` steps of case ``name`` on this rank (as
    :func:`reference_steps`; the features doubled in place before step
    ``changed_at``), then the output in evaluation: each step's output
    rows and gradients summed over the grid, the final weights and the
    ledger's entries (one step per training step; evaluation's after them)."""
    data = load_grid(folder, slices)
    data.edge_index.registry.dropout.seed = SEED
    model, _ = model_of(name)
    model.load_state_dict(state)
    net = FeatureParallelModel(model, data)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    steps = []
    for epoch in range(EPOCHS):
        if epoch == changed_at:
            data.x.mul_(2)
        model.train()
        optimizer.zero_grad()
        out = net()
        (out * upstream(num_nodes)[data.row_global_id]).sum().backward()
        net.sum_gradients()
        steps.append({"out": out.detach(),
                      "grads": {n: p.grad.clone() for n, p in model.named_parameters()}})
        optimizer.step()
        data.ledger.next_step()
    model.eval()
    with torch.no_grad():
        evaluated = net()
    return {"rows": data.row_global_id.clone(), "steps": steps, "eval": evaluated,
            "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "ledger": {k: e.bytes_sent for k, e in data.ledger.entries.items()}}


def train_case(folder, slices, state, name="gcn"):
    """Three epochs of train() on the grid; the final weights and the
    exchanges training booked (layer, direction)."""
    data = load_grid(folder, slices)
    data.edge_index.registry.dropout.seed = SEED
    model, _ = model_of(name)
    model.load_state_dict(state)
    train(model, data, EPOCHS, strategy=FeatureParallel(slices=slices), progress=False,
          optimizer=Adam(lr=0.01, weight_decay=5e-4))
    return {"state": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "booked": {(name, way) for (_, name, way), e in data.ledger.entries.items()
                       if e.bytes_sent > 0},
            "orders": FeatureParallelModel(model, data).orders}


def whole_logits(num_nodes):
    return torch.randn(num_nodes, LOSS_CLASSES, generator=torch.Generator().manual_seed(7))


def loss_case(folder, slices, num_nodes):
    """The training loss of logits left on the columns (the whole graph's
    :func:`whole_logits`, this rank's columns of its part's rows): the
    loss, this rank's columns' gradient, and what it booked."""
    data = load_grid(folder, slices)
    net = FeatureParallelModel(model_of("gcn")[0], data)
    lo, hi = data.grid.bounds(LOSS_CLASSES)
    z = whole_logits(num_nodes)[data.global_id, lo:hi].clone().requires_grad_()
    for _ in range(2):  # the labels are gathered at the first call only
        z.grad = None
        loss, value = net.loss(_Value({COLUMNS: z}, LOSS_CLASSES), data.y, data.train_mask)
        loss.backward()
        data.ledger.next_step()
    return {"value": value, "grad": z.grad, "ids": data.global_id, "columns": (lo, hi),
            "ledger": {k: e.bytes_sent for k, e in data.ledger.entries.items()},
            "part_rows": int(data.global_id.numel())}


def planned_bytes(folder, state, epochs, name="gcn"):
    """The planner's probe on the graph-parallel part of ``folder``, every
    grid's predicted bytes, and what training each grid from that part booked."""
    part = pyg_dist.DistData.load(folder)
    model, _ = model_of(name)
    model.load_state_dict(state)
    probe = planner.probe(model, part, steps=1)
    rows = {c.strategy.slices: c.bytes for c in FeatureParallel.candidates(probe, epochs)}
    labels = [c.label for c in planner.predict(probe, epochs)]
    booked = {}
    for slices in rows:
        model.load_state_dict(state)
        result = train(model, part, epochs, strategy=FeatureParallel(slices=slices),
                       progress=False)
        booked[slices] = int(sum(e.halo_bytes_fwd + e.halo_bytes_bwd + e.grad_bytes
                                 + e.all_to_all_bytes for e in result.history))
    return rows, booked, labels


def battery(folders, states, world):
    """Every case of every grid and cut, the training runs and (4 ranks) the
    planner's bytes and a compressed halo."""
    out = {}
    for parts, slices in GRIDS[world]:
        for cut in CUTS:
            for name in CASES:
                out[parts, slices, cut, name] = run_case(folders[cut, parts], slices, name,
                                                         states[name], folders["num_nodes"])
        if parts == 1:  # a graph folder: no partitioning
            out[parts, slices, "folder", "gcn"] = run_case(folders["graph"], slices, "gcn",
                                                           states["gcn"], folders["num_nodes"])
        if parts > 1:
            out[parts, slices, "covered", "gcn"] = run_case(
                folders["metis", parts], slices, "gcn", states["gcn"], folders["num_nodes"],
                pre_aggregate=True)
        for name in TRAIN_CASES:
            out[parts, slices, "train", name] = train_case(folders["metis", parts], slices,
                                                           states[name], name)
        out[parts, slices, "loss"] = loss_case(folders["random", world], slices,
                                               folders["num_nodes"])
        for case, (name, changed_at) in STEP_CASES.items():
            out[parts, slices, "steps", case] = steps_case(
                folders["metis", parts], slices, name, states[name], folders["num_nodes"],
                changed_at)
    if world == 4:
        out["plan"] = planned_bytes(folders["random", world], states["gcn"], EPOCHS)
        for name in ("gcn-late", "gcn-classes"):
            out["plan", name] = planned_bytes(folders["random", world], states[name], EPOCHS,
                                              name)
        out["int8"] = run_case(folders["metis", 2], 2, "gcn", states["gcn"],
                               folders["num_nodes"], halo="exact,compress=int8")
    return out


def prepare(world, root):
    """The folders every grid of ``world`` ranks reads: METIS folders with
    the grid's parts; one random folder with the world's parts, merged into
    the grid's (one folder serves every grid); a graph folder."""
    data, references = whole_graph()
    folders = {"num_nodes": data.num_nodes}
    states = {name: model_of(name)[0].state_dict()
              for name in ("sage-late", "gcn-no-input-dropout", "gcn-classes")}
    for parts in {p for p, _ in GRIDS[world]}:
        folders["metis", parts] = root / f"metis{parts}"
        pyg_dist.partition(data, parts, folders["metis", parts], method="metis", seed=3)
        folders["random", parts] = root / "random"
    pyg_dist.partition(data, world, root / "random", method="random", seed=3)
    write_graph_folder(data, root / "graph")
    folders["graph"] = root / "graph"
    states.update({name: ref["state"] for name, ref in references.items()})
    return (folders, states, world), None


BATTERIES = {world: Battery(world, battery, functools.partial(prepare, world), timeout=1500)
        for world in GRIDS}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    yield lambda world: BATTERIES[world].results(tmp_path_factory)[1]
    for world_battery in BATTERIES.values():
        world_battery.release()


def assemble(pieces, num_nodes):
    """The whole graph's rows from every rank's ``(rows, out)``."""
    full = pieces[0][1].new_full((num_nodes, pieces[0][1].size(1)), float("nan"))
    for rows, out in pieces:
        full[rows] = out
    return full


def gather(per_rank, key, num_nodes):
    return assemble([(r[key]["rows"], r[key]["out"]) for r in per_rank], num_nodes)


@pytest.mark.parametrize("world", sorted(GRIDS))
def test_every_grid_equals_pyg_on_the_whole_graph(runs, references, data, world):
    per_rank = runs(world)
    checked = 0
    for parts, slices in GRIDS[world]:
        for cut in (*CUTS, "folder", "covered"):
            for name in CASES:
                key = (parts, slices, cut, name)
                if key not in per_rank[0]:
                    continue
                ref, what = references[name], f"{name} on {parts}x{slices} ({cut})"
                assert_close(gather(per_rank, key, data.num_nodes), ref["out"],
                             what=f"{what}: output")
                for param, grad in ref["grads"].items():
                    for r in range(world):
                        assert_close(per_rank[r][key]["grads"][param], grad,
                                     what=f"{what}: gradient of {param} on rank {r}")
                for buffer, value in ref["buffers"].items():
                    for r in range(world):
                        assert_close(per_rank[r][key]["buffers"][buffer].float(),
                                     value.float(), what=f"{what}: {buffer} on rank {r}")
                checked += 1
    grids = len(GRIDS[world])
    assert checked == grids * 2 * len(CASES) + 1 + sum(p > 1 for p, _ in GRIDS[world])


@pytest.mark.parametrize("world", sorted(GRIDS))
@pytest.mark.parametrize("case", TRAIN_CASES)
def test_training_ends_with_the_weights_of_one_process(runs, data, world, case):
    """train() for ``EPOCHS`` epochs (an evaluation after each step): with
    input dropout ("gcn"), with layer 0's aggregate kept ("gcn-late"), and
    with the loss on the columns ("gcn-classes", on every grid of several
    slices)."""
    expected = reference_training(data, model_of(case)[0].state_dict(), case)
    classes = LOSS_CLASSES if case == "gcn-classes" else CLASSES
    per_rank = runs(world)
    on_columns = 0
    for parts, slices in GRIDS[world]:
        for r in range(world):
            state, booked, orders = per_rank[r][parts, slices, "train", case].values()
            # where layer 1 leaves the logits on the columns, the loss is taken
            # there when it moves less than the logits (more classes than 2 T)
            left = slices > 1 and orders[-1] == TRANSFORM_FIRST
            columns = left and loss_on_columns(classes, slices)
            assert (("logits/loss", "all_to_all") in booked) == columns, (orders, booked)
            assert (("logits/rows", "all_to_all") in booked) == (left and not columns), booked
            on_columns += columns
            for name, value in expected.items():
                assert_close(state[name], value, what=f"{case}: {name} after {EPOCHS} steps "
                                                      f"on {parts}x{slices}, rank {r}")
    if case == "gcn-classes":
        assert on_columns == sum(parts * slices for parts, slices in GRIDS[world] if slices > 1)


@pytest.mark.parametrize("world", sorted(GRIDS))
def test_a_loss_on_the_columns_is_the_loss_on_the_rows(runs, data, world):
    """Logits left on the columns: the loss and its gradient of every
    rank's columns are the whole graph's (rows outside the training mask
    included, their gradient zero). Two values per part row cross per step;
    the labels cross at the first step only. One slice: the rows' loss."""
    logits = whole_logits(data.num_nodes).requires_grad_()
    loss = F.cross_entropy(logits[data.train_mask], data.y[data.train_mask])
    loss.backward()
    for parts, slices in GRIDS[world]:
        for r, result in enumerate(runs(world)):
            got, what = result[parts, slices, "loss"], f"{parts}x{slices}, rank {r}"
            assert got["value"] == pytest.approx(float(loss.detach()), rel=1e-6), what
            lo, hi = got["columns"]
            assert_close(got["grad"], logits.grad[got["ids"], lo:hi], what=f"{what}: gradient")
            booked = {(step, name): sent for (step, name, _), sent in got["ledger"].items()}
            statistics = 2 * 4 * got["part_rows"] if slices > 1 else 0
            assert booked.get((0, "logits/loss"), 0) == statistics, what
            assert booked.get((1, "logits/loss"), 0) == statistics, what
            assert (booked.get((0, "logits/labels"), 0) > 0) == (slices > 1), what
            assert (1, "logits/labels") not in booked, what


def moved_at(per_rank, result_key, layer, direction):
    """The steps at which any rank booked bytes of ``layer`` in ``direction``."""
    return {step for result in per_rank
            for (step, name, way), sent in result[result_key]["ledger"].items()
            if name == layer and way == direction and sent > 0}


@pytest.mark.parametrize("world", sorted(GRIDS))
@pytest.mark.parametrize("case", sorted(STEP_CASES))
def test_a_kept_aggregate_gives_every_step_of_one_process(runs, data, world, case):
    """Every step's output and gradients, the output in evaluation after
    them and the final weights equal one process's. Layer 0's aggregate of
    the features is moved to the rows (and, with several parts, its halo
    exchanged) at step 0 only when nothing random comes before layer 0
    ("kept", "kept-sage"), again at the step the features change in place
    ("changed"), and at every step under input dropout ("dropped": the
    features' halo is kept, exchanged at steps 0 and 1); evaluation
    aggregates nothing again where training kept the aggregate, and once
    where it did not."""
    name, changed_at = STEP_CASES[case]
    expected = reference_steps(data, name, changed_at)
    per_rank = runs(world)
    for parts, slices in GRIDS[world]:
        key, what = (parts, slices, "steps", case), f"{case} on {parts}x{slices}"
        for step, reference in enumerate(expected["steps"]):
            got = [(r[key]["rows"], r[key]["steps"][step]["out"]) for r in per_rank]
            assert_close(assemble(got, data.num_nodes), reference["out"],
                         what=f"{what}: output of step {step}")
            for param, grad in reference["grads"].items():
                for r in range(world):
                    assert_close(per_rank[r][key]["steps"][step]["grads"][param], grad,
                                 what=f"{what}: gradient of {param} at step {step}, rank {r}")
        evaluated = [(r[key]["rows"], r[key]["eval"]) for r in per_rank]
        assert_close(assemble(evaluated, data.num_nodes), expected["eval"],
                     what=f"{what}: output in evaluation")
        for r in range(world):
            for param, value in expected["state"].items():
                assert_close(per_rank[r][key]["state"][param], value,
                             what=f"{what}: {param} after {EPOCHS} steps, rank {r}")
        every = set(range(EPOCHS))
        made = {"kept": {0}, "kept-sage": {0}, "kept-gnn": {0}, "changed": {0, changed_at},
                "dropped": every}
        halo = {**made, "dropped": {0, 1}}
        assert moved_at(per_rank, key, "convs.0/rows", "all_to_all") == (
            made[case] if slices > 1 else set()), what
        assert moved_at(per_rank, key, "convs.0", "fwd") == (
            halo[case] if parts > 1 else set()), what
        evaluated_once = {EPOCHS} if case == "dropped" else set()  # else kept in training
        assert moved_at(per_rank, key, "convs.0/rows", "eval") == (
            evaluated_once if slices > 1 else set()), what
        assert moved_at(per_rank, key, "convs.0", "eval") == (
            evaluated_once if parts > 1 else set()), what


@pytest.mark.parametrize("case", ["gcn", "gcn-late", "gcn-classes"])
def test_the_planners_bytes_are_the_ledgers(runs, case):
    """Input dropout ("gcn": layer 0's aggregate moved every step), dropout
    after layer 0 ("gcn-late": layer 0's aggregate made once and kept, fewer
    bytes on every grid of several slices) and the loss on the columns
    ("gcn-classes": the labels once, two values per row each step)."""
    predicted, booked, labels = runs(4)[0]["plan" if case == "gcn" else ("plan", case)]
    assert sorted(predicted) == [1, 2, 4]
    assert predicted == booked
    assert {"feature-parallel 4x1", "feature-parallel 2x2", "feature-parallel 1x4"} <= set(labels)
    if case == "gcn-late":
        moved = runs(4)[0]["plan"][1]
        assert all(booked[t] < moved[t] for t in (2, 4)), (booked, moved)


def test_a_compressed_halo_carries_the_slice_and_the_all_to_all_stays_exact(runs):
    """Grid 2x2: layer 1 exchanges its transformed rows' slice (widths 1 and 2
    of 3) as int8 rows, as many as the exact run's float32 rows; the
    all-to-alls are booked apart and equal those of the exact run."""
    per_rank = runs(4)
    exact = [r[2, 2, "metis", "gcn"] for r in per_rank]
    for r, result in enumerate(per_rank):
        ledger = result["int8"]["ledger"]
        assert result["int8"]["orders"] == [AGGREGATE_FIRST, TRANSFORM_FIRST]
        width = (1, 2)[r % 2]
        plain = exact[r]["ledger"][0, "convs.1", "fwd"].bytes_sent
        rows = plain // (4 * width)
        assert rows > 0 and plain == rows * 4 * width
        assert ledger[0, "convs.1", "fwd"].bytes_sent == rows * CODECS["int8"].row_bytes(width)
        a2a = {k: e.bytes_sent for k, e in ledger.items() if k[2] == "all_to_all"}
        assert a2a == {k: e.bytes_sent for k, e in exact[r]["ledger"].items()
                       if k[2] == "all_to_all"}
        assert sum(a2a.values()) > 0


# -- without ranks --------------------------------------------------------------------------

@pytest.mark.parametrize("model", [
    GNN("gat", 4, 8, 3, heads=2),
    GNN("sage", 4, 8, 3, aggr="max"),
    DistSAGEConv(4, 3, aggr="lstm"),
    to_distributed(SAGEConv(4, 3, aggr="max")),
])
def test_layers_that_do_not_aggregate_linearly_are_refused_naming_those_that_run(model):
    with pytest.raises(ValueError) as error:
        compile_model(model, 4)
    assert RUNS in str(error.value)


def test_the_cli_refuses_models_naming_the_layers_that_run():
    with pytest.raises(ValueError) as error:
        FeatureParallel(slices=2).check_model("gat")
    assert str(error.value) == (f"--strategy feature-parallel trains --model gcn|sage|gin "
                                f"(it runs {RUNS}); got --model gat")
    with pytest.raises(ValueError, match="sums plain gradients"):
        FeatureParallel(slices=2).check_settings(Settings(5, GradSync("fp16")))
    with pytest.raises(ValueError, match="--slices 4 does not divide the 6 ranks"):
        FeatureParallel(slices=4).graph_parts(6)
    assert FeatureParallel(slices=3).graph_parts(6) == 2


@pytest.mark.parametrize("option", [{"norm": "batch"}, {"skip": True}, {"jk": "cat"},
                                    {"residual": True}])
def test_gnn_options_that_do_not_run_are_refused_naming_the_fix(option):
    with pytest.raises(ValueError) as error:
        compile_model(GNN("gcn", 4, 8, 3, **option), 4)
    assert str(error.value) == (
        "feature-parallel training runs GNN without residual connections, edge dropout, "
        "norms, linear skips and a jumping-knowledge head; set residual=False, "
        "edge_dropout=0, norm=None, skip=False, jk=None")


def test_gnn_input_dropout_is_its_own():
    """Dropout p before layer 0 is ``input_dropout`` (none at 0), ``dropout`` before the others."""
    def dropouts(model):
        return [op.p for op in compile_model(model, 4) if op.kind == "dropout"]

    assert dropouts(GNN("gcn", 4, 8, 3, dropout=0.5, input_dropout=0.0)) == [0.5]
    assert dropouts(GNN("gcn", 4, 8, 3, dropout=0.5, input_dropout=0.2)) == [0.2, 0.5]
    assert dropouts(GNN("gcn", 4, 8, 3, dropout=0.3)) == [0.3, 0.3]


def test_plain_pyg_layers_and_norms_are_asked_to_be_converted():
    with pytest.raises(ValueError, match="to_distributed"):
        compile_model(GraphConv(4, 3), 4)
    with pytest.raises(ValueError, match="to_distributed"):
        compile_model(GCN(4, 8, 2, 3, norm="batch_norm"), 4)


def test_a_slice_of_columns_draws_the_masks_of_its_columns():
    from pyg_dist.utils.dropout import _keep  # the code under test, against the reference

    ids = torch.arange(50) * 7
    whole = keep_reference(ids.tolist(), 10, seed=3, call=2, p=0.5)
    assert torch.equal(_keep(ids, 10, 3, 2, 0.5), whole)
    for lo, hi in ((0, 4), (4, 7), (7, 10)):
        assert torch.equal(_keep(ids, hi - lo, 3, 2, 0.5, torch.arange(lo, hi)), whole[:, lo:hi])


def test_orders_move_the_narrower_width():
    """Worked by hand, 2-layer GCN F -> 16 -> 8 with dropout, widths per row.
    One slice, the halo alone counts: graph parallel's rule (the static
    input's halo is kept: aggregate first; the hidden layer transforms first,
    8 both ways against 16). One part, the all-to-alls alone, F = 100:
    transforming layer 0 first moves 16 both ways (the input's rows are
    kept), 32; then layer 1 aggregates on the columns it got and moves 16
    both ways to the rows: 64 in all, against 100 forward for layer 0
    aggregating first (then at least 8 + 8 both ways). F = 20: 20 forward,
    then layer 1 transforms first, 8 both ways, and the loss on the
    columns (its statistics not weighed here): 36, against 64."""
    program = [op.spec() for op in compile_model(GNN("gcn", 100, 16, 8), 100)]
    assert choose_orders(program, 0.0, 500.0) == [AGGREGATE_FIRST, TRANSFORM_FIRST]
    assert choose_orders(program, 750.0, 0.0) == [TRANSFORM_FIRST, AGGREGATE_FIRST]
    narrow = [op.spec() for op in compile_model(GNN("gcn", 20, 16, 8), 20)]
    assert choose_orders(narrow, 750.0, 0.0) == [AGGREGATE_FIRST, TRANSFORM_FIRST]


def test_column_slices_are_read_a_block_of_rows_at_a_time(data, tmp_path, monkeypatch):
    pyg_dist.partition(data, 2, tmp_path / "parts")
    meta = io.read_meta(tmp_path / "parts")
    reads = []
    original = io.torch.frombuffer

    def counted(buffer, dtype):
        reads.append(len(buffer))
        return original(buffer, dtype=dtype)

    monkeypatch.setattr(io, "COLUMN_CHUNK_BYTES", 3 * F_IN * 4)
    monkeypatch.setattr(io.torch, "frombuffer", counted)
    for p in range(2):
        x = io.read_part(tmp_path / "parts", p, meta)["node"]["x"]
        for lo, hi in ((0, F_IN), (2, 5), (6, 7), (3, 3)):
            reads.clear()
            got = io.read_part_columns(tmp_path / "parts", p, "x", lo, hi)
            assert torch.equal(got, x[:, lo:hi])
            assert max(reads) <= 3 * F_IN * 4 and sum(reads) == x.numel() * 4


def test_options_read_back_from_configs():
    strategy = FeatureParallel(slices=4, halo="stale:2", pre_aggregate=True)
    assert FeatureParallel.from_dict(strategy.to_dict()) == strategy
    assert dataclasses.asdict(strategy)["slices"] == 4
    with pytest.raises(ValueError, match=r"FeatureParallel\(slices=0\)"):
        FeatureParallel(slices=0)


# -- the command line -----------------------------------------------------------------------

def test_the_cli_trains_a_grid_as_one_process_trains_the_whole_graph(tmp_path):
    """4 ranks, --slices 2: a 2x2 grid (the graph cut into 2 parts, each rank
    32 of the 64 features) trains as one process does; the run's line, given
    as --config with one rank and graph-parallel on top, is the same job there
    (the same accuracies, since both are exact), and without halos."""
    args = ["train", "--dataset", "synthetic", "--num-nodes", "400", "--parts", "4",
            "--strategy", "feature-parallel", "--slices", "2", "--epochs", "8", "--lr", "0.05",
            "--no-progress"]
    grid = json_lines(*args, cwd=tmp_path)[-1]
    assert grid["strategy"] == "feature-parallel" and grid["grid"] == "2x2"
    assert grid["config"]["strategy"] == {"name": "feature-parallel", "slices": 2,
                                          "halo": None, "pre_aggregate": None}
    assert grid["all_to_all_bytes"] > 0 and grid["halo_bytes_fwd"] > 0
    (tmp_path / "run.json").write_text(json.dumps(grid))
    one = json_lines("train", "--config", "run.json", "--parts", "1", "--strategy",
                     "graph-parallel", "--no-progress", cwd=tmp_path)[-1]
    assert one["config"]["strategy"]["name"] == "graph-parallel"
    for key in ("model", "optimizer", "evaluation"):
        assert one["config"][key] == grid["config"][key], key
    assert one["all_to_all_bytes"] == one["halo_bytes"] == 0
    assert (one["test_acc"], one["val_acc"], one["best_epoch"]) == (
        grid["test_acc"], grid["val_acc"], grid["best_epoch"])
    assert one["val_acc"] > 0.4  # trained: 8 classes, chance is 0.125
