"""The partitioner: properties that hold for any graph, and bad input."""
import json
import os

import pytest
import torch
from graphs import awkward_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data

import pyg_dist
from pyg_dist.partitioning import read_meta, read_part


@st.composite
def graphs(draw):
    num_nodes = draw(st.integers(1, 40))
    num_edges = draw(st.integers(0, 120))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=g)
    data = Data(edge_index=edge_index, num_nodes=num_nodes,
                x=torch.randn(num_nodes, 3, generator=g),
                edge_weight=torch.rand(num_edges, generator=g))
    if draw(st.booleans()):
        data.train_mask = torch.rand(num_nodes, generator=g) < 0.3
    num_parts = draw(st.integers(1, min(num_nodes, 6)))
    method = draw(st.sampled_from(["metis", "random"]))
    return data, num_parts, method


def load_all(path, meta):
    return [read_part(path, p, meta) for p in range(meta.num_parts)]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=graphs())
def test_partition_properties(tmp_path, case):
    data, num_parts, method = case
    out = tmp_path / f"p{num_parts}-{method}"
    meta = pyg_dist.partition(data, num_parts, out, method=method, seed=3, overwrite=True)
    parts = load_all(out, meta)

    # Every node owned exactly once; parts list owned nodes in ascending global id.
    owned = torch.cat([p["graph"]["global_id"] for p in parts])
    assert torch.equal(torch.sort(owned).values, torch.arange(data.num_nodes))
    for p in parts:
        gid = p["graph"]["global_id"]
        assert torch.equal(gid, torch.sort(gid).values)
    assert meta.part_sizes == [p["graph"]["global_id"].numel() for p in parts]

    # Every edge kept exactly once, in the part of its target, and reloading a
    # part gives back its subgraph: local (row, col) map to the original edge.
    edge_ids = torch.cat([p["graph"]["edge_id"] for p in parts])
    assert torch.equal(torch.sort(edge_ids).values, torch.arange(data.num_edges))
    owner = torch.empty(data.num_nodes, dtype=torch.long)
    for r, p in enumerate(parts):
        owner[p["graph"]["global_id"]] = r
    for r, p in enumerate(parts):
        g = p["graph"]
        n = g["global_id"].numel()
        local_to_global = torch.cat([g["global_id"], g["halo_global_id"]])
        deg = g["rowptr"][1:] - g["rowptr"][:-1]
        target = g["global_id"].repeat_interleave(deg)
        source = local_to_global[g["col"]]
        assert torch.equal(source, data.edge_index[0, g["edge_id"]])
        assert torch.equal(target, data.edge_index[1, g["edge_id"]])
        assert bool((owner[target] == r).all())
        # Node and edge attributes follow.
        assert torch.equal(p["node"]["x"], data.x[g["global_id"]])
        assert torch.equal(p["edge"]["edge_weight"], data.edge_weight[g["edge_id"]])
        # Halo: remote sources only, contiguous per owner, ascending within owner.
        halo = g["halo_global_id"]
        assert bool((owner[halo] != r).all())
        assert set(halo.tolist()) == set(source[g["col"] >= n].tolist())
        for q in range(num_parts):
            block = halo[g["halo_ptr"][q]:g["halo_ptr"][q + 1]]
            assert bool((owner[block] == q).all())
            assert torch.equal(block, torch.sort(block).values)
        # Degrees GCN needs for halo nodes.
        in_deg = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
        assert torch.equal(g["halo_in_degree"], in_deg[halo])
    assert meta.halo_sizes == [p["graph"]["halo_global_id"].numel() for p in parts]
    assert meta.edge_cut == int((owner[data.edge_index[0]] != owner[data.edge_index[1]]).sum())

    # Plans agree between sender and receiver.
    for p in range(num_parts):
        for q in range(num_parts):
            recv = parts[p]["graph"]
            send = parts[q]["graph"]
            wanted = recv["halo_global_id"][recv["halo_ptr"][q]:recv["halo_ptr"][q + 1]]
            rows = send["send_idx"][send["send_ptr"][p]:send["send_ptr"][p + 1]]
            assert torch.equal(send["global_id"][rows], wanted)


