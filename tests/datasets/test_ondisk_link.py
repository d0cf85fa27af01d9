"""Graph folders holding a link split: written from RandomLinkSplit's three
graphs or OGB's ``(data, split_edge)`` in chunks, read back a slice at a
time equal to PyG's and OGB's tensors, and bad splits refused, naming the
fix, with nothing left behind."""
import json
import random

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import RandomLinkSplit

from pyg_dist.cli import main
from pyg_dist.datasets import GraphFolder, folder_files, load_dataset, write_graph_folder
from pyg_dist.tasks.supervision import split_links

FIX = "pyg_dist.datasets.write_graph_folder(split, out_dir)"


def graph_with_isolated_nodes(num_nodes=80, isolated=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes - isolated, (2, 300), generator=gen)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    return Data(x=torch.randn(num_nodes, 3, generator=gen), edge_index=edge_index,
                num_nodes=num_nodes)


@pytest.fixture
def split():
    torch.manual_seed(0)
    random.seed(0)  # PyG draws the validation and test negatives with Python's random
    return RandomLinkSplit(num_val=0.1, num_test=0.2, is_undirected=False)(
        graph_with_isolated_nodes())


def test_a_link_split_is_written_in_chunks_and_read_back_as_slices(tmp_path, split,
                                                                   monkeypatch):
    monkeypatch.setattr(folder_files, "CHUNK", 16)  # copies and checks in many chunks
    folder = write_graph_folder(split, tmp_path / "g")
    train_data = split[0]
    assert torch.equal(torch.from_numpy(folder.edges()), train_data.edge_index), \
        "the folder's graph is the one messages pass along"
    assert torch.equal(torch.from_numpy(folder.node("x")), train_data.x)
    assert folder.link_splits == ["train", "val", "test"]
    assert folder.link_sizes == {name: d.edge_label.numel()
                                 for name, d in zip(("train", "val", "test"), split)}
    for name, d in zip(("train", "val", "test"), split):
        index, label = folder.supervision(name)
        assert label.dtype == np.float32
        assert torch.equal(torch.from_numpy(index), d.edge_label_index)
        assert torch.equal(torch.from_numpy(label), d.edge_label.float())
        lo, hi = 5, d.edge_label.numel() - 3
        index, label = folder.supervision(name, lo, hi, dtype=np.int32)
        assert index.dtype == np.int32
        assert torch.equal(torch.from_numpy(index).long(), d.edge_label_index[:, lo:hi])
        assert torch.equal(torch.from_numpy(label), d.edge_label[lo:hi].float())
        folder.check_supervision(name)
    info = json.loads((tmp_path / "g" / "graph.json").read_text())
    assert info["link"]["val"] == {"num_edges": split[1].edge_label.numel(),
                                   "edge_label_index": "link/val/edge_label_index.npy",
                                   "edge_label": "link/val/edge_label.npy"}
    with pytest.raises(KeyError, match="has no 'valid' supervision edges"):
        folder.supervision("valid")


def test_ogbs_split_stores_negatives_after_the_positives(tmp_path):
    data = graph_with_isolated_nodes()
    pos = torch.tensor([[0, 1], [2, 3], [4, 5]])
    neg = torch.tensor([[75, 1], [76, 2]])  # sources without an edge
    split_edge = {"train": {"edge": data.edge_index.t()},
                  "test": {"edge": pos, "edge_neg": neg}}  # no "valid": no "val" split
    folder = write_graph_folder((data, split_edge), tmp_path / "g")
    assert folder.link_splits == ["train", "test"]
    index, label = folder.supervision("test")
    assert index.tolist() == [[0, 2, 4, 75, 76], [1, 3, 5, 1, 2]]
    assert label.tolist() == [1, 1, 1, 0, 0]
    index, label = folder.supervision("train")
    assert torch.equal(torch.from_numpy(index), data.edge_index) and bool((label == 1).all())


def test_a_folder_without_a_split_is_written_as_before(tmp_path):
    folder = write_graph_folder(graph_with_isolated_nodes(), tmp_path / "g")
    assert folder.link_splits == [] and folder.link_sizes == {}
    assert "link" not in json.loads((tmp_path / "g" / "graph.json").read_text())
    assert not (tmp_path / "g" / "link").exists()


