"""Heterogeneous graph folders: written atomically from a ``HeteroData``,
read back a slice at a time per type and relation, and bad folders refused
with errors that name the fix."""
import json

import numpy as np
import pytest
import torch
from hetero.hetero_graphs import small_hetero

from pyg_dist.datasets import (
    GraphFolder,
    HeteroGraphFolder,
    open_graph_folder,
    write_graph_folder,
)

CITES = ("paper", "cites", "paper")
WRITES = ("author", "writes", "paper")


@pytest.fixture
def data():
    return small_hetero(seed=2)


def test_a_folder_holds_the_hetero_graph_and_reads_back_slices(tmp_path, data):
    folder = write_graph_folder(data, tmp_path / "g")
    assert isinstance(folder, HeteroGraphFolder)
    assert isinstance(open_graph_folder(tmp_path / "g"), HeteroGraphFolder)
    assert folder.node_types == data.node_types
    assert folder.edge_types == data.edge_types
    assert folder.sizes == {t: data[t].num_nodes for t in data.node_types}
    assert folder.num_nodes == data.num_nodes and folder.num_edges == data.num_edges
    assert folder.num_classes == {"paper": int(data["paper"].y.max()) + 1}
    assert sorted(folder.node_attrs("paper")) == ["train_mask", "x", "y"]
    assert (tmp_path / "g" / "edges" / "paper__cites__paper.npy").is_file()
    assert (tmp_path / "g" / "paper" / "split" / "train.npy").is_file()
    src, dst = data[WRITES].edge_index
    assert np.array_equal(folder.edges(WRITES, 10, 30), torch.stack([src, dst])[:, 10:30])
    assert np.array_equal(folder.node("paper", "x", 5, 9), data["paper"].x[5:9])
    assert np.array_equal(folder.node("paper", "train_mask", 3, 20),
                          data["paper"].train_mask[3:20])
    back = folder.to_data()
    for t in data.node_types:
        assert set(back[t].keys()) - {"num_nodes"} == set(data[t].keys()), t
        for key in data[t].keys():
            assert torch.equal(back[t][key], data[t][key]), (t, key)
    for e in data.edge_types:
        assert torch.equal(back[e].edge_index, data[e].edge_index), e
    for e in folder.edge_types:
        folder.check_edges(e)
    for t in folder.node_types:
        folder.check_nodes(t)
    assert [p.name for p in tmp_path.iterdir()] == ["g"], "no temporary folder is left"


def test_int32_ids_an_empty_relation_and_a_type_without_attributes(tmp_path, data):
    data[CITES].edge_index = data[CITES].edge_index.int()
    data["venue"].num_nodes = 3
    data["venue", "hosts", "paper"].edge_index = torch.empty(2, 0, dtype=torch.long)
    folder = write_graph_folder(data, tmp_path / "g")
    assert folder.edges(CITES, dtype=np.int32).dtype == np.int32
    assert np.array_equal(folder.edges(CITES), data[CITES].edge_index.long())
    assert folder.sizes["venue"] == 3 and folder.node_attrs("venue") == []
    assert folder.edges(("venue", "hosts", "paper")).shape == (2, 0)


def test_each_kind_opens_with_its_own_class(tmp_path, data):
    from torch_geometric.data import Data

    write_graph_folder(data, tmp_path / "hetero")
    write_graph_folder(Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2), tmp_path / "homo")
    assert isinstance(open_graph_folder(tmp_path / "homo"), GraphFolder)
    with pytest.raises(ValueError, match="heterogeneous graph; open it with .*HeteroGraphFolder"):
        GraphFolder.open(tmp_path / "hetero")
    with pytest.raises(ValueError, match="homogeneous graph; open it with .*GraphFolder.open"):
        HeteroGraphFolder.open(tmp_path / "homo")


