"""A grid folder written by the ranks of a 3D grid (``write_grid_folder``,
``pyg-dist partition --distributed --grid``) against the shares those ranks
read from the single-process folders it was written from: the same blocks
of every layout, the same runs, node sums, features and labels, and the same
weights after training; bad grids and worlds refused naming the fix."""
import json

import pytest
import torch
from command_line import pyg_dist_command
from graphs import awkward_graph
from worlds import Battery

import pyg_dist
from pyg_dist.config import Adam, Grid3D
from pyg_dist.datasets import write_graph_folder
from pyg_dist.models import GNN
from pyg_dist.runtime import distributed
from pyg_dist.strategies.grid_3d import (
    GRID_FILE,
    Layout,
    load_grid_3d,
    read_grid_folder,
    readers,
    write_grid_folder,
)
from pyg_dist.train import train

SHAPE = (2, 2, 1)
WORLD = 4
EPOCHS = 3
F_IN, HIDDEN, CLASSES = 7, 5, 3
LAYOUTS = [Layout(r, c) for r in range(3) for c in range(3) if r != c]


def share_of(data):
    """Everything a rank's share holds, as plain tensors (blocks of every layout)."""
    out = {"x": data.x}
    for layout in LAYOUTS:
        block = data.block(layout)
        out[f"block {layout}"] = (torch.tensor([*block.rows, *block.cols]), block.rowptr,
                                  block.col, block.weight)
    for axis in range(3):
        out[f"ids {axis}"] = data.global_id(axis)
        out[f"sums {axis}"] = tuple(vars(data.sums(axis)).values())
        out[f"labels {axis}"] = tuple(data.labels(axis).values())
    return out


def trained(data, seed=4242):
    data.dropout.seed = seed  # the same masks on both runs
    torch.manual_seed(0)
    model = GNN("gcn", F_IN, HIDDEN, CLASSES, dropout=0.5)
    train(model, data, EPOCHS, strategy=Grid3D(*SHAPE), progress=False,
          optimizer=Adam(lr=0.01, weight_decay=5e-4))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def battery(graph_dir, parts_dir, root):
    readers.EDGE_CHUNK = 97  # the folders' edges and rows a few at a time
    out = {}
    for name, source in (("graph", graph_dir), ("parts", parts_dir)):
        grid_dir = root / f"grid-{name}"
        write_grid_folder(source, grid_dir, SHAPE, seed=1)
        written = read_grid_folder(grid_dir, SHAPE, seed=1)
        read = load_grid_3d(source, SHAPE, seed=1)
        out[name] = {"written": share_of(written), "read": share_of(read),
                     "order": read.order}
        if name == "graph":
            out["train"] = {"written": trained(read_grid_folder(grid_dir)),
                            "read": trained(load_grid_3d(source, SHAPE, seed=1))}
            out["strategy"] = type(Grid3D(*SHAPE, seed=1).load(grid_dir).order)
    refused = {}
    for key, call in (("shape", lambda: read_grid_folder(root / "grid-graph", (4, 1, 1))),
                      ("seed", lambda: Grid3D(*SHAPE, seed=2).load(root / "grid-graph")),
                      ("exists", lambda: write_grid_folder(graph_dir, root / "grid-graph",
                                                           SHAPE))):
        try:
            call()
        except (ValueError, FileExistsError) as exc:
            refused[key] = str(exc)
    old = root / f"grid-format-1-{distributed.rank()}"  # one folder a rank
    old.mkdir()
    grid = json.loads((root / "grid-graph" / GRID_FILE).read_text())
    (old / GRID_FILE).write_text(json.dumps({**grid, "format": 1}))
    try:
        read_grid_folder(old)
    except ValueError as exc:
        refused["format"] = str(exc)
    out["refused"] = refused
    return out


def prepare(root):
    data = awkward_graph(num_features=F_IN)
    write_graph_folder(data, root / "graph")
    pyg_dist.partition(data, 3, root / "parts", method="random", seed=3)
    return (root / "graph", root / "parts", root), None


BATTERY = Battery(WORLD, battery, prepare, timeout=900)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    yield BATTERY.results(tmp_path_factory)[1]
    BATTERY.release()


