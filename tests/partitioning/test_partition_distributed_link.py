"""Link splits cut on the ranks: ``partition_distributed`` of a graph folder
holding a link split stores every supervision edge once, on the part that
owns its source node, with its label, exactly as the single-process
``pyg_dist.partition`` stores it given the same node-to-part assignment; and
a folder whose split does not fit the graph fails every rank before anything
is written.

One launch per world size (2, 3 and 4 ranks) runs every case: RandomLinkSplit
of an undirected and of a directed graph (self-loops, duplicate edges) and
OGB's ``(data, split_edge)``, all with isolated nodes, under the random and
the METIS-coarse cut, the random one with shuffle rounds of a few rows."""
import functools
import random

import numpy as np
import pytest
import torch
from graphs import awkward_graph
from torch_geometric.data import Data
from torch_geometric.transforms import RandomLinkSplit
from worlds import Battery

import pyg_dist
from pyg_dist.datasets import write_graph_folder
from pyg_dist.partitioning import partition_distributed, partitioner, read_meta, read_part, shuffle
from pyg_dist.runtime import distributed

WORLD_SIZES = (2, 3, 4)
METHODS = ("random", "metis-coarse")
CASES = ("undirected", "directed", "ogb")
SEED = 3
#: Rows per shuffle round under the random cut: every split and the edges
#: move in several rounds, of different counts on different ranks.
ROUND_ROWS = 16
#: Folders whose split does not fit: what is wrong, and what the error says.
BAD = {"outside": ("edge_label_index.npy' names targets outside", "checking the input"),
       "short-labels": ("one label per edge", "opening"),
       "nan-label": ("NaN or infinite labels", "checking the input")}
FIX = "pyg_dist.datasets.write_graph_folder(split, out_dir)"


def graph(num_nodes, num_edges, isolated, seed):
    """An undirected graph whose ``isolated`` nodes (anywhere in the id range)
    have no edge, with features, labels and a training mask."""
    gen = torch.Generator().manual_seed(seed)
    live = num_nodes - isolated
    edge_index = torch.randint(0, live, (2, num_edges), generator=gen)
    edge_index = torch.unique(edge_index[:, edge_index[0] != edge_index[1]], dim=1)
    edge_index = torch.unique(torch.cat([edge_index, edge_index.flip(0)], 1), dim=1)
    perm = torch.randperm(num_nodes, generator=gen)
    return Data(x=torch.randn(num_nodes, 5, generator=gen), edge_index=perm[edge_index],
                y=torch.randint(0, 3, (num_nodes,), generator=gen),
                train_mask=torch.rand(num_nodes, generator=gen) < 0.5, num_nodes=num_nodes)


def ogb_pair(seed):
    """OGB's ``(data, split_edge)``: messages pass along the training edges;
    validation and test hold out positives and list negatives, some of them
    from isolated nodes."""
    data = awkward_graph(num_nodes=110, num_edges=420, num_isolated=9, seed=seed,
                         num_features=4)
    isolated = torch.nonzero(torch.bincount(data.edge_index.view(-1),
                                            minlength=data.num_nodes) == 0).view(-1)
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(data.num_edges, generator=gen)
    val, test, train = order[:40], order[40:90], order[90:]
    edges = data.edge_index.t()

    def negatives(count):
        pairs = torch.randint(0, data.num_nodes, (count, 2), generator=gen)
        pairs[:len(isolated), 0] = isolated  # sources without an edge
        return pairs

    split_edge = {"train": {"edge": edges[train]},
                  "valid": {"edge": edges[val], "edge_neg": negatives(30)},
                  "test": {"edge": edges[test], "edge_neg": negatives(45)}}
    graph_data = Data(x=data.x, y=data.y, edge_index=data.edge_index[:, train],
                      num_nodes=data.num_nodes)
    return graph_data, split_edge


@functools.cache
def link_split(case):
    """The case's link split, as PyG's or OGB's loaders give it."""
    torch.manual_seed(SEED)
    random.seed(SEED)  # PyG draws the validation and test negatives with Python's random
    if case == "undirected":
        data = graph(num_nodes=120, num_edges=260, isolated=10, seed=SEED)
        return RandomLinkSplit(num_val=0.15, num_test=0.15, is_undirected=True,
                               add_negative_train_samples=False)(data)
    if case == "directed":
        data = awkward_graph(num_nodes=130, num_edges=600, num_isolated=12, seed=SEED,
                             num_features=4)
        return RandomLinkSplit(num_val=0.1, num_test=0.2, is_undirected=False)(data)
    return ogb_pair(SEED)


