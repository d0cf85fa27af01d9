"""Training on the 3D grid (``Grid3D``) against single-process PyG on the
whole graph: every grid of 2 and 4 real gloo ranks, 2x2x2 and 4x1x2 (runs of
axes of unequal sizes that do not meet), GCN with and without edge weights
(two and three layers: every layout of the rotation), SAGE with mean and sum,
GIN (epsilon fixed and learnt); a directed graph with self-loops, duplicates
and isolated nodes; dropout on. Each sum kept scattered (the default) and, for
some cases, whole. Outputs and parameter gradients; three epochs of
train() end with PyG's weights; the planner's bytes are the ledger's; a
scattered rank keeps no gathered rows for the backward; a graph folder and a
partition folder (3 parts, edge weights) read in small chunks give what the
graph in memory gives.

One rank battery per world size (tests/worlds.py) runs every case; the test
process builds the references."""
import functools
import json

import pytest
import torch
import torch.nn.functional as F
from command_line import json_lines
from graphs import awkward_graph
from tolerances import assert_close
from torch.utils._python_dispatch import TorchDispatchMode
from torch_geometric.nn import GATConv, GINConv
from torch_geometric.nn.models import GAT
from worlds import Battery

import pyg_dist
from pyg_dist.config import Adam, Grid3D
from pyg_dist.datasets import write_graph_folder
from pyg_dist.datasets.community import CommunityGraphConfig, community_graph
from pyg_dist.halo.ledger import Ledger
from pyg_dist.models import GNN
from pyg_dist.nn import DistGCNConv, DistSAGEConv, to_distributed
from pyg_dist.runtime import distributed
from pyg_dist.runtime.grids import ProcessGrid
from pyg_dist.strategies import strategy_from_dict
from pyg_dist.strategies.cost import Probe
from pyg_dist.strategies.grid_3d import (
    RUNS,
    Grid3DModel,
    axis_costs,
    axis_key,
    balance,
    collectives,
    compile_model,
    grids,
    layouts,
    load_grid_3d,
    node_order,
    predict,
    program_of,
    readers,
    step_bytes,
    step_calls,
    step_work,
)
from pyg_dist.train import train

#: Grids per world size.
GRIDS = {2: [(1, 1, 2), (2, 1, 1), (1, 2, 1)], 4: [(2, 2, 1), (1, 2, 2), (2, 1, 2)],
         8: [(2, 2, 2), (4, 1, 2)]}
#: The worlds that also read folders and train from a part (8 ranks on a
#: small machine: the layer cases, train() and the bytes alone).
FULL = (2, 4)
F_IN, HIDDEN, CLASSES = 7, 5, 3
P_DROP = 0.5
SEED = 4242  # the shared dropout seed, set on every rank
EPOCHS = 3
CASES = ("gcn", "gcn-weighted", "gcn3", "sage-mean", "sage-sum", "gin", "gin-eps")
#: The cases also run with every sum kept whole (Grid3D(sums="whole")).
WHOLE = ("gcn3", "sage-mean", "gin-eps")
#: The cases whose bytes are compared with the planner's, each way of keeping the sums.
BYTES = [(name, sums) for name in ("gcn3", "sage-mean", "gin-eps")
         for sums in ("scatter", "whole")]
#: Scattered cases run in chunks that divide no width: (case, an aggregation's
#: columns at a time, a transform's rows at a time). A rank's 3 or 4 of the 7
#: input columns and 2 or 3 of the 5 hidden ones (all of them on an axis of one
#: rank) in chunks of 2 or 3; runs of 75 or 150 rows in ranges of 5 or 7, which
#: straddle the pieces' boundaries (37 or 38 rows, 75).
CHUNKED = (("gcn3", 3, 7), ("gcn-weighted", 2, 5), ("sage-mean", 2, 7), ("gin-eps", 3, 5))


def graph():
    return awkward_graph(num_features=F_IN)


def model_of(name):
    """A fresh model of case ``name`` (seeded) and whether it reads edge weights."""
    torch.manual_seed(sum(map(ord, name)))
    if name in ("gcn", "gcn-weighted"):
        return GNN("gcn", F_IN, HIDDEN, CLASSES, dropout=P_DROP), name == "gcn-weighted"
    if name == "gcn3":
        return GNN("gcn", F_IN, HIDDEN, CLASSES, layers=3, dropout=P_DROP), False
    if name.startswith("sage"):
        return GNN("sage", F_IN, HIDDEN, CLASSES, dropout=P_DROP, aggr=name[5:]), False
    assert name in ("gin", "gin-eps")  # gin-eps learns its epsilon
    return GNN("gin", F_IN, HIDDEN, CLASSES, dropout=P_DROP,
               train_eps=name == "gin-eps"), False