def test_bad_input_is_refused_and_nothing_is_written(tmp_path, data):
    bad = small_hetero(seed=2)
    bad["author"].x[4, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN or infinite.*'author.x'.*nan_to_num"):
        write_graph_folder(bad, tmp_path / "g")
    bad = small_hetero(seed=2)
    bad[WRITES].edge_index[1, 7] = bad["paper"].num_nodes
    with pytest.raises(ValueError, match="target ids of relation .*writes.* outside \\[0, 48\\) "
                                         "of node type 'paper'.*num_nodes"):
        write_graph_folder(bad, tmp_path / "g")
    bad = small_hetero(seed=2)
    bad["paper", "in", "venue"].edge_index = torch.tensor([[0, 1], [0, 0]])
    with pytest.raises(ValueError, match=r"^'write_graph_folder' found relation \('paper', 'in', "
                                         r"'venue'\) whose target type 'venue' is no node type "
                                         r"of the graph \(paper, author, field, institution\); "
                                         r"give it nodes \(data\['venue'\]\.num_nodes = N.*"
                                         r"or delete the relation \(del data\[\('paper', 'in', "
                                         r"'venue'\)\]\)$"):
        write_graph_folder(bad, tmp_path / "g")
    assert list(tmp_path.iterdir()) == []
    write_graph_folder(data, tmp_path / "g")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_graph_folder(data, tmp_path / "g")


def _edit_info(path, edit):
    info = json.loads((path / "graph.json").read_text())
    edit(info)
    (path / "graph.json").write_text(json.dumps(info))


def test_bad_folders_are_refused_with_the_fix(tmp_path, data):
    path = tmp_path / "g"
    write_graph_folder(data, path)
    x = np.load(path / "author" / "x.npy")
    np.save(path / "author" / "x.npy", x[:-1])
    with pytest.raises(ValueError, match="'x' of node type 'author'.* has 35 rows, graph.json "
                                         "says 36.*one row per node"):
        HeteroGraphFolder.open(path)
    x[30, 2] = np.inf
    np.save(path / "author" / "x.npy", x)
    folder = HeteroGraphFolder.open(path)
    folder.check_nodes("author", 0, 30)
    with pytest.raises(ValueError, match="'x' of node type 'author' \\(rows \\[30\\]\\).*"
                                         "nan_to_num"):
        folder.check_nodes("author", 30, 36)
    edges = np.load(path / "edges" / "author__writes__paper.npy")
    edges[0, 50] = 36
    np.save(path / "edges" / "author__writes__paper.npy", edges)
    folder = HeteroGraphFolder.open(path)
    folder.check_edges(WRITES, 0, 50)
    with pytest.raises(ValueError, match="author__writes__paper.npy' names sources outside "
                                         "\\[0, 36\\) in columns \\[50\\].*'author' and 'paper'"):
        folder.check_edges(WRITES, 40, 60)
    _edit_info(path, lambda info: info["edge_types"][1].update(num_edges=91))
    with pytest.raises(ValueError, match="shape \\(2, 90\\), graph.json says \\[2, 91\\].*"
                                         "different graphs"):
        HeteroGraphFolder.open(path)
    _edit_info(path, lambda info: info["edge_types"][1].update(num_edges=90,
                                                               type=["venue", "writes", "paper"]))
    with pytest.raises(ValueError, match="relation \\['venue', 'writes', 'paper'\\] whose node "
                                         "types \\['venue'\\] are not among"):
        HeteroGraphFolder.open(path)
    _edit_info(path, lambda info: info["edge_types"][1].update(type="author__writes__paper"))
    with pytest.raises(ValueError, match=r"', edge_types: 'type' must be a relation \[\"source\", "
                                         r"\"name\", \"target\"\] \(got \"author__writes__paper"
                                         r"\"\); fix it or convert the graph again"):
        HeteroGraphFolder.open(path)
    _edit_info(path, lambda info: info["node_types"][1].update(node=["author/x.npy"]))
    with pytest.raises(ValueError, match=r"', node type 'author': 'node' must be an object of "
                                         r"attribute names to \.npy files"):
        HeteroGraphFolder.open(path)
    _edit_info(path, lambda info: info["node_types"][1].update(node={"x": "author/x.npy"}))
    _edit_info(path, lambda info: info["edge_types"][1].update(type=list(WRITES)))
    train = np.load(path / "paper" / "split" / "train.npy")
    (path / "paper" / "split" / "train.npy").unlink()
    with pytest.raises(FileNotFoundError, match="split 'train_mask' of node type 'paper' is "
                                                "missing"):
        HeteroGraphFolder.open(path)
    np.save(path / "paper" / "split" / "train.npy", train)
    (path / "field" / "x.npy").unlink()
    with pytest.raises(FileNotFoundError, match="field/x.npy' is missing.*convert the graph"):
        HeteroGraphFolder.open(path)
