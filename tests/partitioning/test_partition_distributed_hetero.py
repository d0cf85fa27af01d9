"""The distributed partitioner on a heterogeneous graph folder, on real gloo
ranks: its folders against the single-process builder of ``partition_hetero``
and against the graph itself, one rank against four, models on the folder
against PyG on the whole ``HeteroData``, and bad folders refused on every
rank with nothing written.

One battery of 4 ranks runs every multi-rank case (see :func:`battery`): 4
ranks, a group of 2 and a group of 1, random and metis-coarse; the test
functions check its results."""

import numpy as np
import pytest
import torch
from hetero.hetero_cases import reference, run_cases
from hetero.hetero_graphs import small_hetero
from test_partition_distributed import error_of
from tolerances import assert_close
from worlds import Battery

import pyg_dist
from pyg_dist.datasets import write_graph_folder
from pyg_dist.partitioning import partition_distributed, read_meta, read_part
from pyg_dist.partitioning.dist_cut import permutation_cut
from pyg_dist.partitioning.hetero import _halos, _HeteroPlan, _local_rows, edge_key
from pyg_dist.runtime import distributed

WORLD = 4
SEED = 3
METHODS = ("random", "metis-coarse")
CASES = [dict(kind="sage", hidden=8, out=3, seed=1),
         dict(kind="heteroconv", hidden=6, out=4, seed=5)]
BAD_INPUTS = ("missing-file", "short-x", "id-too-large", "negative-id", "nan-x")
#: Each run: (folder name, ranks, method).
RUNS = [(f"{p}-{m}", p, m) for p in (WORLD, 2) for m in METHODS] + [("1-random", 1, "random")]


def graph():
    """``small_hetero`` and a ``venue`` type read by a relation of no edges
    (no halo), with an isolated venue."""
    data = small_hetero(seed=4)
    data["venue"].x = torch.randn(3, 2, generator=torch.Generator().manual_seed(0))
    data["venue", "hosts", "paper"].edge_index = torch.empty(2, 0, dtype=torch.long)
    data["paper", "published_in", "venue"].edge_index = torch.tensor([[0, 5, 9], [0, 1, 1]])
    return data