M32 = 0xFFFFFFFF


def _lowbias32(h):
    h ^= h >> 16
    h = (h * 0x7FEB352D) & M32
    h ^= h >> 15
    h = (h * 0x846CA68B) & M32
    return h ^ (h >> 16)


def mask(num_nodes, width, call):
    """The documented dropout hash (pyg_dist.utils.hashing) of (global node,
    global column), in Python integers: the scale of call ``call``."""
    key = _lowbias32((SEED * 0x9E3779B1 + call) & M32)
    cols = [_lowbias32((f * 0xC2B2AE35 + key) & M32) for f in range(width)]
    out = []
    for v in range(num_nodes):
        row = _lowbias32((v * 0x85EBCA6B + key) & M32)
        line = []
        for c in cols:
            h = ((row ^ c) * 0x7FEB352D) & M32
            h ^= h >> 15
            h = (h * 0x846CA68B) & M32
            h ^= h >> 16
            line.append((h - 2**32 if h >= 2**31 else h) >= int(P_DROP * 2**32) - 2**31)
        out.append(line)
    return torch.tensor(out, dtype=torch.float32) / (1.0 - P_DROP)


def reference_forward(model, data, weighted, first_call=0):
    """GNN on the whole graph as PyG runs it, its dropout drawing the shared masks."""
    x, call = data.x, first_call
    for k, conv in enumerate(model.convs):
        if model.training and (model.input_dropout if k == 0 else model.dropout) > 0:
            x = x * mask(data.num_nodes, x.size(1), call)
            call += 1
        x = conv(x, data.edge_index, data.edge_weight) if weighted else conv(x, data.edge_index)
        if k < len(model.convs) - 1:
            x = x.relu()
    return x


def plain_model():
    torch.manual_seed(7)
    return GNN("gcn", F_IN, HIDDEN, CLASSES, dropout=0.0)


def upstream(num_nodes):
    return torch.randn(num_nodes, CLASSES, generator=torch.Generator().manual_seed(5))


@functools.cache
def references():
    data, out = graph(), {}
    for name in CASES:
        model, weighted = model_of(name)
        model.train()
        logits = reference_forward(model, data, weighted)
        (logits * upstream(data.num_nodes)).sum().backward()
        out[name] = {"out": logits.detach(),
                     "grads": {n: p.grad.clone() for n, p in model.named_parameters()}}
    return out


def reference_training(name):
    data = graph()
    model = model_of(name)[0] if name != "gcn-plain" else plain_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for epoch in range(EPOCHS):
        model.train()
        optimizer.zero_grad()
        out = reference_forward(model, data, False, first_call=len(model.convs) * epoch)
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# --- on the ranks ---------------------------------------------------------------------------

def run_case(data, name, sums="scatter", **chunks):
    """One forward and backward of case ``name``: the logits' rows (on the
    ranks that count them), the gradients summed over the grid, the ledger
    (``chunks``: the aggregations' columns and the transforms' rows at a time)."""
    data.dropout.seed, data.dropout.calls = SEED, 0
    model, weighted = model_of(name)
    net = Grid3DModel(model, data, edge_weight=weighted, sums=sums, **chunks)
    model.train()
    value = net.output()
    logits = net.logits(value)
    ids = net.rows(value)
    counts = 1.0 if net.counts(value) else 0.0
    (logits * upstream(data.num_nodes)[ids] * counts).sum().backward()
    net.sum_gradients()
    return {"rows": ids if net.counts(value) else None, "out": logits.detach(),
            "grads": {n: p.grad.clone() for n, p in model.named_parameters()},
            "layouts": [str(layout) for layout in layouts(net.steps)]}


def bytes_case(data, name, sums, **chunks):
    """One training step of case ``name`` with a fresh ledger: the bytes
    each direction of the ledger booked."""
    data.ledger = Ledger()
    model, _ = model_of(name)
    net = Grid3DModel(model, data, sums=sums, **chunks)
    model.train()
    loss, _ = net.loss(net.output())
    loss.backward()
    net.sum_gradients()
    out = {}
    for (_, _, way), entry in data.ledger.entries.items():
        out[way] = out.get(way, 0) + int(entry.bytes_sent)
    return out


#: The collectives the grid's layers call (the gradients' sum calls others).
CALLED = ("gather_row_range", "reduce_row_range", "all_reduce", "reduce_scatter_rows",
          "all_gather_rows")


