"""The layer pipeline on real gloo ranks: every grid layout with one chunk
equals single-process training of the same deep model; with more chunks every
row used is at most one epoch old and the bytes are the hand count; the
errors name the fix."""
import functools
import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from graphs import awkward_graph
from tolerances import TOL, assert_close, rel_err
from worlds import Battery

import pyg_dist
from pyg_dist.models import DeepGNN
from pyg_dist.strategies.layer_pipeline import Pipeline, balance, best_layout, layout_costs, load

KINDS = ("gcn2", "resgcn", "ressage")
LAYERS, WIDTH, CLASSES, LR = 4, 8, 3, 0.5


def graph():
    data = awkward_graph(num_features=6)
    gen = torch.Generator().manual_seed(1)
    data.y = torch.randint(0, CLASSES, (data.num_nodes,), generator=gen)
    data.train_mask = torch.rand(data.num_nodes, generator=gen) < 0.6
    data.val_mask = ~data.train_mask
    data.test_mask = ~data.train_mask
    return data


def model(kind):
    torch.manual_seed(3)
    return DeepGNN(kind, 6, WIDTH, CLASSES, layers=LAYERS, dropout=0.0)


def reference(kind, steps=2):
    """Single-process training with PyG's layers: losses and weights."""
    data, net = graph(), model(kind)
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        out = net(data.x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.clone() for k, v in net.state_dict().items()}


def chunked_reference(labels, steps):
    """Single-process GCNII trained as the chunked pipeline promises, built
    here from PyG's GCN2Conv on the whole graph: a table per layer holds
    every node's input to the layer, filled by an exact forward before the
    first epoch; chunk ``k`` (the nodes labelled ``k`` on any rank) aggregates
    its own rows fresh (gradients flow through them) and every other node's
    row from the table: rows written this epoch for chunks before ``k``, last
    epoch's (or the fill's) for the rest; then writes its rows. Per epoch:
    the sum of the chunks' losses, one SGD step. Returns losses and weights."""
    from torch_geometric.nn import GCN2Conv
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    data, net = graph(), model("gcn2")
    n, chunks = data.num_nodes, int(labels.max()) + 1
    convs = []
    for k, dist_conv in enumerate(net.convs):
        conv = GCN2Conv(WIDTH, alpha=0.1, theta=0.5, layer=k + 1, normalize=False)
        conv.load_state_dict(dist_conv.state_dict())
        assert conv.beta == dist_conv.beta and conv.alpha == dist_conv.alpha
        convs.append(conv)
    lin_in, lin_out = net.lins
    params = [*lin_in.parameters(), *lin_out.parameters(),
              *(p for conv in convs for p in conv.parameters())]
    opt = torch.optim.SGD(params, lr=LR)
    edge_index, weight = gcn_norm(data.edge_index, None, n, add_self_loops=True)
    train = data.train_mask
    with torch.no_grad():  # the fill: the exact forward with the initial weights
        tables, h = [], lin_in(data.x).relu()
        x0 = h
        for conv in convs:
            tables.append(h.clone())
            h = conv(h, x0, edge_index, weight).relu()
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        total = 0.0
        for k in range(chunks):
            mine = (labels == k).view(-1, 1)
            h = lin_in(data.x).relu()
            x0 = h
            into = (labels == k)[edge_index[1]]
            for index, conv in enumerate(convs):
                mixed = torch.where(mine, h, tables[index])
                tables[index] = torch.where(mine, h.detach(), tables[index])
                h = conv(mixed, x0, edge_index[:, into], weight[into]).relu()
            rows = mine.view(-1) & train
            loss = F.cross_entropy(lin_out(h)[rows], data.y[rows], reduction="sum") / train.sum()
            loss.backward()
            total += loss.item()
        opt.step()
        losses.append(total)
    state = {"lins.0." + k: v for k, v in lin_in.state_dict().items()}
    state |= {"lins.1." + k: v for k, v in lin_out.state_dict().items()}
    for index, conv in enumerate(convs):
        state |= {f"convs.{index}.{k}": v for k, v in conv.state_dict().items()}
    return losses, state


