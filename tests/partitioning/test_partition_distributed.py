"""The distributed partitioner on real gloo ranks: its folders against the
single-process builder and PyG, its cut against the single-process cut, and
failures (bad input, a damaged file only one rank reads, any exception of one
rank, a lost rank, a raising rank, a full disk) that fail every rank at once
and leave no complete-looking folder.

One launch of 4 ranks runs every multi-rank case (see :func:`battery`); the
test functions check its results."""
import errno
import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from graphs import awkward_graph
from tolerances import assert_close
from torch_geometric.nn import GCNConv

import pyg_dist
from pyg_dist.config import Adam
from pyg_dist.datasets import GraphFolder, community_graph, write_graph_folder
from pyg_dist.models import GNN
from pyg_dist.partitioning import (
    PartPlan,
    dist_cut,
    dist_partitioner,
    partition_distributed,
    read_meta,
    read_part,
)
from pyg_dist.partitioning.dist_cut import _permute, heaviest_entries, permutation_cut
from pyg_dist.runtime import distributed, peers
from pyg_dist.train import train

WORLD = 4
SEED = 5
#: Seconds a collective waits for a lost rank before the others give up.
WAIT = 8.0
TRAIN_EPOCHS, LR, WEIGHT_DECAY = 3, 0.01, 5e-4
BAD_INPUTS = ("missing-file", "short-x", "negative-id", "id-too-large", "nan-x")
#: Damaged copies of the graph folder that one rank alone reads (its own copy,
#: as on a host of its own): the file damaged and what the error says of it.
ONE_RANK_READS = {"empty-npy": ("x.npy", "is not a .npy file (it is empty)"),
                  "node-list": ("graph.json", "'node' must be an object of attribute names")}
#: The rank that reads a damaged copy.
BAD_RANK = 1
#: Size of the tmpfs the parts cannot all fit in (each part of the test
#: graph takes 12-14 KB; the four parts need more than this).
TMPFS_BYTES = 24 * 1024


def mount_small_tmpfs(path):
    """Mounts a tmpfs of :data:`TMPFS_BYTES` at ``path``; returns why it
    could not (it needs root) or :obj:`None`."""
    path.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs",
                               str(path)], capture_output=True, text=True, timeout=30)
    except OSError as exc:
        return f"mount: {exc}"
    return (done.stderr.strip() or f"mount exited {done.returncode}") if done.returncode else None