def calls_case(data, name, sums, **chunks):
    """The collectives over more than one rank that one training step of
    case ``name`` calls, the gradients' sum left out."""
    model, _ = model_of(name)
    net = Grid3DModel(model, data, sums=sums, **chunks)
    model.train()
    made, originals = [0], {f: getattr(distributed, f) for f in CALLED}

    def counted(call):
        def wrapper(*args, group=None, **kwargs):
            made[0] += distributed.world_size(group) > 1
            return call(*args, group=group, **kwargs)
        return wrapper

    for f, call in originals.items():
        setattr(distributed, f, counted(call))
    try:
        loss, _ = net.loss(net.output())
        loss.backward()
    finally:
        for f, call in originals.items():
            setattr(distributed, f, call)
    net.sum_gradients()
    return made[0]


class _Kernels(TorchDispatchMode):
    """Counts the adjacency entries the aggregations' kernels walk (forward,
    and backward where the sources take a gradient) and the matrix
    products' multiply-adds run under it."""

    def __init__(self):
        super().__init__()
        self.entries = self.multiply_adds = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        aten, ours = torch.ops.aten, torch.ops.pyg_dist
        if func == ours.spmm.default:
            self.entries += args[1].numel()
        elif func == ours.spmm_backward.default and args[9]:  # need_src
            self.entries += args[2].numel()
        elif func in (aten.mm.default, aten.addmm.default, aten.addmm_.default):
            a, b = args[:2] if func == aten.mm.default else args[1:3]
            self.multiply_adds += a.size(0) * a.size(1) * b.size(1)
        return func(*args, **(kwargs or {}))


def work_case(data, name, sums, **chunks):
    """``(entries, multiply_adds)`` of one training step of case ``name``
    (:class:`_Kernels`; the gradients' sum left out)."""
    model, _ = model_of(name)
    net = Grid3DModel(model, data, sums=sums, **chunks)
    model.train()
    with _Kernels() as kernels:
        loss, _ = net.loss(net.output())
        loss.backward()
    return kernels.entries, kernels.multiply_adds


def saved_case(data, name, sums):
    """The bytes of the largest node matrix (a 2-D float tensor's storage)
    that one forward of case ``name`` kept for its backward."""
    data.dropout.seed, data.dropout.calls = SEED, 0
    model, _ = model_of(name)
    net = Grid3DModel(model, data, sums=sums)
    model.train()
    kept = [0]

    def pack(tensor):
        if tensor.dim() == 2 and tensor.is_floating_point():
            kept.append(tensor.untyped_storage().nbytes())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss, _ = net.loss(net.output())
    loss.backward()
    return max(kept)


def train_case(source, shape, name, sums="scatter"):
    data = load_grid_3d(source, shape)
    data.dropout.seed = SEED
    model, _ = model_of(name)
    train(model, data, EPOCHS, strategy=Grid3D(*shape, sums=sums), progress=False,
          optimizer=Adam(lr=0.01, weight_decay=5e-4))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def train_part_case(parts, shape):
    """train() given this rank's part (a DistData): read again as blocks."""
    model = plain_model()
    train(model, pyg_dist.DistData.load(parts), EPOCHS, strategy=Grid3D(*shape),
          progress=False, optimizer=Adam(lr=0.01, weight_decay=5e-4))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def counting_new_groups():
    """Counts the process groups made from now on (a list of one count)."""
    made, new_group = [0], distributed.new_group

    def counted(*args, **kwargs):
        made[0] += 1
        return new_group(*args, **kwargs)

    distributed.new_group = counted
    return made


def battery(folder, parts, world):
    source, out = graph(), {}
    readers.EDGE_CHUNK = 97  # the folder's edges and rows a few at a time
    made = counting_new_groups()
    for shape in GRIDS[world]:
        data = load_grid_3d(source, shape)
        before = made[0]
        for name in CASES:
            out[shape, name] = run_case(data, name)
        out[shape, "groups made by the steps"] = made[0] - before
        for name in WHOLE:
            out[shape, name, "whole"] = run_case(data, name, "whole")
        out[shape, "saved"] = {sums: saved_case(data, "gcn3", sums)
                               for sums in ("scatter", "whole")}
        out[shape, "train"] = train_case(source, shape, "gcn")
        if shape == GRIDS[world][0]:
            out[shape, "train", "whole"] = train_case(source, shape, "gcn", "whole")
        out[shape, "bytes"] = {case: bytes_case(data, *case) for case in BYTES}
        out[shape, "calls"] = {case: calls_case(data, *case) for case in BYTES}
        out[shape, "work"] = {case: work_case(data, *case) for case in BYTES}
        for name, columns, rows in CHUNKED:
            out[shape, name, "chunked"] = run_case(data, name, columns=columns, rows=rows)
            out[shape, "bytes", "chunked", name] = bytes_case(data, name, "scatter",
                                                              columns=columns, rows=rows)
            out[shape, "calls", "chunked", name] = calls_case(data, name, "scatter",
                                                              columns=columns, rows=rows)
            out[shape, "work", "chunked", name] = work_case(data, name, "scatter",
                                                            columns=columns, rows=rows)
        if world not in FULL:
            continue
        out[shape, "folder"] = run_case(load_grid_3d(folder, shape), "gcn")
        out[shape, "parts"] = run_case(load_grid_3d(parts, shape), "gcn-weighted")
        out[shape, "unbalanced"] = run_case(load_grid_3d(source, shape, permute="none"), "gcn3")
    if world not in FULL:
        return out
    before = made[0]
    out["axes"] = axis_costs(world, nbytes=1 << 14)
    out["axes", "again"] = axis_costs(world, nbytes=1 << 14)
    out["axes", "groups made again"] = made[0] - before
    out["train-part"] = train_part_case(parts.parent / f"parts{world}", GRIDS[world][0])
    return out