def test_a_split_outside_the_graph_is_refused_and_nothing_written(tmp_path, split):
    split[2].edge_label_index[0, 4] = split[0].num_nodes
    with pytest.raises(ValueError, match="'write_graph_folder' found test supervision edges "
                                         "outside the 80 nodes of the graph; pass edges "
                                         "between its nodes"):
        write_graph_folder(split, tmp_path / "g")
    assert list(tmp_path.iterdir()) == []


def _rename_split(path):
    info = json.loads((path / "graph.json").read_text())
    info["link"]["valid"] = info["link"].pop("val")
    (path / "graph.json").write_text(json.dumps(info))


def _short_labels(path):
    file = path / "link" / "val" / "edge_label.npy"
    np.save(file, np.load(file)[:-1])


def _long_index(path):
    file = path / "link" / "train" / "edge_label_index.npy"
    np.save(file, np.concatenate([np.load(file), [[0], [1]]], axis=1))


def _integer_labels(path):
    file = path / "link" / "test" / "edge_label.npy"
    np.save(file, np.load(file).astype(np.int64))


def _no_count(path):
    info = json.loads((path / "graph.json").read_text())
    del info["link"]["test"]["num_edges"]
    (path / "graph.json").write_text(json.dumps(info))


@pytest.mark.parametrize("damage, says", [
    (_rename_split, "'link' holds the splits ['valid']; a link split's are train, val, test "
                    "(OGB's 'valid' is 'val'): rename them, or "),
    (_short_labels, "link/val/edge_label.npy' holds 57 labels, "),
    (_short_labels, "graph.json' link 'val' says 58 "
                   "supervision edges (as 'link/val/edge_label_index.npy' holds): a split "
                   "needs one label per edge; "),
    (_long_index, "edge_label_index.npy' has shape (2, 413), graph.json says [2, 412]: "
                 "the files are from different graphs; "),
    (_integer_labels, "link/test/edge_label.npy' holds int64; labels are float32"),
    (_no_count, "link 'test' lacks num_edges; "),
])
def test_a_split_whose_files_disagree_is_refused_naming_the_fix(tmp_path, split, damage, says):
    write_graph_folder(split, tmp_path / "g")
    damage(tmp_path / "g")
    with pytest.raises(ValueError) as error:
        GraphFolder.open(tmp_path / "g")
    assert says in str(error.value) and FIX in str(error.value), str(error.value)


def test_bad_values_are_found_in_the_slice_that_holds_them(tmp_path, split):
    write_graph_folder(split, tmp_path / "g")
    file = tmp_path / "g" / "link" / "train" / "edge_label_index.npy"
    index = np.load(file)
    index[1, 100] = -1
    np.save(file, index)
    folder = GraphFolder.open(tmp_path / "g")
    folder.check_supervision("train", 0, 100)
    folder.check_supervision("train", 101)
    with pytest.raises(ValueError, match=r"names targets outside \[0, 80\) in columns \[100\]: "
                                         r"a split's edges join nodes of the graph; write the "
                                         r"folder again"):
        folder.check_supervision("train", 90, 110)


def test_the_cli_converts_the_seeded_link_split(tmp_path, capsys):
    assert main(["convert", "--task", "link", "--dataset", "synthetic", "--num-nodes", "300",
                 "--seed", "2", "--out", str(tmp_path / "g")]) == 0
    summary = json.loads(capsys.readouterr().out)
    split = split_links(load_dataset("synthetic", num_nodes=300, seed=2), seed=2)
    assert summary["link_sizes"] == {name: d.edge_label.numel()
                                     for name, d in zip(("train", "val", "test"), split)}
    folder = GraphFolder.open(tmp_path / "g")
    assert torch.equal(torch.from_numpy(folder.edges()), split[0].edge_index)
    for name, d in zip(("train", "val", "test"), split):
        index, label = folder.supervision(name)
        assert torch.equal(torch.from_numpy(index), d.edge_label_index)
        assert torch.equal(torch.from_numpy(label), d.edge_label)
    with pytest.raises(SystemExit, match="pyg-dist convert --task link splits a homogeneous "
                                         "graph; --dataset synthetic-mag is heterogeneous"):
        main(["convert", "--task", "link", "--dataset", "synthetic-mag", "--out",
              str(tmp_path / "mag")])