def assert_same(a, b, where):
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for i, (u, v) in enumerate(zip(a, b)):
            assert_same(u, v, f"{where}[{i}]")
    elif a is None or b is None:
        assert a is None and b is None, f"{where}: one of them is None"
    else:
        assert a.dtype == b.dtype and torch.equal(a, b), f"{where} differs"


@pytest.mark.parametrize("source", ["graph", "parts"])
def test_each_rank_reads_back_the_share_it_would_read_from_the_folder(ranks, source):
    for rank, r in enumerate(ranks):
        written, read = r[source]["written"], r[source]["read"]
        assert set(written) == set(read)
        for key in read:
            assert_same(written[key], read[key], f"rank {rank} ({source}) {key}")
    # and the shares are the whole graph: each layout's blocks hold every edge once
    edges = awkward_graph(num_features=F_IN).edge_index.size(1)
    for layout in LAYOUTS:
        held = [r[source]["written"][f"block {layout}"][2].numel() for r in ranks]
        # the block of an aggregation that starts in (rows, cols): targets
        # over the spare axis, sources over rows, held by every rank of cols
        copies = SHAPE[layout.cols]
        assert sum(held) == copies * edges, f"{layout}: {sum(held)} edges held"


def test_the_folder_keeps_each_ranks_runs_ids_not_the_whole_order(ranks):
    assert ranks[0]["strategy"] is type(None)  # no [N] order read from a grid folder
    order = ranks[0]["graph"]["order"]
    for r in ranks:
        for axis in range(3):
            ids = r["graph"]["written"][f"ids {axis}"]
            assert ids.numel() < order.numel() or SHAPE[axis] == 1


def test_training_from_the_folder_ends_with_the_weights_of_the_graph_folder(ranks):
    for rank, r in enumerate(ranks):
        for key, value in r["train"]["read"].items():
            assert torch.equal(r["train"]["written"][key], value), f"rank {rank}: {key}"
    first = ranks[0]["train"]["written"]
    assert all(torch.equal(r["train"]["written"][k], first[k]) for r in ranks for k in first)


def test_another_grid_seed_format_or_a_taken_folder_is_refused_naming_the_fix(ranks):
    refused = ranks[0]["refused"]
    assert "holds the grid 2x2x1, not 4x1x1; train with --grid 2x2x1" in refused["shape"]
    assert "seed 1, not 2; train with Grid3D(seed=1)" in refused["seed"]
    assert "would overwrite" in refused["exists"] and "overwrite=True" in refused["exists"]
    assert "grid folder of format 1, not 2 (each rank's piece of the input features); write " \
        "the grid folder again" in refused["format"]


def cli(args, cwd):
    """``pyg-dist ARGS`` in this process (tests/command_line.py)."""
    return pyg_dist_command(*args, cwd=cwd)


def test_the_cli_writes_a_grid_folder_on_the_grids_ranks_and_trains_from_it(tmp_path):
    graph = ["--dataset", "synthetic", "--num-nodes", "300"]
    assert cli(["convert", *graph, "--out", "graph"], tmp_path).returncode == 0
    done = cli(["partition", "--distributed", "--input", "graph", "--grid", "2x1x1",
                "--out", "grid"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    grid = json.loads((tmp_path / "grid" / GRID_FILE).read_text())
    assert grid["shape"] == [2, 1, 1] and len(grid["rank_sha256"]) == 2
    assert json.loads(done.stdout.splitlines()[-1])["shape"] == [2, 1, 1]
    # the same training as from a partition folder of the same graph, read as blocks
    assert cli(["partition", *graph, "--parts", "2", "--out", "parts"], tmp_path).returncode == 0
    runs = {}
    for folder in ("grid", "parts"):
        done = cli(["train", "--parts-dir", folder, "--strategy", "grid-3d", "--grid", "2x1x1",
                    "--epochs", "3", "--save", f"{folder}.pt"], tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        runs[folder] = torch.load(tmp_path / f"{folder}.pt", weights_only=True)
    assert runs["grid"].keys() == runs["parts"].keys()
    for key, value in runs["parts"].items():
        assert torch.equal(runs["grid"][key], value), key
    bad = cli(["partition", "--distributed", "--input", "graph", "--grid", "2x1x1",
               "--parts", "3", "--out", "grid2"], tmp_path)
    assert bad.returncode != 0 and "pass --parts 2 (or leave it out)" in bad.stderr
    assert not (tmp_path / "grid2").exists()