def prepare(world, root):
    """A graph folder, and a partition folder of 3 parts (not the world's)."""
    write_graph_folder(graph(), root / "graph")
    pyg_dist.partition(graph(), 3, root / "parts", method="random", seed=3)
    pyg_dist.partition(graph(), world, root / f"parts{world}", method="metis", seed=3)
    return (root / "graph", root / "parts", world), None


BATTERIES = {world: Battery(world, battery, functools.partial(prepare, world), timeout=900)
             for world in GRIDS}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    yield lambda world: BATTERIES[world].results(tmp_path_factory)[1]
    for world_battery in BATTERIES.values():
        world_battery.release()


def gather(per_rank, key, num_nodes):
    """The whole graph's logits from the ranks that count their rows; each
    row once."""
    full = torch.full((num_nodes, CLASSES), float("nan"))
    seen = torch.zeros(num_nodes, dtype=torch.long)
    for r in per_rank:
        if r[key]["rows"] is not None:
            full[r[key]["rows"]] = r[key]["out"]
            seen[r[key]["rows"]] += 1
    assert bool((seen == 1).all()), f"{key}: rows counted {seen.unique().tolist()} times"
    return full


@pytest.mark.parametrize("world", sorted(GRIDS))
def test_every_grid_equals_pyg_on_the_whole_graph(runs, world):
    per_rank, refs, n = runs(world), references(), graph().num_nodes
    extra = [("gcn", "folder"), ("gcn-weighted", "parts"), ("gcn3", "unbalanced")]
    for shape in GRIDS[world]:
        keys = ([(c, (shape, c)) for c in CASES] + [(c, (shape, c, "whole")) for c in WHOLE]
                + [(c, (shape, e)) for c, e in (extra if world in FULL else [])])
        for name, key in keys:
            what = f"{' '.join(map(str, key[1:]))} on {'x'.join(map(str, shape))}"
            assert_close(gather(per_rank, key, n), refs[name]["out"], what=f"{what}: output")
            for param, grad in refs[name]["grads"].items():
                for r in range(world):
                    assert_close(per_rank[r][key]["grads"][param], grad,
                                 what=f"{what}: gradient of {param} on rank {r}")


@pytest.mark.parametrize("world", sorted(GRIDS))
def test_the_grid_makes_every_group_before_the_first_step(runs, world):
    """A group made in a step would leave the ranks that got there waiting,
    past any peer's failure, in a call that cannot be interrupted."""
    for shape in GRIDS[world]:
        for r, per_rank in enumerate(runs(world)):
            assert per_rank[shape, "groups made by the steps"] == 0, (shape, r)


@pytest.mark.parametrize("world", sorted(GRIDS))
def test_sums_in_chunks_that_divide_no_width_equal_one_chunk_and_pyg(runs, world):
    """Aggregations a few columns at a time and transforms a few rows at a
    time (CHUNKED): the outputs and every gradient of one chunk (the
    default's, wider than these widths and runs) and of PyG, and the bytes
    of one chunk, the planner's."""
    per_rank, refs, n = runs(world), references(), graph().num_nodes
    for shape in GRIDS[world]:
        for name, columns, rows in CHUNKED:
            what = f"{name} in chunks of {columns} columns, {rows} rows on {shape}"
            chunked, whole = (shape, name, "chunked"), (shape, name)
            out = gather(per_rank, chunked, n)
            assert_close(out, gather(per_rank, whole, n), what=f"{what}: output, one chunk")
            assert_close(out, refs[name]["out"], what=f"{what}: output, PyG")
            for param, grad in refs[name]["grads"].items():
                for r in range(world):
                    ours = per_rank[r][chunked]["grads"][param]
                    assert_close(ours, per_rank[r][whole]["grads"][param],
                                 what=f"{what}: gradient of {param} on rank {r}, one chunk")
                    assert_close(ours, grad, what=f"{what}: gradient of {param} on rank {r}")
            booked = [ranks[shape, "bytes", "chunked", name] for ranks in per_rank]
            if (name, "scatter") in BYTES:
                assert booked == [ranks[shape, "bytes"][name, "scatter"]
                                  for ranks in per_rank], what