def expected(case):
    """Each split's supervision edges and labels, read off PyG's graphs or
    OGB's split by hand: positives, then OGB's negatives with label 0."""
    split = link_split(case)
    if case != "ogb":
        return {name: (d.edge_label_index, d.edge_label.float())
                for name, d in zip(("train", "val", "test"), split)}
    out = {}
    for key, name in (("train", "train"), ("valid", "val"), ("test", "test")):
        pos = split[1][key]["edge"].t()
        neg = split[1][key].get("edge_neg", torch.empty(0, 2, dtype=torch.long)).t()
        out[name] = (torch.cat([pos, neg], 1),
                     torch.cat([torch.ones(pos.size(1)), torch.zeros(neg.size(1))]))
    return out


def message_graph(case):
    split = link_split(case)
    return split[0]


def bad_folders(root):
    """The directed case's folder, once per entry of :data:`BAD`, its split broken."""
    folders = {}
    for name in BAD:
        folder = root / name
        write_graph_folder(link_split("directed"), folder)
        if name == "outside":  # the last edge: the last rank's slice
            file = folder / "link" / "val" / "edge_label_index.npy"
            index = np.load(file)
            index[1, -1] = message_graph("directed").num_nodes
            np.save(file, index)
        else:
            file = folder / "link" / ("test" if name == "short-labels" else "train") / \
                "edge_label.npy"
            label = np.load(file)
            if name == "short-labels":
                label = label[:-1]
            else:
                label[3] = np.nan
            np.save(file, label)
        folders[name] = str(folder)
    return folders


def prepare(world_size, root):
    dirs = {"graph": {}, "out": {}, "bad": bad_folders(root / "bad"), "bad_out": {}}
    for case in CASES:
        dirs["graph"][case] = str(root / "graphs" / case)
        write_graph_folder(link_split(case), dirs["graph"][case])
        for method in METHODS:
            dirs["out"][case, method] = str(root / "parts" / f"{case}-{method}")
    for name in BAD:
        dirs["bad_out"][name] = str(root / "bad-parts" / name)
    return (dirs,), {"dirs": dirs, "root": root}


