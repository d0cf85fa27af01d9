"""OGB's link datasets from fixtures written in OGB's on-disk layout:
load_dataset gives (data, split_edge), partition stores each split's edges
on their sources' owners, citation2's per-source negatives become pairs, and
a missing folder names the command that downloads it."""
import pytest
import torch
from ogbl_files import write_ogbl as _fixture

import pyg_dist
from pyg_dist.datasets import load_dataset


def test_collab_layout_partitions_as_a_link_split(tmp_path):
    edges = [[0, 1], [1, 2], [2, 3], [4, 5], [5, 0]]
    splits = {"train": {"edge": torch.tensor(edges[:3])},
              "valid": {"edge": torch.tensor([[3, 4]]), "edge_neg": torch.tensor([[0, 3]])},
              "test": {"edge": torch.tensor([[1, 4]]), "edge_neg": torch.tensor([[2, 5]])}}
    _fixture(tmp_path, "ogbl_collab", "time", 7, edges, True, splits)
    data, split_edge = load_dataset("ogbl-collab", tmp_path)
    # each stored edge, then its reverse (OGB's add_inverse_edge)
    assert data.edge_index[:, :2].tolist() == [[0, 1], [1, 0]] and data.edge_index.size(1) == 10
    assert data.num_nodes == 7 and data.x.shape == (7, 3)
    assert float(data.x[2, 1]) == pytest.approx(0.7)
    meta = pyg_dist.partition((data, split_edge), 2, tmp_path / "parts", method="random")
    assert meta.link_splits == ["train", "val", "test"]
    parts = [pyg_dist.DistData.load(tmp_path / "parts", rank=r) for r in range(2)]
    val = [p.supervision("val") for p in parts]
    got = sorted(zip(torch.cat([v.index for v in val], 1).t().tolist(),
                     torch.cat([v.label for v in val]).tolist()))
    assert got == [([0, 3], 0.0), ([3, 4], 1.0)]
    for p in parts:
        assert bool(torch.isin(p.supervision("train").index[0], p.global_id).all())


def test_citation2_negatives_become_pairs_and_ddi_has_no_features(tmp_path):
    neg = torch.tensor([[2, 3], [0, 1]])
    splits = {"train": {"source_node": torch.tensor([0, 1]), "target_node": torch.tensor([1, 2])},
              "valid": {"source_node": torch.tensor([0, 3]), "target_node": torch.tensor([3, 2]),
                        "target_node_neg": neg},
              "test": {"source_node": torch.tensor([1]), "target_node": torch.tensor([3]),
                       "target_node_neg": torch.tensor([[0, 2]])}}
    _fixture(tmp_path, "ogbl_citation2", "time", 4, [[0, 1], [1, 2]], True, splits)
    data, split_edge = load_dataset("ogbl-citation2", tmp_path)
    assert data.edge_index.tolist() == [[0, 1], [1, 2]]  # directed: no reverse added
    assert split_edge["valid"]["edge"].tolist() == [[0, 3], [3, 2]]
    assert split_edge["valid"]["edge_neg"].tolist() == [[0, 2], [0, 3], [3, 0], [3, 1]]
    _fixture(tmp_path, "ogbl_ddi", "target", 3, [[0, 1]], False,
             {s: {"edge": torch.tensor([[0, 1]])} for s in ("train", "valid", "test")})
    ddi, _ = load_dataset("ogbl-ddi", tmp_path)
    assert "x" not in ddi and ddi.edge_index.tolist() == [[0, 1], [1, 0]]


def test_missing_dataset_names_the_download(tmp_path):
    with pytest.raises(FileNotFoundError, match="LinkPropPredDataset\\('ogbl-collab'"):
        load_dataset("ogbl-collab", tmp_path)
    with pytest.raises(ValueError, match="pass root="):
        load_dataset("ogbl-ddi")