def test_the_layouts_rotate_from_layer_to_layer(runs):
    """Three GCN layers: input yz; each layer aggregates (rows take the
    spare axis) then transforms (columns take it): xz, xy | zy, zx | yx, yz."""
    assert runs(2)[0][(1, 1, 2), "gcn3"]["layouts"] == [
        "yz", "yz", "xy", "xy", "xy", "zx", "zx", "zx", "yz"]


@pytest.mark.parametrize("world", sorted(GRIDS))
def test_training_ends_with_the_weights_of_one_process(runs, world):
    expected = reference_training("gcn")
    keys = [(shape, "train") for shape in GRIDS[world]] + [(GRIDS[world][0], "train", "whole")]
    for key in keys:
        for r, ranks in enumerate(runs(world)):
            for name, value in expected.items():
                assert_close(ranks[key][name], value,
                             what=f"{name} after {EPOCHS} epochs, {key}, rank {r}")


@pytest.mark.parametrize("world", FULL)
def test_training_on_a_ranks_part_reads_it_again_as_blocks(runs, world):
    """train(model, DistData, strategy=Grid3D(...)), as the planner's choice
    runs it: the part's folder read as the grid's blocks; no dropout."""
    expected = reference_training("gcn-plain")
    for r, ranks in enumerate(runs(world)):
        for name, value in expected.items():
            assert_close(ranks["train-part"][name], value, what=f"{name} on rank {r}")


@pytest.mark.parametrize("world", sorted(GRIDS))
def test_the_planners_bytes_are_the_ledgers(runs, world):
    for name, sums in BYTES:
        model, _ = model_of(name)
        program = program_of(model, F_IN)
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        for shape in GRIDS[world]:
            booked = {}
            for ranks in runs(world):
                for way, sent in ranks[shape, "bytes"][name, sums].items():
                    booked[way] = booked.get(way, 0) + sent
            predicted = step_bytes(program, shape, graph().num_nodes, params, sums)
            assert booked == {k: v for k, v in predicted.items() if v}, (name, sums, shape)


@pytest.mark.parametrize("world", sorted(GRIDS))
def test_the_planner_charges_a_latency_for_each_call_a_step_makes(runs, world):
    """The busiest rank's calls of collectives in a step (one a chunk kept
    scattered; one a sum kept whole), as the planner counts them: in one
    chunk (the default's) and in the CHUNKED cases' chunks."""
    n = graph().num_nodes
    for name, sums in BYTES:
        program = program_of(model_of(name)[0], F_IN)
        for shape in GRIDS[world]:
            made = max(ranks[shape, "calls"][name, sums] for ranks in runs(world))
            assert made == step_calls(program, shape, n, sums), (name, sums, shape)
    for name, columns, rows in CHUNKED:
        program = program_of(model_of(name)[0], F_IN)
        for shape in GRIDS[world]:
            made = max(ranks[shape, "calls", "chunked", name] for ranks in runs(world))
            predicted = step_calls(program, shape, n, "scatter", columns, rows)
            assert made == predicted, (name, shape)
            assert predicted > step_calls(program, shape, n) or max(shape) == 1, (name, shape)


@pytest.mark.parametrize("world", sorted(GRIDS))
def test_the_planners_kernel_work_is_what_the_ranks_kernels_do(runs, world):
    """The adjacency entries the aggregations' kernels walk (a chunk's
    columns at a time, forward and backward) and the transforms'
    multiply-adds in a step, summed over the ranks, as the planner counts
    them; in one chunk and in the CHUNKED cases' chunks."""
    n, e = graph().num_nodes, graph().num_edges
    cases = [(name, sums, {"sums": sums},
              lambda shape, ranks, case=(name, sums): ranks[shape, "work"][case])
             for name, sums in BYTES]
    cases += [(name, "scatter", {"columns": columns},
               lambda shape, ranks, name=name: ranks[shape, "work", "chunked", name])
              for name, columns, _ in CHUNKED]
    for name, sums, chunks, done_on in cases:
        program = program_of(model_of(name)[0], F_IN)
        for shape in GRIDS[world]:
            done = [done_on(shape, ranks) for ranks in runs(world)]
            planned = step_work(program, shape, n, e, **chunks)
            assert (sum(w[0] for w in done), sum(w[1] for w in done)) == (
                round(sum(w[0] for w in planned)), sum(w[1] for w in planned)), (
                name, sums, shape)