def error_of(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the error is what the tests check
        return type(exc).__name__, str(exc)
    return None


def battery(dirs):
    """Every rank: each case under each cut, each part loaded back with
    ``DistData.load``; then each bad folder."""
    out = {"meta": {}, "loaded": {}, "bad": {}}
    rows = shuffle.CHUNK
    for case in CASES:
        for method in METHODS:
            folder = dirs["out"][case, method]
            shuffle.CHUNK = ROUND_ROWS if method == "random" else rows
            try:
                out["meta"][case, method] = partition_distributed(dirs["graph"][case], folder,
                                                                  method=method, seed=SEED)
            finally:
                shuffle.CHUNK = rows
            data = pyg_dist.DistData.load(folder)
            out["loaded"][case, method] = (data.link_splits, {
                split: data.supervision(split).state() for split in data.link_splits})
    for name, folder in dirs["bad"].items():
        out["bad"][name] = error_of(
            lambda: partition_distributed(folder, dirs["bad_out"][name]))  # noqa: B023
    out["rank"] = distributed.rank()
    return out


RUNS = {world_size: Battery(world_size, battery, functools.partial(prepare, world_size),
                            timeout=300)
        for world_size in WORLD_SIZES}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return lambda world_size: RUNS[world_size].results(tmp_path_factory)


def parts_and_owner(folder):
    """Every part file of ``folder`` and each node's part, from the parts' global ids."""
    meta = read_meta(folder)
    parts = [read_part(folder, p, meta) for p in range(meta.num_parts)]
    owner = torch.full((meta.num_nodes,), -1, dtype=torch.long)
    for p, content in enumerate(parts):
        owner[content["graph"]["global_id"]] = p
    assert bool((owner >= 0).all()), "every node has a part"
    return meta, parts, owner


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("method", METHODS)
def test_each_supervision_edge_lands_once_on_its_sources_part(runs, world_size, case, method):
    context, results = runs(world_size)
    meta, parts, owner = parts_and_owner(context["dirs"]["out"][case, method])
    assert meta.num_parts == world_size
    splits = expected(case)
    assert meta.link_splits == list(splits)
    assert all(r["meta"][case, method] == meta for r in results), "every rank returns the meta"
    degree = torch.bincount(message_graph(case).edge_index.view(-1), minlength=meta.num_nodes)
    for name, (index, label) in splits.items():
        ids = torch.cat([content["link"][name]["id"] for content in parts])
        assert torch.equal(ids.sort().values, torch.arange(index.size(1))), \
            f"{name}: every edge stored once"
        for p, content in enumerate(parts):
            stored = content["link"][name]
            assert torch.equal(stored["index"], index[:, stored["id"]]), f"{name}, part {p}"
            assert torch.equal(stored["label"], label[stored["id"]]), f"{name}, part {p}"
            assert bool((owner[stored["index"][0]] == p).all()), \
                f"{name}: part {p} holds edges whose source another part owns"
            assert torch.equal(stored["id"], stored["id"].sort().values), "in the split's order"
        if name != "train":  # negatives from nodes without an edge are stored too
            assert bool((degree[index[0]] == 0).any()), f"{case}/{name}: no isolated source"
    assert any(bool((label == 0).any()) for _, label in splits.values()), "with negatives"


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("method", METHODS)
def test_parts_equal_the_single_process_partition_of_the_same_owners(runs, tmp_path,
                                                                     monkeypatch, world_size,
                                                                     case, method):
    """``pyg_dist.partition`` of the same link split, its cut replaced by
    the owners the ranks chose: every part holds the same supervision edges
    (and local graph and node rows), tensor for tensor."""
    context, _ = runs(world_size)
    meta, parts, owner = parts_and_owner(context["dirs"]["out"][case, method])
    monkeypatch.setattr(partitioner, "random_cut", lambda *args: owner.clone())
    single = pyg_dist.partition(link_split(case), world_size, tmp_path / "single",
                                method="random")
    assert single.link_splits == meta.link_splits
    assert single.edge_cut == meta.edge_cut
    for p, content in enumerate(parts):
        reference = read_part(tmp_path / "single", p, single)
        assert reference["link"].keys() == content["link"].keys()
        for key in ("link", "graph", "node"):
            for name, value in reference[key].items():
                got = content[key][name]
                if key == "link":
                    for field, tensor in value.items():
                        assert got[field].dtype == tensor.dtype, f"part {p}: {name}/{field}"
                        assert torch.equal(got[field], tensor), f"part {p}: {name}/{field}"
                else:
                    assert torch.equal(got, value), f"part {p}: {key}/{name}"


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_dist_data_reads_the_supervision_edges_of_its_part(runs, world_size):
    context, results = runs(world_size)
    for case in CASES:
        for method in METHODS:
            folder = context["dirs"]["out"][case, method]
            meta = read_meta(folder)
            for result in results:
                names, loaded = result["loaded"][case, method]
                assert names == meta.link_splits
                stored = read_part(folder, result["rank"], meta)["link"]
                for name in names:
                    for field, value in stored[name].items():
                        assert torch.equal(loaded[name][field], value), \
                            f"{case}/{method} rank {result['rank']}: {name}/{field}"


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("name", BAD)
def test_a_split_that_does_not_fit_fails_every_rank_and_writes_nothing(runs, world_size, name):
    context, results = runs(world_size)
    errors = [r["bad"][name] for r in results]
    assert errors[0] is not None, f"{name} was accepted"
    kind, message = errors[0]
    assert kind == "ValueError", message
    says, step = BAD[name]
    assert message.startswith(f"'partition_distributed' {step}"), message
    assert says in message and FIX in message, message
    if name == "short-labels":  # every rank opens the folder: every rank finds it
        assert all(e == errors[0] for e in errors), errors
        assert f"failed alike on all {world_size} ranks" in message, message
    else:  # only the rank whose slice holds the edge finds it; every rank raises its error
        assert all(e == errors[0] for e in errors), "every rank raises the same error"
        rank = world_size - 1 if name == "outside" else 0
        assert f"failed on 1 of {world_size} ranks" in message, message
        assert f"rank {rank} " in message, message
    out = context["root"] / "bad-parts"
    assert not (out / name).exists() and not list(out.glob(f".{name}.tmp-*"))
