"""ogbn-mag from a fixture written in OGB's own heterogeneous on-disk layout
(a few dozen nodes per type), streamed in small chunks, against the arrays
the fixture was written from."""
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from command_line import pyg_dist_command
from torch_geometric.data import HeteroData
from torch_geometric.transforms import ToUndirected

import pyg_dist
from pyg_dist.cli import main
from pyg_dist.datasets import HeteroGraphFolder, load_dataset, ogb_csv
from pyg_dist.datasets.load import HETERO_DATASETS
from pyg_dist.datasets.ogb import Evaluator
from pyg_dist.datasets.ogb_mag import ogbn_mag

SIZES = {"paper": 41, "author": 33, "institution": 7, "field_of_study": 11}
EDGES = {("author", "affiliated_with", "institution"): 40, ("author", "writes", "paper"): 90,
         ("paper", "cites", "paper"): 70, ("paper", "has_topic", "field_of_study"): 60}
F = 6


def _mag(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    edges = {}
    for (src, rel, dst), count in EDGES.items():
        # the last author writes nothing and belongs nowhere: its mean is zeros
        high = SIZES[src] - 1 if src == "author" else SIZES[src]
        edges[src, rel, dst] = np.stack([rng.integers(0, high, count),
                                         rng.integers(0, SIZES[dst], count)])
    ids = rng.permutation(SIZES["paper"])
    return {"edges": edges,
            "x": rng.standard_normal((SIZES["paper"], F)).astype(np.float32),
            "year": rng.integers(2010, 2020, SIZES["paper"]),
            "y": rng.integers(0, 349, SIZES["paper"]),
            "split": {"train": np.sort(ids[:25]), "valid": np.sort(ids[25:32]),
                      "test": np.sort(ids[32:])}}


def _csv(path: Path, rows: np.ndarray, fmt: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = rows.reshape(rows.shape[0], -1)
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(",".join(fmt % v for v in row) + "\n")


def _text(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("".join(line + "\n" for line in lines))


def write_mag(root: Path, g: dict) -> None:
    """Writes ``g`` as OGB leaves ogbn-mag under ``root`` (``ogbn_mag/``)."""
    folder = root / "ogbn_mag"
    raw = folder / "raw"
    types = sorted(SIZES)  # OGB's columns: author, field_of_study, institution, paper
    _text(raw / "num-node-dict.csv.gz", [",".join(types), ",".join(str(SIZES[t]) for t in types)])
    _text(raw / "nodetype-has-label.csv.gz", [",".join(types),
                                              ",".join(str(t == "paper") for t in types)])
    relations = list(g["edges"])[::-1]  # not in OGB's sorted order: the reader sorts
    _text(raw / "triplet-type-list.csv.gz", [",".join(e) for e in relations])
    for kind, e in enumerate(sorted(relations)):
        rel = raw / "relations" / "___".join(e)
        _csv(rel / "edge.csv.gz", g["edges"][e].T, "%d")
        _csv(rel / "num-edge-list.csv.gz", np.array([g["edges"][e].shape[1]]), "%d")
        _csv(rel / "edge_reltype.csv.gz", np.full(g["edges"][e].shape[1], kind), "%d")
    _csv(raw / "node-feat" / "paper" / "node-feat.csv.gz", g["x"], "%.9g")
    _csv(raw / "node-feat" / "paper" / "node_year.csv.gz", g["year"], "%d")
    _csv(raw / "node-label" / "paper" / "node-label.csv.gz", g["y"], "%d")
    split = folder / "split" / "time"
    _text(split / "nodetype-has-split.csv.gz", [",".join(types),
                                                ",".join(str(t == "paper") for t in types)])
    for part, ids in g["split"].items():
        _csv(split / "paper" / f"{part}.csv.gz", ids, "%d")


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Chunks of a few rows, so that every stream crosses many chunk borders."""
    monkeypatch.setattr(ogb_csv, "TEXT_CHUNK", 61)


@pytest.fixture
def mag(tmp_path):
    g = _mag()
    write_mag(tmp_path, g)
    return tmp_path, g


def test_ogbn_mag_is_laid_out_as_pyg_lays_it_out(mag):
    root, g = mag
    data = load_dataset("ogbn-mag", root=root, to_undirected=False, features="none")
    assert isinstance(data, HeteroData)
    assert data.node_types == ["paper", "author", "institution", "field_of_study"]
    assert data.edge_types == sorted(EDGES)
    for t, n in SIZES.items():
        assert data[t].num_nodes == n
    for e in EDGES:  # source ids are edge.csv.gz's first column, targets its second
        assert data[e].edge_index.dtype == torch.long
        assert torch.equal(data[e].edge_index, torch.from_numpy(g["edges"][e]))
    paper = data["paper"]
    assert paper.x.dtype == torch.float32 and torch.equal(paper.x, torch.from_numpy(g["x"]))
    assert torch.equal(paper.year, torch.from_numpy(g["year"]))
    assert paper.y.dtype == torch.long and torch.equal(paper.y, torch.from_numpy(g["y"]))
    for part, mask in (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask")):
        assert torch.equal(paper[mask].nonzero().view(-1), torch.from_numpy(g["split"][part]))
    assert [t for t in data.node_types if "x" in data[t]] == ["paper"]
    assert "ogbn-mag" in HETERO_DATASETS


def _mean(rows: np.ndarray, neighbours: np.ndarray, x: np.ndarray, n: int) -> np.ndarray:
    total, count = np.zeros((n, x.shape[1])), np.zeros(n)
    np.add.at(total, rows, x[neighbours])
    np.add.at(count, rows, 1)
    return (total / np.maximum(count, 1)[:, None]).astype(np.float32)


def test_the_default_adds_reverse_relations_and_neighbour_mean_features(mag):
    root, g = mag
    data = load_dataset("ogbn-mag", root=root)
    directed = ogbn_mag(root, to_undirected=False)
    assert set(data.edge_types) == set(EDGES) | {
        ("institution", "rev_affiliated_with", "author"), ("paper", "rev_writes", "author"),
        ("field_of_study", "rev_has_topic", "paper")}
    for (src, rel, dst) in EDGES:
        if src != dst:
            assert torch.equal(data[dst, f"rev_{rel}", src].edge_index,
                               directed[src, rel, dst].edge_index.flip(0))
    cites = data["paper", "cites", "paper"].edge_index
    expected = ToUndirected()(directed.clone())["paper", "cites", "paper"].edge_index
    assert torch.equal(cites, expected)
    pairs = set(map(tuple, cites.t().tolist()))
    assert pairs == {(d, s) for s, d in pairs}
    assert pairs >= set(map(tuple, g["edges"]["paper", "cites", "paper"].T.tolist()))

    (a, p), (p2, f), (a2, i) = (g["edges"]["author", "writes", "paper"],
                                g["edges"]["paper", "has_topic", "field_of_study"],
                                g["edges"]["author", "affiliated_with", "institution"])
    author = _mean(a, p, g["x"], SIZES["author"])
    want = {"author": author, "field_of_study": _mean(f, p2, g["x"], SIZES["field_of_study"]),
            "institution": _mean(i, a2, author, SIZES["institution"])}
    for t, x in want.items():
        assert data[t].x.shape == (SIZES[t], F) and data[t].x.dtype == torch.float32
        torch.testing.assert_close(data[t].x, torch.from_numpy(x))
    assert not data["author"].x[-1].any(), "an author with no papers gets zeros"
    assert torch.equal(data["paper"].x, directed["paper"].x)
    with pytest.raises(ValueError, match="features='embedding'.*'mean'.*'none'"):
        ogbn_mag(root, features="embedding")


def test_ogbn_mag_partitions_and_loads_per_rank(mag, tmp_path):
    root, _ = mag
    data = load_dataset("ogbn-mag", root=root)
    meta = pyg_dist.partition(data, 2, tmp_path / "parts")
    assert meta.num_nodes == sum(SIZES.values())
    assert meta.types.num_nodes == SIZES
    seen = {t: [] for t in SIZES}
    for rank in range(2):
        part = pyg_dist.DistHeteroData.load(tmp_path / "parts", rank=rank)
        assert part.metadata() == data.metadata()
        gid = part["paper"].global_id
        for key in ("x", "year", "y", "train_mask", "val_mask", "test_mask"):
            assert torch.equal(getattr(part["paper"], key), data["paper"][key][gid]), key
        for t in SIZES:
            seen[t].append(part[t].global_id)
            assert torch.equal(part.x_dict[t], data[t].x[part[t].global_id])
        rel = part["author", "writes", "paper"].edge_index
        src, dst = rel.global_edges()
        assert torch.equal(torch.stack([src, dst]),
                           data["author", "writes", "paper"].edge_index[:, rel.edge_id])
    for t, n in SIZES.items():
        assert torch.equal(torch.cat(seen[t]).sort().values, torch.arange(n))


def test_the_evaluator_takes_ogbs_format_for_ogbn_mag():
    # the papers' rows in OGB's column layout; rows 0 and 2 are right: 2 of 4
    y_true = np.array([[348], [0], [17], [17]])
    y_pred = torch.tensor([[348], [1], [17], [16]])
    evaluator = Evaluator("ogbn-mag")
    assert evaluator.eval({"y_true": torch.from_numpy(y_true), "y_pred": y_pred}) == \
        {"acc": 0.5}
    with pytest.raises(ValueError, match=r"dict of node types.*y_true\['paper'\]"):
        evaluator.eval({"y_true": {"paper": y_true}, "y_pred": y_pred})


def test_a_missing_ogbn_mag_says_that_nothing_downloads_and_how_to(tmp_path, capsys):
    with pytest.raises(FileNotFoundError,
                       match="does not download.*NodePropPredDataset\\('ogbn-mag'"):
        load_dataset("ogbn-mag", root=tmp_path)
    with pytest.raises(ValueError, match="holding ogbn_mag/raw.*pass root"):
        load_dataset("ogbn-mag")
    # the command line checks the folder before loading: one line, exit status 2
    with pytest.raises(SystemExit, match="--dataset ogbn-mag: no ogbn_mag/raw in --root .*"
                                         "does not download") as exit_:
        main(["convert", "--dataset", "ogbn-mag", "--root", str(tmp_path),
              "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2
    assert not (tmp_path / "out").exists()


def test_convert_writes_ogbn_mag_as_a_heterogeneous_graph_folder(mag, tmp_path):
    root, _ = mag
    assert main(["convert", "--dataset", "ogbn-mag", "--root", str(root),
                 "--out", str(tmp_path / "mag-graph")]) == 0
    data = load_dataset("ogbn-mag", root=root)
    back = HeteroGraphFolder.open(tmp_path / "mag-graph").to_data()
    assert back.node_types == data.node_types and back.edge_types == data.edge_types
    for t in data.node_types:
        assert back[t].num_nodes == data[t].num_nodes, t
        for key, value in data[t].items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(back[t][key], value), (t, key)
    for e in data.edge_types:
        assert torch.equal(back[e].edge_index, data[e].edge_index), e


def _break(root: Path, how: str) -> None:
    raw = root / "ogbn_mag" / "raw"
    writes = raw / "relations" / "author___writes___paper"
    if how == "edges":
        (writes / "edge.csv.gz").unlink()
    elif how == "count":
        _csv(writes / "num-edge-list.csv.gz", np.array([93]), "%d")
    elif how == "source":  # an author id past the authors, though not past the papers
        _csv(writes / "edge.csv.gz", np.array([[0, 1], [SIZES["author"], 2]]), "%d")
        _csv(writes / "num-edge-list.csv.gz", np.array([2]), "%d")
    elif how == "target":
        _csv(writes / "edge.csv.gz", np.array([[0, SIZES["paper"]]]), "%d")
        _csv(writes / "num-edge-list.csv.gz", np.array([1]), "%d")
    elif how == "features":
        _csv(raw / "node-feat" / "paper" / "node-feat.csv.gz",
             np.zeros((SIZES["paper"] + 2, F)), "%g")
    elif how == "labels":
        _csv(raw / "node-label" / "paper" / "node-label.csv.gz",
             np.zeros(SIZES["paper"] - 1), "%d")
    elif how == "split":
        _csv(root / "ogbn_mag" / "split" / "time" / "paper" / "test.csv.gz",
             np.array([3, SIZES["paper"] + 4]), "%d")
    elif how == "no split":
        (root / "ogbn_mag" / "split" / "time" / "paper" / "valid.csv.gz").unlink()
    elif how == "types":
        _text(raw / "triplet-type-list.csv.gz", ["author,writes,paper", "paper,at,venue"])
    elif how == "sizes":
        _text(raw / "num-node-dict.csv.gz", ["author,paper", "33"])


@pytest.mark.parametrize("how, message", [
    ("edges", "author___writes___paper/edge.csv.gz' is missing.*copy OGB's 'raw' folder"),
    ("count", "holds 90 edges, num-edge-list.csv.gz says 93.*download the dataset again"),
    ("source", r"names author nodes \(first column\) outside \[0, 33\).*download it again"),
    ("target", r"names paper nodes \(second column\) outside \[0, 41\)"),
    ("features", "node-feat.csv.gz' holds more than [0-9]+ rows, the dataset has 41"),
    ("labels", "node-label.csv.gz' holds 40 rows.*41"),
    ("split", r"test.csv.gz' names nodes outside \[0, 41\)"),
    ("no split", "valid.csv.gz' is missing: the official split of ogbn-mag"),
    ("types", "names node type 'venue'.*num-node-dict.csv.gz does not count"),
    ("sizes", "not a header of node types over lines of their counts"),
])
def test_damaged_ogbn_mag_folders_are_refused_naming_the_fix(mag, how, message):
    root, _ = mag
    _break(root, how)
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        load_dataset("ogbn-mag", root=root)


def test_pyg_dist_train_trains_ogbn_mag_from_its_folder(mag):
    root, _ = mag
    done = pyg_dist_command("train", "--dataset", "ogbn-mag", "--root", root, "--parts", "2",
                            "--epochs", "2", "--hidden", "8", "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    assert result["dataset"] == "ogbn-mag" and result["node_type"] == "paper"
    assert result["parts"] == 2 and result["epochs"] == 2 and result["halo_bytes_fwd"] > 0
