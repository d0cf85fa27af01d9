"""Graph folders: written atomically from a PyG ``Data``, read back a slice
at a time, and bad folders refused with errors that name the fix."""
import json
import re

import numpy as np
import pytest
import torch
from graphs import awkward_graph

from pyg_dist.cli import main
from pyg_dist.datasets import (
    GraphFolder,
    GraphFolderWriter,
    folder_files,
    load_dataset,
    write_graph_folder,
)


@pytest.fixture
def data():
    return load_dataset("synthetic", num_nodes=300, seed=1)


def test_a_folder_holds_the_graph_and_reads_back_slices(tmp_path, data, monkeypatch):
    monkeypatch.setattr(folder_files, "CHUNK", 64)  # copies and checks in many chunks
    folder = write_graph_folder(data, tmp_path / "g")
    assert (folder.num_nodes, folder.num_edges) == (data.num_nodes, data.num_edges)
    assert folder.num_classes == int(data.y.max()) + 1
    assert sorted(folder.node_attrs) == sorted(["x", "y", "train_mask", "val_mask", "test_mask"])
    again = folder.to_data()
    for key in ("edge_index", "x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(again[key], data[key]), key
    assert torch.equal(torch.from_numpy(folder.edges(100, 250)), data.edge_index[:, 100:250])
    assert torch.equal(torch.from_numpy(folder.node("x", 17, 80)), data.x[17:80])
    assert torch.equal(torch.from_numpy(folder.node("train_mask", 17, 80)),
                       data.train_mask[17:80])
    folder.check_edges(0, folder.num_edges)
    folder.check_nodes(0, folder.num_nodes)
    # Masks are stored as the ids of their nodes.
    ids = np.load(tmp_path / "g" / "split" / "train.npy")
    assert torch.equal(torch.from_numpy(ids), data.train_mask.nonzero().view(-1))


def test_a_graph_with_extra_attributes_and_no_features(tmp_path):
    data = awkward_graph(num_nodes=50, num_edges=200, num_features=0)
    data.node_year = torch.arange(50)
    del data.x
    folder = write_graph_folder(data, tmp_path / "g")
    assert "x" not in folder.node_attrs and "node_year" in folder.node_attrs
    assert torch.equal(folder.to_data().edge_index, data.edge_index)


def test_existing_folders_are_kept_unless_overwritten(tmp_path, data):
    write_graph_folder(data, tmp_path / "g")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_graph_folder(data, tmp_path / "g")
    small = load_dataset("synthetic", num_nodes=100)
    assert write_graph_folder(small, tmp_path / "g", overwrite=True).num_nodes == 100
    assert [p.name for p in tmp_path.iterdir()] == ["g"]


def test_a_failed_write_leaves_nothing(tmp_path, data):
    with pytest.raises(RuntimeError, match="disk"):
        with GraphFolderWriter(tmp_path / "g") as writer:
            writer.edges(10)
            raise RuntimeError("disk full")
    assert list(tmp_path.iterdir()) == []
    bad = data.clone()
    bad.x[3, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN or infinite.*'x'.*nan_to_num"):
        write_graph_folder(bad, tmp_path / "g")
    assert list(tmp_path.iterdir()) == []


def _edit(path, **changes):
    info = json.loads((path / "graph.json").read_text())
    info.update(changes)
    (path / "graph.json").write_text(json.dumps(info))


def test_bad_folders_are_refused_with_the_fix(tmp_path, data):
    with pytest.raises(FileNotFoundError, match="pyg-dist convert"):
        GraphFolder.open(tmp_path / "nothing")
    path = tmp_path / "g"
    write_graph_folder(data, path)
    _edit(path, num_nodes=data.num_nodes + 1)
    with pytest.raises(ValueError, match="has 300 rows, graph.json says 301.*one row per node"):
        GraphFolder.open(path)
    _edit(path, num_nodes=data.num_nodes, num_edges=5)
    with pytest.raises(ValueError, match="different graphs"):
        GraphFolder.open(path)
    _edit(path, num_edges=data.num_edges, version=99)
    with pytest.raises(ValueError, match="convert the graph again with this version"):
        GraphFolder.open(path)
    _edit(path, version=1)
    (path / "y.npy").unlink()
    with pytest.raises(FileNotFoundError, match="y.npy' is missing"):
        GraphFolder.open(path)


@pytest.mark.parametrize("change, message", [
    ({"node": ["x.npy", "y.npy"]}, r"'node' must be an object of attribute names to \.npy "
                                   r"files, e\.g\. \{\"x\": \"x\.npy\"\} \(got \[\"x\.npy\", "
                                   r"\"y\.npy\"\]\); fix it or convert the graph again"),
    ({"splits": {"train_mask": 3}}, r"'splits' must be an object of split masks to \.npy files"),
    ({"num_nodes": "300"}, r"'num_nodes' must be an integer >= 0 \(got \"300\"\)"),
    ({"num_edges": -1}, r"'num_edges' must be an integer >= 0 \(got -1\)"),
    ({"edges": ["edges.npy"]}, r"'edges' must be a \.npy file name"),
    ({"num_classes": 2.5}, r"'num_classes' must be an integer >= 0 or null"),
])
def test_a_description_of_the_wrong_shape_names_the_key_and_the_fix(tmp_path, data, change,
                                                                     message):
    path = tmp_path / "g"
    write_graph_folder(data, path)
    _edit(path, **change)
    with pytest.raises(ValueError, match=f"^'{re.escape(str(path / 'graph.json'))}': {message}"):
        GraphFolder.open(path)
    (path / "graph.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="holds list, not the JSON object a graph folder is "
                                         "described by"):
        GraphFolder.open(path)


@pytest.mark.parametrize("file", ["x.npy", "edges.npy", "split/train.npy"])
@pytest.mark.parametrize("damage", ["empty", "truncated", "text"])
def test_an_unreadable_npy_file_is_named(tmp_path, data, file, damage):
    path = tmp_path / "g"
    write_graph_folder(data, path)
    whole = (path / file).read_bytes()
    (path / file).write_bytes({"empty": b"", "truncated": whole[:40], "text": b"1,2,3\n"}[damage])
    why = "it is empty" if damage == "empty" else ""
    with pytest.raises(ValueError, match=f"^'{re.escape(str(path / file))}' is not a \\.npy file "
                                         f"\\({why}.*\\); "
                                         f"convert the graph again$"):
        GraphFolder.open(path).check_nodes()


def test_bad_values_are_found_in_the_slice_that_holds_them(tmp_path, data):
    path = tmp_path / "g"
    write_graph_folder(data, path)
    edges = np.load(path / "edges.npy", mmap_mode="r+")
    edges[1, 123] = -4
    edges.flush()
    x = np.load(path / "x.npy", mmap_mode="r+")
    x[250, 0] = np.inf
    x.flush()
    folder = GraphFolder.open(path)
    folder.check_edges(0, 100)
    with pytest.raises(ValueError, match="outside \\[0, 300\\) in columns \\[123\\]"):
        folder.check_edges(100, 200)
    folder.check_nodes(0, 200)
    with pytest.raises(ValueError, match="rows \\[250\\].*nan_to_num"):
        folder.check_nodes(200, 300)
    np.save(path / "split" / "test.npy", np.array([5, 300]))
    with pytest.raises(ValueError, match="split file .*outside \\[0, 300\\)"):
        GraphFolder.open(path).check_nodes(0, 10)


def test_the_cli_converts_a_dataset_it_knows(tmp_path, capsys):
    assert main(["convert", "--dataset", "synthetic", "--num-nodes", "400",
                 "--out", str(tmp_path / "s")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["num_nodes"] == 400
    data = load_dataset("synthetic", num_nodes=400)
    assert torch.equal(GraphFolder.open(tmp_path / "s").to_data().edge_index, data.edge_index)
