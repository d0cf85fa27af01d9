"""The layer pipeline draws graph-parallel training's dropout masks.

With dropout on, every grid of parts × stages with one chunk trains exactly as
graph-parallel training (same per-epoch losses, same final weights), with the
initial rows sent or recomputed; with more chunks the first epoch (whose
history rows are this epoch's) has graph-parallel training's loss. One battery
of four ranks runs every layout."""
import pytest
import torch
from graphs import awkward_graph
from tolerances import TOL, assert_close
from worlds import Battery

import pyg_dist
from pyg_dist.config import Adam
from pyg_dist.models import DeepGNN
from pyg_dist.strategies.layer_pipeline import Pipeline, load
from pyg_dist.train import train

WORLD = 4
KINDS = ("gcn2", "resgcn")
LAYERS, WIDTH, CLASSES, DROPOUT, EPOCHS = 4, 8, 3, 0.5, 4
LR, WEIGHT_DECAY = 0.01, 5e-4  # pyg_dist.train's defaults
SEED = 11  # torch's seed on every rank before training (rank 0's draws the masks' seed)
#: (stages, chunks, initial_rows) of every pipeline run
LAYOUTS = [(s, c, "send") for s in (1, 2, 4) for c in (1, 2)] + [
    (s, 1, "recompute") for s in (2, 4)]


def graph():
    data = awkward_graph(num_features=6)
    gen = torch.Generator().manual_seed(1)
    data.y = torch.randint(0, CLASSES, (data.num_nodes,), generator=gen)
    data.train_mask = torch.rand(data.num_nodes, generator=gen) < 0.6
    data.val_mask = data.test_mask = ~data.train_mask
    return data


def model(kind, dropout=DROPOUT):
    torch.manual_seed(3)
    return DeepGNN(kind, 6, WIDTH, CLASSES, layers=LAYERS, dropout=dropout)


def state(net):
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def graph_parallel(folder, kind, dropout=DROPOUT):
    net = model(kind, dropout)
    data = pyg_dist.DistData.load(folder)
    torch.manual_seed(SEED)
    result = train(net, data, EPOCHS, optimizer=Adam(lr=LR, weight_decay=WEIGHT_DECAY),
                   progress=False)
    return {"losses": [e.loss for e in result.history], "state": state(net)}


def pipelined(folders, kind, stages, chunks, initial_rows):
    net = model(kind)
    data = load(folders[WORLD // stages], stages)
    torch.manual_seed(SEED)
    pipe = Pipeline(net, data, stages=stages, chunks=chunks, initial_rows=initial_rows)
    optimizer = torch.optim.Adam(net.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    losses = []
    for _ in range(EPOCHS):
        losses.append(pipe.train_step(optimizer))
        pipe.evaluate()
        data.ledger.next_step()
    pipe.gather_parameters()
    return {"losses": losses, "state": state(net)}


def body(folders):
    out = {"no dropout": graph_parallel(folders[WORLD], "gcn2", dropout=0.0)}
    for kind in KINDS:
        out[kind] = graph_parallel(folders[WORLD], kind)
        for layout in LAYOUTS:
            out[(kind, *layout)] = pipelined(folders, kind, *layout)
    return out


def prepare(root):
    folders = {}
    for parts in {WORLD // s for s, _, _ in LAYOUTS}:
        folders[parts] = str(root / f"parts{parts}")
        pyg_dist.partition(graph(), parts, folders[parts])
    return (folders,), None


RUNS = Battery(WORLD, body, prepare)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return RUNS.results(tmp_path_factory)[1]


def losses_close(ours, ref, what):
    assert_close(torch.tensor(ours, dtype=torch.float64), torch.tensor(ref, dtype=torch.float64),
                 what=f"{what}: losses {ours} vs {ref}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layout", [lay for lay in LAYOUTS if lay[1] == 1])
def test_one_chunk_trains_as_graph_parallel_with_dropout(runs, kind, layout):
    ref = runs[0][kind]
    for rank, result in enumerate(runs):
        run, what = result[(kind, *layout)], f"{kind} {layout} on rank {rank}"
        losses_close(run["losses"], ref["losses"], what)
        for key, value in ref["state"].items():
            assert_close(run["state"][key], value, what=f"{what}: {key}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layout", [lay for lay in LAYOUTS if lay[1] > 1])
def test_many_chunks_draw_the_same_masks(runs, kind, layout):
    ref = runs[0][kind]
    for rank, result in enumerate(runs):
        run = result[(kind, *layout)]
        losses_close(run["losses"][:1], ref["losses"][:1], f"{kind} {layout} on rank {rank}")


def test_dropout_is_on(runs):
    """A guard on the test itself: the masks change the losses."""
    ours, without = runs[0]["gcn2"]["losses"], runs[0]["no dropout"]["losses"]
    assert max(abs(a - b) for a, b in zip(ours, without)) > 1e3 * TOL[torch.float32]