def grid_coords(shape, rank):
    """The coordinates of ``rank`` on ``shape`` (row-major, the last axis fastest)."""
    coords = []
    for size in reversed(shape):
        coords.append(rank % size)
        rank //= size
    return tuple(reversed(coords))


@pytest.mark.parametrize("world", [2, 4, 8, 12, 16])
def test_an_axis_kind_is_made_of_the_groups_every_grid_has_along_it(world):
    """The planner times each kind of axis once (its ranks g and their
    stride s) on the grid (P / gs, g, s)'s middle axis: every grid's axis of
    that kind holds the same ranks in each group."""
    for shape in grids(world):
        for axis in range(3):
            g, s = map(int, axis_key(shape, axis).split("/"))
            assert g == shape[axis]
            probed = (world // (g * s), g, s)
            for rank in range(world):
                assert ProcessGrid(probed, grid_coords(probed, rank)).members(1) == ProcessGrid(
                    shape, grid_coords(shape, rank)).members(axis), (shape, axis, rank)


@pytest.mark.parametrize("world", sorted(FULL))
def test_the_planner_times_every_kind_of_axis_the_worlds_grids_have(runs, world):
    kinds = {axis_key(shape, axis) for shape in grids(world) for axis in range(3)
             if shape[axis] > 1}
    per_rank = runs(world)
    for ranks in per_rank:
        assert set(ranks["axes"]) == kinds
        assert ranks["axes"] == per_rank[0]["axes"]  # the slowest rank's, on every rank
        assert ranks["axes", "groups made again"] == 0  # made once, kept
        for alpha, beta in ranks["axes"].values():
            assert 0.0 <= alpha < 1.0 and 0.0 < beta < float("inf")


def test_the_planner_charges_each_collective_on_its_axis_link():
    """A collective over an axis of g ranks s apart is charged that kind's
    latency a call and its bytes at its rate, the others untouched; a kind
    not probed falls back on the probe's link."""
    n, program = 1000, program_of(model_of("gcn3")[0], F_IN)
    probe = Probe(world_size=8, latency=1e-3, bandwidth=1e8, compute=0.01, layers=[],
                  grad_bytes=0.0, clusters=False, exact_compute=0.01)
    measured = {"program": program, "num_nodes": n, "num_edges": 5000, "entry_seconds": 0.0,
                "mac_seconds": 0.0, "param_bytes": 400}
    kinds = {axis_key(shape, axis) for shape in grids(8) for axis in range(3) if shape[axis] > 1}
    same = {**measured, "axes": {k: [probe.latency, probe.bandwidth] for k in kinds}}
    for shape in grids(8):
        assert predict(same, shape, probe, 1) == predict(measured, shape, probe, 1), shape
    slow = {**same, "axes": {**same["axes"], "8/1": [0.5, probe.bandwidth],
                             "2/4": [probe.latency, probe.bandwidth / 3]}}
    for shape in grids(8):
        extra = (0.5 - probe.latency) * step_calls(program, shape, n) if 8 in shape else 0.0
        extra += sum(2 * max(sent) / probe.bandwidth
                     for _, axis, sent in collectives(program, shape, n)
                     if axis_key(shape, axis) == "2/4")
        seconds = predict(slow, shape, probe, 1)[0] - predict(same, shape, probe, 1)[0]
        assert seconds == pytest.approx(extra, rel=1e-9, abs=1e-12), shape
        # an axis of 8 ranks, or of 2 ranks 4 apart
        assert (extra > 0) == (shape in ((1, 1, 8), (1, 8, 1), (8, 1, 1), (2, 1, 4), (2, 4, 1),
                                         (2, 2, 2), (1, 2, 4))), shape


def test_scattered_sums_cost_a_transforms_gather_again_in_the_backward():
    """Worked by hand: one GCN layer (7 -> 3 columns) on 2x2x1 of 10 nodes.
    The input features lie in a run of y (5 rows) cut over x into pieces of 2
    and 3 rows: the aggregation gathers them, (5 - 2) x 7 and (5 - 3) x 7
    float32 from the two ranks of x (84 + 56 bytes), for each of the 2 runs of
    y. The aggregation's partial sums, 5 rows (a run of x) x 7, sum over y:
    whole, a ring all-reduce of 35 elements sends 2 x (35 - 17) and 2 x
    (35 - 18) float32 from the two ranks (144 + 136 bytes); scattered, a
    reduce-scatter into pieces of 2 and 3 rows sends (5 - 2) x 7 and
    (5 - 3) x 7 (84 + 56 bytes), and the transform's all-gather as many: 280
    either way, for each of the 2 runs of x. The transform sums over z (one
    rank: nothing); the logits (5 x 3) all-reduce over y both ways,
    2 x (15 - 7) + 2 x (15 - 8) elements (120 bytes) a run. The input takes
    no gradient: the whole step has no backward of the aggregation; the
    scattered step gathers its pieces again for the transform's weight (140
    bytes a run)."""
    program = [["agg", 7, 1, 0], ["linear", 7, 3]]
    assert step_bytes(program, (2, 2, 1), 10, 0, "whole") == {
        "fwd": 2 * (140 + 280 + 120), "bwd": 2 * 120, "grad": 0}
    assert step_bytes(program, (2, 2, 1), 10, 0, "scatter") == {
        "fwd": 2 * (140 + 280 + 120), "bwd": 2 * (140 + 120), "grad": 0}


@pytest.mark.parametrize("world", sorted(GRIDS))
def test_a_scattered_rank_keeps_its_piece_of_the_rows_for_the_backward(runs, world):
    """No node matrix a forward keeps for its backward is larger than the
    rank's piece of one (its run cut again over the third axis). On 2x2x2
    the widest is the first transform's input, 4 of the 7 features: whole,
    a run of 75 of the 150 rows; scattered, a piece of 38."""
    for shape in GRIDS[world]:
        saved = [ranks[shape, "saved"] for ranks in runs(world)]
        for kept in saved:
            assert kept["scatter"] <= kept["whole"], shape
        if shape == (2, 2, 2):
            assert max(k["scatter"] for k in saved) == 38 * 4 * 4
            assert max(k["whole"] for k in saved) == 75 * 4 * 4


# --- in this process --------------------------------------------------------------------------

def test_the_double_permutation_balances_a_power_law_graph_stored_by_degree():
    """Hubs first (a degree-sorted store): the graph's own order piles the
    edges onto the first blocks; the double permutation spreads them to
    within 5% of the mean on every layout."""
    data = community_graph(CommunityGraphConfig(num_nodes=6000, avg_degree=12, num_features=1,
                                                degree_exponent=2.1), seed=1)
    degree = torch.bincount(data.edge_index.reshape(-1), minlength=data.num_nodes)
    position = torch.empty_like(degree)
    position[torch.argsort(degree, descending=True, stable=True)] = torch.arange(data.num_nodes)
    edges = position[data.edge_index]
    assert balance(edges, data.num_nodes, (2, 2, 2), permute="none") > 2.5
    assert balance(edges, data.num_nodes, (2, 2, 2)) <= 1.05
    assert balance(edges, data.num_nodes, (3, 2, 1)) <= 1.05


def test_the_node_order_is_a_permutation_dealt_into_equal_runs():
    """Sorted by degree (9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0: nodes 0, 8, 4, 10,
    2, 9, 5, 7, 3, then 1 and 6) and dealt in snake order into runs [0, 5)
    and [5, 11): run 0 gets the 1st, 4th, 5th, 8th and 9th, degrees 23
    against 22."""
    degree = torch.tensor([9, 0, 5, 1, 7, 3, 0, 2, 8, 4, 6])
    order = node_order(degree, (2, 1, 1), seed=0)
    assert sorted(order.tolist()) == list(range(11))
    assert set(order[:5].tolist()) == {0, 10, 2, 7, 3}
    assert node_order(degree, (2, 1, 1), permute="none").tolist() == list(range(11))
    with pytest.raises(ValueError, match="use one of none, random, double"):
        node_order(degree, (2, 1, 1), permute="sorted")


def test_options_read_back_from_configs():
    strategy = Grid3D(grid="2x1x2", seed=3, sums="whole")
    assert (strategy.x, strategy.y, strategy.z) == (2, 1, 2)
    assert strategy_from_dict(strategy.describe()) == strategy == Grid3D(x=2, y=1, z=2, seed=3,
                                                                          sums="whole")
    assert Grid3D().shape(8) == (2, 2, 2) and Grid3D().shape(4) == (2, 2, 1)
    assert grids(4) == [(1, 1, 4), (1, 2, 2), (1, 4, 1), (2, 1, 2), (2, 2, 1), (4, 1, 1)]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"grid": "2x2"}, "spell it XxYxZ"),
    ({"grid": "2x0x1"}, "spell it XxYxZ"),
    ({"x": 2, "y": 1}, "give all three sizes"),
    ({"x": 2, "y": 1, "z": 1, "grid": "2x1x1"}, "not both"),
    ({"x": 0, "y": 1, "z": 1}, r"x must be an integer >= 1"),
    ({"sums": "reduce"}, r"Grid3D\(sums='reduce'\): use one of scatter, whole"),
])
def test_bad_grids_are_refused_naming_the_fix(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Grid3D(**kwargs)


def test_a_grid_of_another_size_than_the_world_is_refused():
    with pytest.raises(ValueError, match=r"holds 4 ranks, not the 1 of the world; choose x, y, "
                                         r"z whose product is 1 \(CLI: --grid XxYxZ\)"):
        load_grid_3d(graph(), (2, 2, 1))
    with pytest.raises(ValueError, match="use one of 1x1x2, 1x2x1, 2x1x1"):
        Grid3D(x=2, y=2, z=1).graph_parts(2)
    assert Grid3D(x=2, y=2, z=1).graph_parts(4) == 4


@pytest.mark.parametrize(("model", "match"), [
    (lambda: to_distributed(GAT(F_IN, HIDDEN, 2, CLASSES)), "does not run on the 3D grid"),
    (lambda: DistSAGEConv(F_IN, CLASSES, project=True), "project=True"),
    (lambda: DistGCNConv(F_IN, CLASSES, add_self_loops=False), "add_self_loops=False"),
    (lambda: GNN("gcn", F_IN, HIDDEN, CLASSES, norm="batch"), "norm=None"),
    (lambda: GNN("gat", F_IN, HIDDEN, CLASSES), "GNN kinds gcn, sage, gin"),
    (lambda: GATConv(F_IN, CLASSES), "convert the model with pyg_dist.nn.to_distributed"),
    (lambda: GINConv(torch.nn.Sequential(torch.nn.Linear(F_IN, 4), torch.nn.BatchNorm1d(4))),
     "GINConv's nn holds BatchNorm1d"),
])
def test_layers_that_do_not_run_are_refused_naming_those_that_do(model, match):
    with pytest.raises(ValueError, match=match) as info:
        compile_model(model(), F_IN)
    if "norm" not in match:  # a layer's refusal names the layers that run
        assert RUNS in str(info.value)


def test_the_cli_refuses_models_naming_those_that_run():
    with pytest.raises(ValueError, match=r"trains --model gcn\|sage\|gin"):
        Grid3D().check_model("gat")
    with pytest.raises(ValueError, match="without --norm, --jk; leave them out"):
        Grid3D().check_model("gcn", options={"norm": "batch_norm", "jk": "cat"})


def test_the_cli_trains_a_grid_as_one_process_trains_the_whole_graph(tmp_path):
    """2 ranks, --grid 1x1x2 (the graph cut into a part per rank, read back
    as blocks): the run's line, given as --config with one rank and
    graph-parallel on top, is the same job there, with the same accuracies
    (both are exact)."""
    args = ["train", "--dataset", "synthetic", "--num-nodes", "400", "--parts", "2",
            "--strategy", "grid-3d", "--grid", "1x1x2", "--epochs", "8", "--lr", "0.05",
            "--no-progress"]
    grid = json_lines(*args, cwd=tmp_path)[-1]
    assert grid["strategy"] == "grid-3d" and grid["grid"] == "1x1x2"
    assert grid["config"]["strategy"] == {"name": "grid-3d", "x": 1, "y": 1, "z": 2,
                                          "grid": None, "seed": 0, "edge_weight": False,
                                          "sums": "scatter"}
    (tmp_path / "run.json").write_text(json.dumps(grid))
    one = json_lines("train", "--config", "run.json", "--parts", "1", "--strategy",
                     "graph-parallel", "--no-progress", cwd=tmp_path)[-1]
    assert one["config"]["strategy"]["name"] == "graph-parallel"
    assert (one["test_acc"], one["val_acc"], one["best_epoch"]) == (
        grid["test_acc"], grid["val_acc"], grid["best_epoch"])
    assert one["val_acc"] > 0.4  # trained: 8 classes, chance is 0.125


def test_one_process_is_a_grid_of_one_rank():
    """1x1x1 in this process (no process group): every case's outputs and
    gradients are PyG's on the whole graph."""
    data, refs = load_grid_3d(graph(), (1, 1, 1)), references()
    for name in CASES:
        got = run_case(data, name)
        assert_close(got["out"][torch.argsort(got["rows"])], refs[name]["out"],
                     what=f"{name}: output")
        for param, grad in refs[name]["grads"].items():
            assert_close(got["grads"][param], grad, what=f"{name}: gradient of {param}")


def test_a_folder_of_neither_kind_is_refused_naming_both(tmp_path):
    with pytest.raises(ValueError, match=r"reads a graph folder \(pyg-dist convert ... --out "
                                         r"DIR\) or a partition folder"):
        load_grid_3d(tmp_path, (1, 1, 1))
    with pytest.raises(ValueError, match=r"strategy.load\(folder\) \(a graph or partition "
                                         r"folder\)"):
        Grid3D().runner(GNN("gcn", F_IN, 4, 3), type("T", (), {"data": object()})(), None)