@pytest.mark.parametrize("method", ["metis", "random"])
def test_partition_balances_nodes_and_training_nodes(tmp_path, method):
    data = awkward_graph(num_nodes=2000, num_edges=12000, num_isolated=0, seed=1)
    meta = pyg_dist.partition(data, 4, tmp_path / "p", method=method)
    assert max(meta.part_sizes) <= 1.1 * data.num_nodes / 4
    assert max(meta.train_sizes) <= 1.15 * int(data.train_mask.sum()) / 4
    assert sum(meta.train_sizes) == int(data.train_mask.sum())


def test_metis_cuts_fewer_edges_than_random(tmp_path):
    from pyg_dist.datasets import synthetic

    data = synthetic(num_nodes=3000, seed=0)
    metis = pyg_dist.partition(data, 4, tmp_path / "m", method="metis")
    rand = pyg_dist.partition(data, 4, tmp_path / "r", method="random")
    assert metis.edge_cut < 0.8 * rand.edge_cut


def test_partition_is_seeded(tmp_path):
    data = awkward_graph()
    a = pyg_dist.partition(data, 3, tmp_path / "a", method="random", seed=5)
    b = pyg_dist.partition(data, 3, tmp_path / "b", method="random", seed=5)
    c = pyg_dist.partition(data, 3, tmp_path / "c", method="random", seed=6)
    ids = [read_part(tmp_path / k, 0, m)["graph"]["global_id"] for k, m in
           (("a", a), ("b", b), ("c", c))]
    assert torch.equal(ids[0], ids[1]) and not torch.equal(ids[0], ids[2])
    assert a.fingerprint == b.fingerprint == c.fingerprint


def test_meta_json_records_the_partition(tmp_path):
    data = awkward_graph(num_features=4)
    meta = pyg_dist.partition(data, 3, tmp_path / "p", method="metis", seed=2)
    raw = json.loads((tmp_path / "p" / "meta.json").read_text())
    for key in ("num_parts", "num_nodes", "num_edges", "edge_cut", "part_sizes", "halo_sizes",
                "method", "seed", "fingerprint"):
        assert raw[key] == getattr(meta, key), key
    assert raw["num_nodes"] == data.num_nodes and raw["method"] == "metis" and raw["seed"] == 2
    assert read_meta(tmp_path / "p") == meta


def test_graph_without_features_stays_without(tmp_path):
    data = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=4)
    meta = pyg_dist.partition(data, 2, tmp_path / "p")
    assert "x" not in meta.node_attrs
    part = pyg_dist.DistData.load(tmp_path / "p", rank=0)
    assert "x" not in part.keys()
    with pytest.raises(AttributeError, match="this part holds"):
        _ = part.x


def test_graph_without_edges(tmp_path):
    data = Data(edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=6, x=torch.ones(6, 2))
    meta = pyg_dist.partition(data, 3, tmp_path / "p", method="metis")
    assert meta.part_sizes == [2, 2, 2] and meta.edge_cut == 0


# Bad input: a clear error naming the fix, and nothing left on disk.

def _leftovers(folder):
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("num_parts,match", [
    (0, r"choose 1 <= num_parts <= 150"),
    (151, r"choose 1 <= num_parts <= 150"),
    (2.0, r"integer num_parts"),
])
def test_bad_num_parts(tmp_path, num_parts, match):
    with pytest.raises((ValueError, TypeError), match=match):
        pyg_dist.partition(awkward_graph(), num_parts, tmp_path / "p")
    assert _leftovers(tmp_path) == []


