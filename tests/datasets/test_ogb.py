"""OGB's node-property datasets from fixtures written in OGB's own on-disk
layout (CSV for ogbn-arxiv and ogbn-products, npz for ogbn-papers100M),
streamed in small chunks, against the arrays the fixtures were written from."""
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from pyg_dist.cli import main
from pyg_dist.datasets import GraphFolder, load_dataset, ogb_csv
from pyg_dist.datasets import ogb as ogb_module
from pyg_dist.datasets.ogb import OGB, Evaluator, convert_ogbn, ogbn

N, E, F = 57, 240, 5


def _graph(seed: int, classes: int, unlabelled: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, N, E), rng.integers(0, N, E)
    y = rng.integers(0, classes, N).astype(np.float64)
    if unlabelled:
        y[rng.random(N) < 0.3] = np.nan
    ids = rng.permutation(N)
    return {"edges": np.stack([src, dst]), "x": rng.standard_normal((N, F)).astype(np.float32),
            "y": y, "year": rng.integers(1990, 2020, N),
            "split": {"train": np.sort(ids[:30]), "valid": np.sort(ids[30:40]),
                      "test": np.sort(ids[40:])}}


def _csv(path: Path, rows: np.ndarray, fmt: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = rows.reshape(rows.shape[0], -1)
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(",".join(fmt % v for v in row) + "\n")


def write_ogb(root: Path, name: str, g: dict) -> None:
    """Writes ``g`` as OGB leaves dataset ``name`` under ``root``."""
    spec = OGB[name]
    folder = root / spec.folder
    raw = folder / "raw"
    if spec.binary:
        raw.mkdir(parents=True)
        np.savez_compressed(raw / "data.npz", edge_index=g["edges"], node_feat=g["x"],
                            num_nodes_list=np.array([N]), num_edges_list=np.array([E]),
                            node_year=g["year"].reshape(-1, 1))
        np.savez_compressed(raw / "node-label.npz", node_label=g["y"].reshape(-1, 1))
    else:
        _csv(raw / "edge.csv.gz", g["edges"].T, "%d")
        _csv(raw / "num-node-list.csv.gz", np.array([N]), "%d")
        _csv(raw / "num-edge-list.csv.gz", np.array([E]), "%d")
        _csv(raw / "node-feat.csv.gz", g["x"], "%.9g")  # float32 survives 9 digits
        _csv(raw / "node-label.csv.gz", g["y"], "%d")
        for extra in spec.extra:
            _csv(raw / f"{extra}.csv.gz", g["year"], "%d")
    for part, ids in g["split"].items():
        _csv(folder / "split" / spec.split / f"{part}.csv.gz", ids, "%d")


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Chunks of a few rows, so that every stream crosses many chunk borders."""
    monkeypatch.setattr(ogb_csv, "TEXT_CHUNK", 97)
    monkeypatch.setattr(ogb_module, "ROW_CHUNK", 13)


def _expected(name: str, g: dict) -> dict:
    edges = g["edges"]
    if OGB[name].add_inverse_edge:  # OGB puts the reverse of every edge right after it
        edges = np.repeat(edges, 2, axis=1)
        edges[:, 1::2] = edges[::-1, 0::2]
    y = np.where(np.isnan(g["y"]), -1, g["y"]).astype(np.int64)
    return {"edges": edges, "x": g["x"], "y": y, "year": g["year"]}


@pytest.mark.parametrize("name", list(OGB))
def test_ogb_folders_load_with_the_official_split(tmp_path, name):
    g = _graph(seed=len(name), classes=OGB[name].num_classes,
               unlabelled=name == "ogbn-papers100M")
    write_ogb(tmp_path, name, g)
    data = load_dataset(name, root=tmp_path)
    want = _expected(name, g)
    assert data.num_nodes == N
    assert torch.equal(data.edge_index, torch.from_numpy(want["edges"]))
    assert data.edge_index.dtype == torch.long
    assert torch.equal(data.x, torch.from_numpy(want["x"]))
    assert torch.equal(data.y, torch.from_numpy(want["y"]))
    if "node_year" in OGB[name].extra:
        assert torch.equal(data.node_year, torch.from_numpy(want["year"]))
    for part, mask in (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask")):
        assert torch.equal(data[mask].nonzero().view(-1), torch.from_numpy(g["split"][part]))

    folder = convert_ogbn(name, tmp_path, tmp_path / "folder")
    assert folder.num_classes == OGB[name].num_classes
    again = folder.to_data()
    for key in ("edge_index", "x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(again[key], data[key]), key
    assert folder.edges(3, 9).tolist() == want["edges"][:, 3:9].tolist()


def test_the_cli_converts_an_ogb_folder(tmp_path, capsys):
    write_ogb(tmp_path, "ogbn-arxiv", _graph(seed=3, classes=40))
    assert main(["convert", "--dataset", "ogbn-arxiv", "--root", str(tmp_path),
                 "--out", str(tmp_path / "arxiv")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["num_nodes"] == N and summary["num_edges"] == E
    folder = GraphFolder.open(tmp_path / "arxiv")
    assert folder.name == "ogbn-arxiv" and "train_mask" in folder.node_attrs


def test_a_missing_dataset_says_that_nothing_downloads_and_how_to(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not download.*NodePropPredDataset"):
        load_dataset("ogbn-products", root=tmp_path)
    with pytest.raises(ValueError, match="pass root"):
        load_dataset("ogbn-arxiv")
    with pytest.raises(FileNotFoundError, match="does not download"):
        convert_ogbn("ogbn-arxiv", tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _break(root: Path, how: str) -> None:
    raw = root / "ogbn_arxiv" / "raw"
    if how == "count":
        _csv(raw / "num-edge-list.csv.gz", np.array([E + 5]), "%d")
    elif how == "range":
        edges = np.array([[0, 1], [2, N]])
        _csv(raw / "edge.csv.gz", edges, "%d")
        _csv(raw / "num-edge-list.csv.gz", np.array([2]), "%d")
    elif how == "nan":
        x = np.zeros((N, F), dtype=np.float32)
        x[7, 2] = np.nan
        _csv(raw / "node-feat.csv.gz", x, "%.9g")
    elif how == "labels":
        _csv(raw / "node-label.csv.gz", np.zeros(N - 1), "%d")
    elif how == "split":
        (root / "ogbn_arxiv" / "split" / "time" / "valid.csv.gz").unlink()


@pytest.mark.parametrize("how, message", [
    ("count", "holds 240 edges, num-edge-list.csv.gz says 245.*download the dataset again"),
    ("range", "outside \\[0, 57\\).*download it again"),
    ("nan", "NaN or infinite features in rows \\[7\\]"),
    ("labels", "holds 56 rows.*57"),
    ("split", "valid.csv.gz' is missing"),
])
def test_damaged_ogb_folders_are_refused_and_nothing_is_written(tmp_path, how, message):
    write_ogb(tmp_path, "ogbn-arxiv", _graph(seed=4, classes=40))
    _break(tmp_path, how)
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        convert_ogbn("ogbn-arxiv", tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        ogbn("ogbn-arxiv", tmp_path)


@pytest.mark.parametrize("y_true, y_pred", [
    # OGB's layout: one column (the single task) of labels and of predictions
    (torch.tensor([[3], [1], [4], [1], [5]]), np.array([[3], [1], [0], [1], [2]])),
    # 1-d labels against a column of predictions (argmax(dim=-1, keepdim=True))
    (torch.tensor([3, 1, 4, 1, 5]), torch.tensor([[3], [1], [0], [1], [2]])),
    (np.array([3, 1, 4, 1, 5]), np.array([3, 1, 0, 1, 2])),
], ids=["columns", "labels-1d", "numpy-1d"])
def test_the_evaluator_is_the_share_of_right_predictions(y_true, y_pred):
    # rows 0, 1 and 3 are right: 3 of 5
    assert Evaluator("ogbn-arxiv").eval({"y_true": y_true, "y_pred": y_pred}) == {"acc": 0.6}


def test_the_evaluator_on_one_node_and_on_all_wrong():
    evaluator = Evaluator("ogbn-products")
    assert evaluator.eval({"y_true": np.array([[7]]), "y_pred": np.array([[7]])}) == {"acc": 1.0}
    assert evaluator.eval({"y_true": np.array([[0], [1]]),
                           "y_pred": np.array([[1], [0]])}) == {"acc": 0.0}
    with pytest.raises(ValueError, match="one prediction per labelled node"):
        evaluator.eval({"y_true": np.zeros((5, 1)), "y_pred": np.zeros((4, 1))})
    with pytest.raises(ValueError, match="use one of"):
        Evaluator("ogbn-proteins")