def bad_folders(data, root):
    """One graph folder per kind of bad input: ``data``'s folder, then one
    file broken."""
    folders = {}
    for name in BAD_INPUTS:
        folder = root / name
        write_graph_folder(data, folder)
        writes = folder / "edges" / "author__writes__paper.npy"
        edges, x = np.load(writes), np.load(folder / "paper" / "x.npy")
        if name == "missing-file":
            (folder / "field" / "x.npy").unlink()
        elif name == "short-x":
            np.save(folder / "paper" / "x.npy", x[:-1])
        elif name == "id-too-large":
            edges[1, edges.shape[1] * 5 // 8] = data["paper"].num_nodes  # rank 2's slice
            np.save(writes, edges)
        elif name == "negative-id":
            edges[0, 0] = -1
            np.save(writes, edges)
        elif name == "nan-x":
            x[-1, 0] = np.nan  # in the last rank's block
            np.save(folder / "paper" / "x.npy", x)
        folders[name] = str(folder)
    return folders


def battery(dirs, states, num_nodes):
    """Every rank: partition on 4 ranks, on a group of 2 and a group of 1,
    the models on the 4-rank metis-coarse folder, then the bad inputs."""
    rank, out = distributed.rank(), {}
    groups = {WORLD: None, 2: distributed.new_group([0, 1]), 1: distributed.new_group([0])}
    for name, ranks, method in RUNS:
        if rank < ranks:
            out[name] = partition_distributed(dirs["graph"], dirs["out"][name], method=method,
                                              seed=SEED, group=groups[ranks])
    out["models"] = run_cases(dirs["out"][f"{WORLD}-metis-coarse"], CASES, states, num_nodes)
    out["bad"] = {name: error_of(lambda: partition_distributed(path, dirs["out"][name]))  # noqa: B023
                  for name, path in dirs["bad"].items()}
    out["exists"] = error_of(lambda: partition_distributed(dirs["graph"],
                                                           dirs["out"]["1-random"]))
    return out


def prepare(root):
    data = graph()
    write_graph_folder(data, root / "graph")
    refs = [reference(case, data) for case in CASES]
    num_nodes = {t: data[t].num_nodes for t in data.node_types}
    dirs = {"graph": str(root / "graph"), "bad": bad_folders(data, root / "bad"),
            "out": {name: str(root / "out" / name) for name in
                    [*(r[0] for r in RUNS), *BAD_INPUTS]}}
    return (dirs, [r["state"] for r in refs], num_nodes), \
        {"root": root, "data": data, "dirs": dirs, "refs": refs}


RANKS = Battery(WORLD, battery, prepare, timeout=300)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    context, results = RANKS.results(tmp_path_factory)
    return {**context, "results": results}


def load_parts(folder):
    meta = read_meta(folder)
    return meta, [read_part(folder, p, meta) for p in range(meta.num_parts)]


def owners(data, parts):
    """The owner of every node of every type, checking each is owned once."""
    owner = {}
    for t in data.node_types:
        owner[t] = torch.full((data[t].num_nodes,), -1)
        for p, part in enumerate(parts):
            gid = part["node_types"][t]["graph"]["global_id"]
            assert torch.equal(gid, gid.sort().values), "owned rows ascend within the type"
            assert bool((owner[t][gid] == -1).all()), f"{t}: a node has one owner"
            owner[t][gid] = p
        assert bool((owner[t] >= 0).all()), f"{t}: every node has an owner"
    return owner


def check_folder(folder, data):
    """The folder's invariants, checked against ``data`` directly; returns the
    metadata, the parts and the owner of each node."""
    meta, parts = load_parts(folder)
    num_parts = meta.num_parts
    owner = owners(data, parts)
    assert meta.types.node_types == data.node_types
    assert [tuple(e) for e in meta.types.edge_types] == data.edge_types
    for t in data.node_types:
        for part in parts:
            store = part["node_types"][t]
            assert set(store["attrs"]) == set(data[t].keys()), t
            for key, value in store["attrs"].items():
                assert torch.equal(value, data[t][key][store["graph"]["global_id"]]), (t, key)
        assert meta.types.part_sizes[t] == torch.bincount(owner[t], minlength=num_parts).tolist()
    in_degree = {t: torch.zeros(data[t].num_nodes, dtype=torch.long) for t in data.node_types}
    for e in data.edge_types:
        in_degree[e[2]] += torch.bincount(data[e].edge_index[1], minlength=data[e[2]].num_nodes)
    for e in data.edge_types:
        src_t, _, dst_t = e
        src, dst = data[e].edge_index
        stored = []
        for p, part in enumerate(parts):
            g = part["edge_types"][edge_key(e)]["graph"]
            node = part["node_types"][src_t]["graph"]
            ids = torch.cat([node["global_id"], node["halo_global_id"]])
            targets = part["node_types"][dst_t]["graph"]["global_id"].repeat_interleave(
                g["rowptr"].diff())
            assert torch.equal(ids[g["col"]], src[g["edge_id"]]), f"{e}: columns name sources"
            assert torch.equal(targets, dst[g["edge_id"]]), f"{e}: rows name the targets"
            assert bool((owner[dst_t][targets] == p).all()), f"{e}: at its target's owner"
            stored.append(g["edge_id"])
        assert torch.equal(torch.cat(stored).sort().values, torch.arange(src.numel())), \
            f"{e}: every edge stored once"
        assert meta.types.edge_cut[edge_key(e)] == int((owner[src_t][src] != owner[dst_t][dst])
                                                       .sum())
    for t in data.node_types:
        for p, part in enumerate(parts):
            union = set()
            for e in (e for e in data.edge_types if e[0] == t):
                src, dst = data[e].edge_index
                mine = (owner[e[2]][dst] == p) & (owner[t][src] != p)
                union |= set(src[mine].tolist())
            g = part["node_types"][t]["graph"]
            halo = g["halo_global_id"]
            assert sorted(halo.tolist()) == sorted(union), f"{t}: the union halo"
            assert meta.types.halo_sizes[t][p] == len(union)
            assert torch.equal(g["halo_in_degree"], in_degree[t][halo])
            for q in range(num_parts):  # q sends p exactly p's block from q, in order
                block = halo[g["halo_ptr"][q]:g["halo_ptr"][q + 1]]
                assert bool((owner[t][block] == q).all())
                sender = parts[q]["node_types"][t]["graph"]
                sent = sender["global_id"][sender["send_idx"][
                    sender["send_ptr"][p]:sender["send_ptr"][p + 1]]]
                assert torch.equal(sent, block), f"{t}: {q} sends {p} its halo block"
    train = data["paper"].train_mask
    assert meta.types.train_sizes == {
        "paper": torch.bincount(owner["paper"][train], minlength=num_parts).tolist()}
    assert meta.num_classes == int(data["paper"].y.max()) + 1
    assert meta.num_nodes == data.num_nodes and meta.num_edges == data.num_edges
    return meta, parts, owner


def assert_same_as_builder(parts, owner, data):
    """Every part equals partition_hetero's single-process builder for the
    same assignment."""
    num_parts = len(parts)
    own = {t: o.numpy() for t, o in owner.items()}
    edges = {e: data[e].edge_index.numpy() for e in data.edge_types}
    plan = _HeteroPlan(own, {t: _local_rows(o, num_parts) for t, o in own.items()},
                       {t: _halos(t, edges, own, num_parts) for t in data.node_types},
                       edges, num_parts)
    for p, part in enumerate(parts):
        for t in data.node_types:
            expected = plan.node_plan(t, p)
            got = part["node_types"][t]["graph"]
            assert expected.keys() == got.keys()
            for key, value in expected.items():
                assert torch.equal(got[key], value), f"part {p}: {t} {key}"
        for e in data.edge_types:
            expected = plan.edge_plan(e, p)
            got = part["edge_types"][edge_key(e)]["graph"]
            assert expected.keys() == got.keys()
            for key, value in expected.items():
                assert torch.equal(got[key], value), f"part {p}: {e} {key}"
            assert part["edge_types"][edge_key(e)]["attrs"] == {}


@pytest.mark.parametrize("name", [r[0] for r in RUNS])
def test_folders_hold_the_graph_and_consistent_halo_plans(setup, name):
    data, results = setup["data"], setup["results"]
    folder = setup["dirs"]["out"][name]
    meta, parts, owner = check_folder(folder, data)
    assert_same_as_builder(parts, owner, data)
    ranks = meta.num_parts
    assert all(r[name] == meta for r in results[:ranks]), "every rank returns the meta"
    assert not any(meta.types.halo_sizes["institution"]), "no relation reads institution"
    assert not any(meta.types.halo_sizes["venue"]), "no relation reads venue"
    if name.endswith("random"):  # the permutation cut of the homogeneous view
        expected = permutation_cut(np.arange(data.num_nodes), data.num_nodes, ranks, SEED)
        assert torch.equal(torch.cat([owner[t] for t in data.node_types]),
                           torch.from_numpy(expected))


def test_one_rank_and_four_ranks_write_the_same_graph(setup, tmp_path):
    data = setup["data"]
    one, one_parts = load_parts(setup["dirs"]["out"]["1-random"])
    for name in ("4-random", "4-metis-coarse", "2-metis-coarse"):
        meta, parts = load_parts(setup["dirs"]["out"][name])
        assert meta.fingerprint == one.fingerprint, name
        for field in ("num_nodes", "num_edges", "num_classes", "node_attrs", "edge_attrs"):
            assert getattr(meta, field) == getattr(one, field), (name, field)
        for t in data.node_types:
            whole = one_parts[0]["node_types"][t]
            gid = torch.cat([p["node_types"][t]["graph"]["global_id"] for p in parts])
            order = gid.argsort()
            for key, value in whole["attrs"].items():
                rows = torch.cat([p["node_types"][t]["attrs"][key] for p in parts])
                assert torch.equal(rows[order], value), (name, t, key)
        for e in data.edge_types:
            ids = torch.cat([p["edge_types"][edge_key(e)]["graph"]["edge_id"] for p in parts])
            assert torch.equal(ids.sort().values,
                               one_parts[0]["edge_types"][edge_key(e)]["graph"]["edge_id"]
                               .sort().values), (name, e)
    # one rank writes what the single-process partition of one part writes
    reference = pyg_dist.partition(data, 1, tmp_path / "single", method="random", seed=SEED)
    single = read_part(tmp_path / "single", 0, reference)
    for kind in ("node_types", "edge_types"):
        assert single[kind].keys() == one_parts[0][kind].keys()
        for key, store in single[kind].items():
            for part_key in ("graph", "attrs"):
                got = one_parts[0][kind][key][part_key]
                assert got.keys() == store[part_key].keys(), (kind, key, part_key)
                for name, value in store[part_key].items():
                    assert torch.equal(got[name], value), (kind, key, name)
    for field in ("num_nodes", "num_edges", "edge_cut", "part_sizes", "halo_sizes",
                  "train_sizes", "num_classes", "node_attrs", "edge_attrs", "types"):
        assert getattr(one, field) == getattr(reference, field), field


def test_models_on_the_folder_equal_pyg_on_the_whole_graph(setup):
    data = setup["data"]
    per_case = list(zip(*[r["models"] for r in setup["results"]]))
    for case, ref, per_rank in zip(CASES, setup["refs"], per_case):
        for t, out in ref["out"].items():
            full = torch.full_like(out, float("nan"))
            grad = torch.full_like(ref["x_grad"][t], float("nan"))
            for res in per_rank:
                full[res["global_id"][t]] = res["out"][t]
                grad[res["global_id"][t]] = res["x_grad"][t]
            assert_close(full, out, what=f"{case['kind']} out {t}")
            assert_close(grad, ref["x_grad"][t], what=f"{case['kind']} x.grad {t}")
        for n, grad in ref["grads"].items():
            assert_close(per_rank[0]["grads"][n], grad, what=f"{case['kind']} grad {n}")
    assert all(set(res["out"]) == {e[2] for e in data.edge_types}
               for per_rank in per_case for res in per_rank), "every target type's rows"


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_refused_on_every_rank_and_nothing_is_written(setup, name):
    errors = [r["bad"][name] for r in setup["results"]]
    assert errors[0] is not None, f"{name} was accepted"
    assert all(e == errors[0] for e in errors), "every rank raises the same error"
    kind, message = errors[0]
    assert kind == ("FileNotFoundError" if name == "missing-file" else "ValueError"), message
    assert message.startswith("'partition_distributed' "), message
    where = {"missing-file": "field/x.npy' is missing from the graph folder",
             "short-x": "'x' of node type 'paper'", "id-too-large": "names targets outside",
             "negative-id": "names sources outside", "nan-x": "NaN or infinite"}[name]
    fix = {"missing-file": "convert the graph again", "short-x": "one row per node",
           "id-too-large": "fix the edge list", "negative-id": "fix the edge list",
           "nan-x": "nan_to_num"}[name]
    assert where in message and fix in message, message
    out = setup["root"] / "out"
    assert not (out / name).exists() and not any(p.name.startswith(f".{name}.")
                                                 for p in out.iterdir()), "nothing written"


def test_a_taken_folder_is_refused(setup):
    kind, message = setup["results"][0]["exists"]
    assert kind == "FileExistsError" and "overwrite=True" in message, message