def test_nan_features_are_refused(tmp_path):
    data = awkward_graph(num_features=3)
    data.x[7, 1] = float("nan")
    with pytest.raises(ValueError, match=r"NaN or infinite values in node attribute 'x'.*"
                                         r"first \[7\].*nan_to_num"):
        pyg_dist.partition(data, 2, tmp_path / "p")
    assert _leftovers(tmp_path) == []


def test_bad_method_and_edge_index(tmp_path):
    data = awkward_graph()
    with pytest.raises(ValueError, match="use one of metis, random"):
        pyg_dist.partition(data, 2, tmp_path / "p", method="spectral")
    bad = Data(edge_index=torch.tensor([[0, 5]]), num_nodes=3)
    with pytest.raises(ValueError, match=r"shape \[2, num_edges\]"):
        pyg_dist.partition(bad, 2, tmp_path / "p")
    bad = Data(edge_index=torch.tensor([[0, 1], [1, 9]]), num_nodes=3)
    with pytest.raises(ValueError, match="set 'data.num_nodes'"):
        pyg_dist.partition(bad, 2, tmp_path / "p")
    assert _leftovers(tmp_path) == []


def test_existing_folder_needs_overwrite(tmp_path):
    data = awkward_graph()
    first = pyg_dist.partition(data, 2, tmp_path / "p")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        pyg_dist.partition(data, 3, tmp_path / "p")
    assert read_meta(tmp_path / "p") == first  # untouched
    second = pyg_dist.partition(data, 3, tmp_path / "p", overwrite=True)
    assert read_meta(tmp_path / "p") == second
    assert _leftovers(tmp_path) == ["p"]


def test_failure_while_writing_leaves_no_folder(tmp_path, monkeypatch):
    from pyg_dist.partitioning import io

    calls = {"n": 0}
    real_save = io.torch.save

    def failing_save(obj, path):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        real_save(obj, path)

    monkeypatch.setattr(io.torch, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        pyg_dist.partition(awkward_graph(), 3, tmp_path / "p")
    assert _leftovers(tmp_path) == []


def test_loading_refuses_missing_corrupted_and_mixed_parts(tmp_path):
    data = awkward_graph()
    pyg_dist.partition(data, 2, tmp_path / "a", seed=1)
    pyg_dist.partition(data, 2, tmp_path / "b", seed=1)
    pyg_dist.DistData.load(tmp_path / "a", rank=1)  # fine as written

    with pytest.raises(FileNotFoundError, match="create it with pyg_dist.partition"):
        pyg_dist.DistData.load(tmp_path / "nothing", rank=0)
    with pytest.raises(ValueError, match="pass rank= to inspect one part"):
        pyg_dist.DistData.load(tmp_path / "a")
    with pytest.raises(ValueError, match=r"has parts 0\.\.1"):
        pyg_dist.DistData.load(tmp_path / "a", rank=2)

    # A part from another partitioning of the same graph.
    (tmp_path / "a" / "part_1.pt").write_bytes((tmp_path / "b" / "part_1.pt").read_bytes())
    with pytest.raises(ValueError, match="part 1 .* corrupted or from another partitioning"):
        pyg_dist.DistData.load(tmp_path / "a", rank=1)
    # Bytes flipped.
    blob = bytearray((tmp_path / "b" / "part_0.pt").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (tmp_path / "b" / "part_0.pt").write_bytes(bytes(blob))
    with pytest.raises(ValueError, match="part 0 .* corrupted.*re-create the folder"):
        pyg_dist.DistData.load(tmp_path / "b", rank=0)
    # Missing.
    (tmp_path / "b" / "part_1.pt").unlink()
    with pytest.raises(FileNotFoundError, match="part 1 is missing"):
        pyg_dist.DistData.load(tmp_path / "b", rank=1)
    # meta.json damaged.
    (tmp_path / "a" / "meta.json").write_text("{not json")
    with pytest.raises(ValueError, match="meta.json' is corrupted"):
        pyg_dist.DistData.load(tmp_path / "a", rank=0)