def bad_folders(data, root):
    """One graph folder per kind of bad input: ``data``'s folder, then one
    file broken."""
    folders = {}
    for name in BAD_INPUTS:
        folder = root / name
        write_graph_folder(data, folder)
        edges, x = np.load(folder / "edges.npy"), np.load(folder / "x.npy")
        if name == "missing-file":
            (folder / "x.npy").unlink()
        elif name == "short-x":
            np.save(folder / "x.npy", x[:-1])
        elif name == "negative-id":
            edges[0, edges.shape[1] * 5 // 8] = -1  # in rank 2's slice
            np.save(folder / "edges.npy", edges)
        elif name == "id-too-large":
            edges[1, 3] = data.num_nodes
            np.save(folder / "edges.npy", edges)
        elif name == "nan-x":
            x[data.num_nodes - 2, 1] = np.nan  # in rank 3's block
            np.save(folder / "x.npy", x)
        folders[name] = str(folder)
    return folders


def own_copies(data, root):
    """Per damage in :data:`ONE_RANK_READS`, a copy of ``data``'s folder per
    rank, the copy of :data:`BAD_RANK` damaged."""
    copies = {}
    for name in ONE_RANK_READS:
        copies[name] = [str(root / name / f"rank{r}") for r in range(WORLD)]
        for folder in copies[name]:
            write_graph_folder(data, folder)
        bad = Path(copies[name][BAD_RANK])
        if name == "empty-npy":
            (bad / "x.npy").write_bytes(b"")
        else:
            info = json.loads((bad / "graph.json").read_text())
            info["node"] = sorted(info["node"].values())  # a list where an object belongs
            (bad / "graph.json").write_text(json.dumps(info))
    return copies


def timed_error_of(fn):
    start = time.perf_counter()
    error = error_of(fn)
    return error, time.perf_counter() - start


def error_of(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the error is what the tests check
        return type(exc).__name__, str(exc)
    return None


def train_on(folder, state, classes):
    data = pyg_dist.DistData.load(folder)
    model = GNN("gcn", data.x.size(1), 8, classes, dropout=0.0)
    model.load_state_dict(state)
    train(model, data, TRAIN_EPOCHS, progress=False,
          optimizer=Adam(lr=LR, weight_decay=WEIGHT_DECAY))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def battery(dirs, state, classes):
    """Every rank: partition (random, metis-coarse, on a group of one, the
    community graph), train on a result, then the failures, the lost rank last."""
    rank, out = distributed.rank(), {}
    graph, outs = dirs["graph"], dirs["out"]
    out["random"] = partition_distributed(graph, outs["random"], method="random", seed=SEED)
    out["coarse"] = partition_distributed(graph, outs["coarse"], seed=SEED)
    one = distributed.new_group([0])
    if rank == 0:
        out["one"] = partition_distributed(graph, outs["one"], method="random", seed=SEED,
                                           group=one)
    out["trained"] = train_on(outs["coarse"], state, classes)
    start = time.perf_counter()
    out["quality"] = partition_distributed(dirs["community"], outs["quality"], seed=0)
    out["quality_seconds"] = time.perf_counter() - start
    out["heaviest"] = heaviest_on_ranks(rank)
    out["sparse"] = sparse_cut(dirs["community"], outs["sparse"])

    out["bad"] = {}
    for name, path in dirs["bad"].items():
        out["bad"][name] = error_of(lambda: partition_distributed(path, outs[name]))  # noqa: B023
    out["one_rank"] = {}
    for name, copies in dirs["own_copies"].items():
        out["one_rank"][name] = timed_error_of(
            lambda: partition_distributed(copies[rank], outs[name]))  # noqa: B023
    check_nodes = GraphFolder.check_nodes
    if rank == 2:
        def out_of_memory(self, lo, hi):
            raise MemoryError("rank 2 ran out of memory checking its nodes")
        GraphFolder.check_nodes = out_of_memory
    out["memory"] = timed_error_of(lambda: partition_distributed(graph, outs["memory"]))
    GraphFolder.check_nodes = check_nodes
    out["metis"] = error_of(lambda: partition_distributed(graph, outs["metis"], method="metis"))
    out["exists"] = error_of(lambda: partition_distributed(graph, outs["random"]))

    save = dist_partitioner.torch.save
    if rank == 2:
        def full_disk(obj, path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        dist_partitioner.torch.save = full_disk
    out["enospc"] = error_of(lambda: partition_distributed(graph, outs["enospc"]))
    dist_partitioner.torch.save = save
    if dirs["tmpfs"] is not None:  # a real disk that fills up while the parts are written
        out["tmpfs"] = error_of(lambda: partition_distributed(graph, dirs["tmpfs"] + "/parts"))

    # Rank 1 is lost (as if killed) while the parts are written.
    done = [Path(dirs["done"]) / f"{r}" for r in range(WORLD) if r != 1]
    if rank == 1:
        def lost(path):
            peers.close()
            while not all(d.exists() for d in done):
                time.sleep(0.1)
            raise SystemExit(0)
        dist_partitioner.file_sha256 = lost
        try:
            partition_distributed(graph, outs["lost"])
        except SystemExit:
            pass
        return out
    out["lost"] = error_of(lambda: partition_distributed(graph, outs["lost"]))
    (Path(dirs["done"]) / f"{rank}").touch()
    while not all(d.exists() for d in done):  # no rank leaves while another probes it
        time.sleep(0.1)
    return out


def weighted_entries(rank):
    """This rank's piece of a weighted graph: keys and weights from 1 to 300."""
    rng = np.random.default_rng(rank)
    size = 200 + 50 * rank
    return rng.integers(0, 10**6, size), (rng.pareto(1.2, size) + 1).astype(np.int64).clip(1, 300)


def heaviest_on_ranks(rank):
    keys, weights = weighted_entries(rank)
    return {budget: heaviest_entries(keys, weights, budget)
            for budget in (None, 10**6, 300, 40, 0)}


def sparse_cut(graph, out):
    """metis-coarse with a cluster graph trimmed to 2% of a slice's edges."""
    factor, floor = dist_cut.COARSE_ENTRIES_PER_SLICE_EDGE, dist_cut.COARSE_ENTRIES_FLOOR
    assign, coarse = dist_partitioner.coarse_metis_assign, {}

    def recorded(*args, **kwargs):
        part, coarse["graph"] = assign(*args, **kwargs)
        coarse["max_entries"] = kwargs["max_entries"]
        return part, coarse["graph"]

    dist_cut.COARSE_ENTRIES_PER_SLICE_EDGE, dist_cut.COARSE_ENTRIES_FLOOR = 0.02, 0
    dist_partitioner.coarse_metis_assign = recorded
    try:
        meta = partition_distributed(graph, out, seed=0)
    finally:
        dist_cut.COARSE_ENTRIES_PER_SLICE_EDGE, dist_cut.COARSE_ENTRIES_FLOOR = factor, floor
        dist_partitioner.coarse_metis_assign = assign
    return meta, coarse


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist-partition")
    data = awkward_graph(num_nodes=150, num_edges=700, num_features=5, seed=3)
    community = community_graph(num_nodes=20_000, seed=0)
    write_graph_folder(data, root / "graph")
    write_graph_folder(community, root / "community")
    (root / "done").mkdir()
    tmpfs = root / "tmpfs"
    no_tmpfs = mount_small_tmpfs(tmpfs)
    names = ["random", "coarse", "one", "quality", "sparse", "metis", "enospc", "lost",
             "memory", *BAD_INPUTS, *ONE_RANK_READS]
    dirs = {"graph": str(root / "graph"), "community": str(root / "community"),
            "bad": bad_folders(data, root / "bad"), "done": str(root / "done"),
            "own_copies": own_copies(data, root / "own"),
            "out": {name: str(root / "out" / name) for name in names},
            "tmpfs": None if no_tmpfs else str(tmpfs)}
    torch.manual_seed(0)
    classes = int(data.y.max()) + 1
    state = GNN("gcn", data.num_features, 8, classes, dropout=0.0).state_dict()
    start = time.perf_counter()
    try:
        results = pyg_dist.launch(battery, WORLD, args=(dirs, state, classes), timeout=300,
                                  comm_timeout=WAIT)
        print(f"battery of {WORLD} ranks: {time.perf_counter() - start:.1f} s")
        left_on_tmpfs = None if no_tmpfs else sorted(p.name for p in tmpfs.iterdir())
    finally:
        if not no_tmpfs:
            subprocess.run(["umount", str(tmpfs)], check=True, timeout=30)
    yield {"root": root, "data": data, "community": community, "dirs": dirs,
           "results": results, "state": state, "classes": classes,
           "no_tmpfs": no_tmpfs, "left_on_tmpfs": left_on_tmpfs}


def owners(folder, meta):
    parts = [read_part(folder, p, meta) for p in range(meta.num_parts)]
    owner = torch.empty(meta.num_nodes, dtype=torch.long)
    for p, content in enumerate(parts):
        owner[content["graph"]["global_id"]] = p
    return parts, owner


def check_folder(folder, data):
    """The folder's invariants, checked against ``data`` directly; returns the
    parts and the owner of each node."""
    meta = read_meta(folder)
    parts, owner = owners(folder, meta)
    num_parts = meta.num_parts
    owned = torch.cat([c["graph"]["global_id"] for c in parts])
    assert torch.equal(owned.sort().values, torch.arange(data.num_nodes)), "owned once"
    edge_ids = torch.cat([c["graph"]["edge_id"] for c in parts])
    assert torch.equal(edge_ids.sort().values, torch.arange(data.num_edges)), "stored once"
    in_degree = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
    for p, content in enumerate(parts):
        g = content["graph"]
        target = g["global_id"].repeat_interleave(g["rowptr"].diff())
        source = torch.cat([g["global_id"], g["halo_global_id"]])[g["col"]]
        assert torch.equal(target, data.edge_index[1, g["edge_id"]])
        assert torch.equal(source, data.edge_index[0, g["edge_id"]])
        assert bool((owner[target] == p).all()), "an edge lives with its target's owner"
        assert torch.equal(g["halo_in_degree"], in_degree[g["halo_global_id"]])
        for name in meta.node_attrs:
            assert torch.equal(content["node"][name], data[name][g["global_id"]]), name
        for q in range(num_parts):  # what q sends p is p's halo block from q
            halo = g["halo_global_id"][g["halo_ptr"][q]:g["halo_ptr"][q + 1]]
            assert bool((owner[halo] == q).all())
            sender = parts[q]["graph"]
            sent = sender["send_idx"][sender["send_ptr"][p]:sender["send_ptr"][p + 1]]
            assert torch.equal(sender["global_id"][sent], halo)
    assert meta.part_sizes == torch.bincount(owner, minlength=num_parts).tolist()
    cut = int((owner[data.edge_index[0]] != owner[data.edge_index[1]]).sum())
    assert meta.edge_cut == cut
    return parts, owner


def assert_same_as_builder(parts, owner, data):
    """Every part equals the single-process builder's for the same assignment."""
    plan = PartPlan.create(data.edge_index, owner, len(parts))
    for p, content in enumerate(parts):
        expected = plan.build(p)
        for name, value in vars(expected).items():
            assert torch.equal(content["graph"][name], value), f"part {p}: {name}"


@pytest.mark.parametrize("method", ["random", "coarse"])
def test_folders_hold_the_graph_and_consistent_halo_plans(setup, method):
    data = setup["data"]
    folder = setup["dirs"]["out"][method]
    parts, owner = check_folder(folder, data)
    assert_same_as_builder(parts, owner, data)
    meta = read_meta(folder)
    assert meta == setup["results"][0][method]
    assert all(r[method] == meta for r in setup["results"]), "every rank returns the meta"
    assert meta.num_classes == int(data.y.max()) + 1
    assert meta.train_sizes == torch.bincount(owner[data.train_mask], minlength=WORLD).tolist()


def test_random_cut_is_a_balanced_permutation_of_the_ids(setup):
    data = setup["data"]
    _, owner = owners(setup["dirs"]["out"]["random"], read_meta(setup["dirs"]["out"]["random"]))
    # Computed here in one process over all ids: the ranks' blocks agree with it.
    expected = permutation_cut(np.arange(data.num_nodes), data.num_nodes, WORLD, SEED)
    assert torch.equal(owner, torch.from_numpy(expected))
    sizes = torch.bincount(owner, minlength=WORLD)
    assert int(sizes.max() - sizes.min()) <= 1


@pytest.mark.parametrize("count", [1, 2, 7, 64, 1000, 4099])
def test_permutation_cut_permutes_the_ids(count):
    values = _permute(np.arange(count), count, seed=3)
    assert np.array_equal(np.sort(values), np.arange(count))
    assert count < 64 or not np.array_equal(values, np.arange(count))


def test_one_rank_group_writes_the_single_process_folder(setup, tmp_path):
    data = setup["data"]
    folder = setup["dirs"]["out"]["one"]
    parts, owner = check_folder(folder, data)
    assert bool((owner == 0).all())
    reference = pyg_dist.partition(data, 1, tmp_path / "single", method="random", seed=SEED)
    single = read_part(tmp_path / "single", 0, reference)
    for key in ("graph", "node"):
        assert single[key].keys() == parts[0][key].keys()
        for name, value in single[key].items():
            assert torch.equal(parts[0][key][name], value), f"{key}/{name}"
    meta = read_meta(folder)
    for field in ("num_nodes", "num_edges", "edge_cut", "part_sizes", "halo_sizes",
                  "train_sizes", "num_classes", "node_attrs"):
        assert getattr(meta, field) == getattr(reference, field), field


def test_training_on_the_folder_equals_single_process_pyg(setup):
    data, state = setup["data"], setup["state"]
    layers = torch.nn.ModuleList([GCNConv(data.num_features, 8), GCNConv(8, setup["classes"])])
    layers.load_state_dict({k[len("convs."):]: v for k, v in state.items()})
    optimizer = torch.optim.Adam(layers.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    for _ in range(TRAIN_EPOCHS):
        optimizer.zero_grad()
        out = layers[1](layers[0](data.x, data.edge_index).relu(), data.edge_index)
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
    for r, result in enumerate(setup["results"]):
        for name, value in layers.state_dict().items():
            assert_close(result["trained"][f"convs.{name}"], value,
                         what=f"rank {r}: {name} after {TRAIN_EPOCHS} steps")


def test_cut_quality_matches_single_process_metis_coarse(setup, tmp_path):
    community = setup["community"]
    folder = setup["dirs"]["out"]["quality"]
    ours = read_meta(folder)
    _, owner = check_folder(folder, community)
    reference = pyg_dist.partition(community, WORLD, tmp_path / "single", method="metis-coarse",
                                   seed=0)
    ratio = ours.edge_cut / reference.edge_cut
    print(f"distributed / single-process metis-coarse edge cut: {ours.edge_cut} / "
          f"{reference.edge_cut} = {ratio:.3f}")
    assert ratio <= 1.05
    assert max(ours.part_sizes) <= 1.05 * community.num_nodes / WORLD
    # A cut as bad as random would be far above: the coarse cut follows the communities.
    assert ours.edge_cut < 0.5 * community.num_edges * (WORLD - 1) / WORLD


def test_heaviest_entries_keep_the_heaviest_octaves_that_fit(setup):
    keys, weights = (np.concatenate(a) for a in zip(*map(weighted_entries, range(WORLD))))
    for budget in (None, 10**6, 300, 40, 0):
        # The smallest power of two whose entries at or above it fit the budget.
        threshold = 1
        while budget is not None and int((weights >= threshold).sum()) > budget:
            threshold *= 2
        kept = weights >= threshold
        got = [r["heaviest"][budget] for r in setup["results"]]
        assert all(g[2] == threshold for g in got), f"budget {budget}"
        assert np.array_equal(np.concatenate([g[0] for g in got]), keys[kept])
        assert np.array_equal(np.concatenate([g[1] for g in got]), weights[kept])
    assert 0 < sum(r["heaviest"][300][0].size for r in setup["results"]) <= 300 < keys.size


def test_a_trimmed_cluster_graph_still_cuts_along_the_communities(setup, tmp_path):
    community = setup["community"]
    meta, coarse = setup["results"][0]["sparse"]
    graph = coarse["graph"]
    full = read_meta(setup["dirs"]["out"]["quality"])
    print(f"cluster graph: {graph.num_entries} of {graph.num_entries + graph.num_dropped} entries "
          f"kept (weight >= {graph.min_weight}); edge cut {meta.edge_cut} against "
          f"{full.edge_cut} with every entry")
    assert graph.num_dropped > 0 and graph.min_weight > 1
    assert graph.num_entries <= coarse["max_entries"]
    check_folder(setup["dirs"]["out"]["sparse"], community)
    assert meta.edge_cut <= 1.05 * full.edge_cut
    assert max(meta.part_sizes) <= 1.05 * community.num_nodes / WORLD


def nothing_written(parent: Path, name: str) -> bool:
    return not (parent / name).exists() and not list(parent.glob(f".{name}.tmp-*"))


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_refused_on_every_rank_and_nothing_is_written(setup, name):
    errors = [r["bad"][name] for r in setup["results"]]
    assert errors[0] is not None, f"{name} was accepted"
    assert all(e == errors[0] for e in errors), "every rank raises the same error"
    kind, message = errors[0]
    assert kind in ("ValueError", "FileNotFoundError"), message
    assert message.startswith("'partition_distributed' "), message
    fix = {"missing-file": "x.npy", "short-x": "rows", "negative-id": "outside",
           "id-too-large": "outside", "nan-x": "NaN"}[name]
    assert fix in message, message
    assert nothing_written(setup["root"] / "out", name)


@pytest.mark.parametrize("name", ONE_RANK_READS)
def test_a_damaged_file_one_rank_reads_fails_every_rank_at_once(setup, name):
    """Every rank raises the error of the one rank whose copy is damaged,
    naming the file and the fix, well before a collective would time out."""
    errors = [r["one_rank"][name][0] for r in setup["results"]]
    kinds = {kind for kind, _ in errors}
    assert kinds == {"ValueError"}, errors
    # the first line names each rank's own input folder; the report is shared
    reports = {message.split("\n", 1)[1] for _, message in errors}
    assert len(reports) == 1, reports
    file, says = ONE_RANK_READS[name]
    bad = str(Path(setup["dirs"]["own_copies"][name][BAD_RANK]) / file)
    (report,) = reports
    assert report.startswith(f"  rank {BAD_RANK} ") and bad in report and says in report, report
    assert "convert the graph again" in report, report
    for r, (_, message) in enumerate(errors):
        assert message.startswith(f"'partition_distributed' opening "
                                  f"'{setup['dirs']['own_copies'][name][r]}' failed on 1 of "
                                  f"{WORLD} ranks:"), message
    seconds = [r["one_rank"][name][1] for r in setup["results"]]
    assert max(seconds) < WAIT / 2, seconds
    assert nothing_written(setup["root"] / "out", name)


def test_any_exception_of_one_rank_fails_every_rank_at_once(setup):
    errors = [r["memory"][0] for r in setup["results"]]
    assert all(e == errors[0] for e in errors), errors
    kind, message = errors[0]
    assert kind == "MemoryError", message
    assert message.startswith("'partition_distributed' checking the input failed on 1 of "), \
        message
    assert "rank 2 ran out of memory checking its nodes" in message, message
    seconds = [r["memory"][1] for r in setup["results"]]
    assert max(seconds) < WAIT / 2, seconds
    assert nothing_written(setup["root"] / "out", "memory")


def test_plain_metis_and_a_taken_folder_are_refused(setup):
    kind, message = setup["results"][0]["metis"]
    assert kind == "ValueError" and "method='metis-coarse'" in message
    assert "pyg_dist.partition(" in message
    assert nothing_written(setup["root"] / "out", "metis")
    kind, message = setup["results"][0]["exists"]
    assert kind == "FileExistsError" and "overwrite=True" in message, message


def test_a_full_disk_fails_every_rank_and_leaves_nothing(setup):
    errors = [r["enospc"] for r in setup["results"]]
    assert all(e == errors[0] for e in errors), errors
    kind, message = errors[0]
    assert kind == "OSError", message
    assert "no space left" in message and "rank 2" in message, message
    assert nothing_written(setup["root"] / "out", "enospc")


def test_a_small_tmpfs_that_fills_up_fails_every_rank_and_leaves_it_empty(setup):
    if setup["no_tmpfs"]:
        pytest.skip(f"cannot mount a tmpfs here ({setup['no_tmpfs']}); the simulated full "
                    f"disk is tested above")
    errors = [r["tmpfs"] for r in setup["results"]]
    assert all(e == errors[0] for e in errors), errors
    kind, message = errors[0]
    assert kind == "OSError", message
    assert "no space left on the device of" in message and "nothing was written" in message
    assert "free space there or choose an out_dir" in message, message
    assert setup["left_on_tmpfs"] == [], setup["left_on_tmpfs"]


def test_a_lost_rank_fails_the_others_and_leaves_no_complete_folder(setup):
    for r, result in enumerate(setup["results"]):
        if r == 1:
            continue
        kind, message = result["lost"]
        assert kind == "PeerLost", message
        assert "the process of rank 1 on " in message and "has exited" in message, message
    out = setup["root"] / "out"
    assert not (out / "lost").exists()
    assert not list(out.glob(".lost.tmp-*/meta.json"))


def raise_on_rank_one(graph, out):
    if distributed.rank() == 1:
        def broken(*args, **kwargs):
            raise RuntimeError("rank one broke while building its part")
        dist_partitioner.build_local_part = broken
    dist_partitioner.partition_distributed(graph, out)


def test_a_raising_rank_stops_the_partition_and_leaves_nothing(setup, tmp_path):
    out = tmp_path / "parts"
    with pytest.raises(RuntimeError, match="rank one broke"):
        pyg_dist.launch(raise_on_rank_one, 2, args=(setup["dirs"]["graph"], str(out)),
                        timeout=120, comm_timeout=WAIT)
    assert nothing_written(tmp_path, "parts")