def run_layout(folders, stages, kind, chunks, steps=2, balance_=None, halo=None,
               initial_rows="send"):
    net = model(kind)
    data = load(folders[pyg_dist.runtime.distributed.world_size() // stages], stages, halo=halo)
    pipe = Pipeline(net, data, stages=stages, chunks=chunks, balance=balance_,
                    initial_rows=initial_rows)
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    losses = []
    for _ in range(steps):
        losses.append(pipe.train_step(opt))
        data.ledger.next_step()
    accs = pipe.evaluate()
    pipe.gather_parameters()
    rows = data.ledger.rows()
    return {"losses": losses, "state": {k: v.clone() for k, v in net.state_dict().items()},
            "accs": accs, "rows": rows, "layers": pipe.schedule()["layers"],
            "owned": data.edge_index.num_owned, "global_id": data.global_id.clone(),
            "labels": pipe.training_chunks.labels.clone()}


def graph_parallel(folder, kind, steps=2):
    """The deep model's own forward on a DistEdgeIndex (no pipeline)."""
    from pyg_dist.train import train_step

    net = model(kind)
    data = pyg_dist.DistData.load(folder)
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    losses = [train_step(net, data, opt) for _ in range(steps)]
    return {"losses": losses, "state": {k: v.clone() for k, v in net.state_dict().items()}}


def body(folders):
    world = pyg_dist.runtime.distributed.world_size()
    out = {("graph parallel", kind): graph_parallel(folders[world], kind) for kind in KINDS}
    for stages in [s for s in (1, 2, 4) if world % s == 0]:
        for kind in KINDS:
            out[(stages, kind, 1)] = run_layout(folders, stages, kind, 1,
                                                balance_=None if kind == "gcn2" else
                                                [LAYERS - stages + 1] + [1] * (stages - 1))
        out[(stages, "gcn2", 4)] = run_layout(folders, stages, "gcn2", 4, steps=3)
        for chunks in (1, 4):
            out[(stages, "recompute", chunks)] = run_layout(folders, stages, "gcn2", chunks,
                                                            initial_rows="recompute")
        if world > stages:  # a halo within each stage: the graph's policy applies
            out[(stages, "stale")] = run_layout(folders, stages, "gcn2", 1, steps=3,
                                                halo=pyg_dist.halo.Stale(every=3))
            out[(stages, "int8")] = run_layout(folders, stages, "gcn2", 4, steps=3,
                                               halo=pyg_dist.halo.Exact(compress="int8"))
    errors = {}
    for name, fn in {
        "stages": lambda: load(folders[1], 3),
        "folder": lambda: load(folders[world], 2),
        "chunks": lambda: Pipeline(model("resgcn"), load(folders[world], 1), chunks=0),
        "too many chunks": lambda: Pipeline(model("resgcn"), load(folders[world], 1),
                                            chunks=10**6),
        "layers": lambda: Pipeline(DeepGNN("resgcn", 6, WIDTH, CLASSES, layers=1),
                                   load(folders[world // 2], 2), stages=2),
        "balance": lambda: Pipeline(model("resgcn"), load(folders[world // 2], 2), stages=2,
                                    balance=[LAYERS, 0]),
        "model": lambda: Pipeline(pyg_dist.models.GNN("gat", 6, 8, 3),
                                  load(folders[world], 1)),
    }.items():
        try:
            fn()
        except ValueError as error:
            errors[name] = str(error)
    out["errors"] = errors
    return out


def prepare(world, root):
    folders = {}
    for parts in sorted({world, world // 2, 1, world // 4 or 1}):
        folders[parts] = str(root / f"parts{parts}")
        pyg_dist.partition(graph(), parts, folders[parts])
    return (folders,), folders


RUNS = {world: Battery(world, body, functools.partial(prepare, world)) for world in (2, 4)}


@pytest.fixture(scope="module", params=[2, 4])
def runs(request, tmp_path_factory):
    world = request.param
    folders, results = RUNS[world].results(tmp_path_factory)
    return world, folders, results


@pytest.mark.parametrize("kind", KINDS)
def test_every_layout_with_one_chunk_equals_single_process_training(runs, kind):
    world, _, results = runs
    losses, state = reference(kind)
    for stages in [s for s in (1, 2, 4) if world % s == 0]:
        for rank, result in enumerate(results):
            for run in [result[(stages, kind, 1)]] + (
                    [result[(stages, "recompute", 1)]] if kind == "gcn2" else []):
                assert run["losses"] == pytest.approx(losses, rel=1e-5), (stages, rank)
                for key, ref in state.items():
                    assert rel_err(run["state"][key], ref) <= 1e-5, (stages, rank, key)


@pytest.mark.parametrize("kind", KINDS)
def test_the_deep_model_graph_parallel_equals_single_process_training(runs, kind):
    _, _, results = runs
    losses, state = reference(kind)
    for result in results:
        run = result[("graph parallel", kind)]
        assert run["losses"] == pytest.approx(losses, rel=1e-5)
        for key, ref in state.items():
            assert rel_err(run["state"][key], ref) <= 1e-5, key


def test_many_chunks_read_rows_at_most_one_epoch_old(runs):
    world, _, results = runs
    for stages in [s for s in (1, 2, 4) if world % s == 0]:
        ages = [r["staleness"] for result in results
                for r in result[(stages, "gcn2", 4)]["rows"] if r["direction"] == "fwd"]
        assert max(ages) == 1, stages  # history is read, never older than one epoch
        one = [r["staleness"] for result in results
               for r in result[(stages, "gcn2", 1)]["rows"]]
        assert max(one) == 0


def test_many_chunks_read_this_epochs_or_last_epochs_rows_as_the_history_promises(runs):
    """Every epoch's loss and the weights after the third equal the chunked
    semantics recomputed from PyG's layers on the whole graph, for the chunks
    the ranks cut (their labels by global id: a halo row's is its owner's)."""
    world, _, results = runs
    for stages in [s for s in (1, 2, 4) if world % s == 0]:
        labels = torch.full((graph().num_nodes,), -1, dtype=torch.long)
        for result in results:
            run = result[(stages, "gcn2", 4)]
            labels[run["global_id"]] = run["labels"]
        assert bool((labels >= 0).all()) and int(labels.max()) == 3, "four chunks per part"
        losses, state = chunked_reference(labels, steps=3)
        _, exact = reference("gcn2", steps=3)
        assert max(rel_err(state[k], exact[k]) for k in exact) > 10 * TOL[torch.float32], \
            "training on history must differ from exact training by more than the tolerance"
        for rank, result in enumerate(results):
            run = result[(stages, "gcn2", 4)]
            for epoch in range(3):
                assert_close(torch.tensor(run["losses"][epoch]), torch.tensor(losses[epoch]),
                             what=f"{stages} stages, rank {rank}: loss at epoch {epoch}")
            for key, ref in state.items():
                assert_close(run["state"][key], ref, what=f"{stages} stages, rank {rank}: {key}")


def test_many_chunks_start_from_the_exact_forward(runs):
    # The tables are filled by an exact forward with the same weights, so the
    # first epoch's loss is the exact one; gradients differ from then on.
    world, _, results = runs
    losses, _ = reference("gcn2")
    for stages in [s for s in (1, 2, 4) if world % s == 0]:
        assert results[0][(stages, "gcn2", 4)]["losses"][0] == pytest.approx(losses[0],
                                                                              rel=1e-5)


def test_a_halo_policy_applies_within_each_stage(runs):
    world, _, results = runs
    for stages in [s for s in (1, 2) if world > s and world % s == 0]:
        def halo(rows):
            return sum(r["bytes_sent"] for r in rows if r["direction"] in ("fwd", "bwd"))

        stale = [r for result in results for r in result[(stages, "stale")]["rows"]]
        exact = [r for result in results for r in result[(stages, "gcn2", 1)]["rows"]]
        assert max(r["staleness"] for r in stale) >= 1
        assert 0 < halo(stale) < halo(exact) * 3 / 2  # 3 steps, one exchange, vs 2 exact
        # with chunks, the compression of the policy applies: int8 rows of 8 values
        # (8 bytes and a 4-byte scale) against float32's 32 bytes
        int8 = [r for result in results for r in result[(stages, "int8")]["rows"]]
        chunked = [r for result in results for r in result[(stages, "gcn2", 4)]["rows"]]
        assert halo(int8) == pytest.approx(halo(chunked) * 12 / 32)


def test_stage_bytes_are_the_hand_count(runs):
    world, folders, results = runs
    num_nodes = graph().num_nodes
    halo = {d: _halo_rows(f) for d, f in folders.items() if d > 1}
    for stages in [s for s in (1, 2, 4) if world % s == 0]:
        for chunks, run in [(k, r) for k in (1, 4) for r in ("gcn2", "recompute")]:
            sent = {"stage": 0, "halo": 0}
            for result in results:
                for r in result[(stages, run, chunks)]["rows"]:
                    if r["step"] == 1 and r["direction"] in ("stage", "fwd", "bwd"):
                        sent["stage" if r["direction"] == "stage" else "halo"] += r["bytes_sent"]
            # GCNII carries h and x0 across a boundary unless each stage recomputes x0.
            state = WIDTH if run == "recompute" and stages > 1 else 2 * WIDTH
            predicted = {c.name: c for c in layout_costs(world, num_nodes, halo, LAYERS, WIDTH,
                                                         state)}[f"{world // stages}x{stages}"]
            # step 1, the second epoch: no fill pass
            assert sent["stage"] == 2 * (stages - 1) * num_nodes * state * 4
            assert sent["stage"] == predicted.stage_bytes
            assert sent["halo"] == predicted.halo_bytes


def _halo_rows(folder):
    from pyg_dist.strategies.layer_pipeline import halo_rows

    return halo_rows(folder)


def test_stages_split_the_layers_as_asked_or_by_cost(runs):
    world, _, results = runs
    for stages in [s for s in (2, 4) if world % s == 0]:
        layers = results[0][(stages, "resgcn", 1)]["layers"]
        assert [len(x) for x in layers] == [LAYERS - stages + 1] + [1] * (stages - 1)
        assert sum(len(x) for x in results[0][(stages, "gcn2", 1)]["layers"]) == LAYERS


def test_errors_name_the_fix(runs):
    world, _, results = runs
    errors = results[0]["errors"]
    assert "does not divide the world size" in errors["stages"]
    assert "re-partition with num_parts" in errors["folder"]
    assert "between 1 and" in errors["chunks"] and "between 1 and" in errors["too many chunks"]
    assert "fewer stages" in errors["layers"] and "at least one" in errors["balance"]
    assert "DeepGNN" in errors["model"]


def brute_force_balance(costs, stages):
    """The least largest stage cost over every split of ``costs`` into
    ``stages`` consecutive non-empty runs, tried one by one."""
    best = math.inf
    for cuts in itertools.combinations(range(1, len(costs)), stages - 1):
        bounds = (0, *cuts, len(costs))
        best = min(best, max(sum(costs[a:b]) for a, b in zip(bounds, bounds[1:])))
    return best


def test_balance_minimises_the_largest_stage():
    assert balance([10, 1, 1, 1, 1, 1], 2) == [1, 5]
    assert balance([1, 1, 1, 1], 4) == [1, 1, 1, 1]
    g = torch.Generator().manual_seed(0)
    cases = [([3, 1, 2, 5, 1, 1, 4], 3), ([3, 1, 2, 5, 1, 1, 4], 2)]
    cases += [(torch.randint(1, 20, (int(n),), generator=g).tolist(), int(s))
              for n, s in [(5, 2), (6, 3), (8, 3), (9, 4), (7, 7)]]
    for costs, stages in cases:
        counts = balance(costs, stages)
        assert len(counts) == stages and all(c >= 1 for c in counts) and sum(counts) == len(costs)
        bounds = [0, *itertools.accumulate(counts)]
        largest = max(sum(costs[a:b]) for a, b in zip(bounds, bounds[1:]))
        assert largest == brute_force_balance(costs, stages), (costs, stages, counts)
    with pytest.raises(ValueError, match="fewer stages"):
        balance([1, 1], 3)


def test_cost_model_prefers_the_pipeline_when_deep():
    shallow = layout_costs(4, 1000, {4: 800, 2: 500}, layers=2, width=64)
    deep = layout_costs(4, 1000, {4: 800, 2: 500}, layers=32, width=64)
    assert best_layout(shallow).name == "4x1"
    assert best_layout(deep).name == "1x4"
    assert {c.name for c in deep} == {"4x1", "2x2", "1x4"}


def test_a_single_process_pipeline_with_one_chunk_is_the_model(tmp_path):
    pyg_dist.partition(graph(), 1, tmp_path / "one")
    for kind in KINDS:
        net = model(kind)
        data = pyg_dist.DistData.load(tmp_path / "one")
        pipe = Pipeline(net, data, chunks=1)
        pipe.train_step(torch.optim.SGD(net.parameters(), lr=LR))
        _, state = reference(kind, steps=1)
        for key, value in state.items():
            assert rel_err(net.state_dict()[key], value) <= 1e-5, (kind, key)
