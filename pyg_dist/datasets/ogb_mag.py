r"""ogbn-mag, OGB's heterogeneous node-property dataset, read from the
folder OGB downloads into a :class:`~torch_geometric.data.HeteroData` laid
out as PyG's :class:`~torch_geometric.datasets.OGB_MAG` lays it out.

Nothing is downloaded here: the folder ``root/ogbn_mag/`` (as OGB's
``NodePropPredDataset("ogbn-mag")`` leaves it) must be there. Its CSV files
are streamed a chunk of text at a time (``pyg_dist.datasets.ogb_csv``):

::

    root/ogbn_mag/
      raw/num-node-dict.csv.gz       a header of node types, a line of their counts
      raw/triplet-type-list.csv.gz   one relation "src,rel,dst" per line
      raw/relations/author___writes___paper/
        edge.csv.gz                  "src,dst" per line: an author, a paper it wrote
        num-edge-list.csv.gz         E
        edge_reltype.csv.gz          the relation's id, per edge (not read)
      raw/node-feat/paper/node-feat.csv.gz    N lines of 128 floats (word2vec)
      raw/node-feat/paper/node_year.csv.gz    N lines of one year
      raw/node-label/paper/node-label.csv.gz  N lines of one venue (349 classes)
      split/time/paper/train.csv.gz           paper ids, one per line (also valid, test)

The result has node types ``paper`` (``x`` ``[N, 128]`` float32, ``year``,
``y`` ``[N]`` int64, and ``train_mask``, ``val_mask``, ``test_mask`` from the
official time split), ``author``, ``institution`` and ``field_of_study``, and
the relations ``(author, affiliated_with, institution)``,
``(author, writes, paper)``, ``(paper, cites, paper)`` and
``(paper, has_topic, field_of_study)``, each edge pointing from the first
column of its ``edge.csv.gz`` to the second.

Two choices go beyond PyG's ``OGB_MAG()``, both made so that the graph is
what the heterogeneous models of this package train on (and what
``synthetic-mag`` gives):

- **Reverse relations** (``to_undirected=True``): as
  :class:`torch_geometric.transforms.ToUndirected` adds them: ``(institution,
  rev_affiliated_with, author)``, ``(paper, rev_writes, author)`` and
  ``(field_of_study, rev_has_topic, paper)``, and citations made symmetric.
  Without them, authors, institutions and fields receive no messages, and
  papers none from their fields.
- **Features of the featureless types** (``features="mean"``): OGB gives only
  papers features, while ``HGTConv`` and ``RGCNConv`` on ``to_homogeneous()``
  read an ``x`` of one width for every type. An author gets the mean of the
  features of the papers it wrote, a field of study the mean of its papers',
  an institution the mean of its authors' (type by type, from the types that
  already have features; a node with no such neighbour gets zeros). These
  are fixed inputs, computed once, with nothing to download or train (PyG's
  ``preprocess="metapath2vec"`` instead downloads embeddings trained on the
  graph). ``features="none"`` leaves the three types without ``x``, for models
  that learn an embedding per node.
"""
from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import HeteroData
from torch_geometric.transforms import ToUndirected

from pyg_dist.datasets.ogb_csv import (
    check_count,
    check_ids,
    csv_chunks,
    csv_ids,
    csv_total,
    fill_rows,
    not_downloaded,
)

__all__ = ["ogbn_mag", "MAG_NAME", "MAG_FOLDER", "MAG_CLASSES", "FEATURES"]

MAG_NAME = "ogbn-mag"
#: The dataset's folder under ``root`` (as OGB names it).
MAG_FOLDER = "ogbn_mag"
#: Venues of the papers' ``y`` (OGB's ``master.csv``).
MAG_CLASSES = 349
#: The type with labels and the official split.
LABELLED = "paper"
#: What :func:`ogbn_mag` gives the types OGB has no features for.
FEATURES = ("mean", "none")
#: Edges whose neighbour rows are gathered at a time by the feature means:
#: 128 MiB of float32 rows at ogbn-mag's 128 features.
MEAN_CHUNK = 1 << 18

_SPLITS = {"train": "train_mask", "valid": "val_mask", "test": "test_mask"}

EdgeType = tuple[str, str, str]


def ogbn_mag(root: str | os.PathLike, to_undirected: bool = True,
             features: str = "mean") -> HeteroData:
    r"""ogbn-mag from ``root`` as a :class:`~torch_geometric.data.HeteroData`
    (see the module's description for its layout and the two choices).

    Args:
        root (str or os.PathLike): The folder OGB downloaded into (holding
            ``ogbn_mag/raw``).
        to_undirected (bool, optional): Add the reverse relations and make
            citations symmetric, as
            :class:`~torch_geometric.transforms.ToUndirected` does.
            (default: :obj:`True`)
        features (str, optional): :obj:`"mean"`: every featureless type's
            ``x`` is the mean of its neighbours' features; :obj:`"none"`:
            only papers have ``x``. (default: :obj:`"mean"`)
    """
    if features not in FEATURES:
        raise ValueError(f"'ogbn_mag' got features={features!r}; use 'mean' (neighbour "
                         f"means) or 'none' (papers only)")
    root = Path(root)
    folder = root / MAG_FOLDER
    raw = folder / "raw"
    if not (raw / "triplet-type-list.csv.gz").is_file():
        raise not_downloaded(MAG_NAME, root, MAG_FOLDER, "triplet-type-list.csv.gz")
    sizes = _num_node_dict(raw / "num-node-dict.csv.gz")
    relations = _triplets(raw / "triplet-type-list.csv.gz", sizes)
    data = HeteroData()
    for t in _node_order(sizes, relations):
        data[t].num_nodes = sizes[t]
        feat = raw / "node-feat" / t / "node-feat.csv.gz"
        if feat.is_file():
            data[t].x = _rows(feat, sizes[t], np.float32)
    paper = data[LABELLED]
    paper.year = _rows(raw / "node-feat" / LABELLED / "node_year.csv.gz", sizes[LABELLED],
                       np.int64, label=True)
    paper.y = _rows(raw / "node-label" / LABELLED / "node-label.csv.gz", sizes[LABELLED],
                    np.int64, label=True)
    for file, mask in _SPLITS.items():
        path = folder / "split" / "time" / LABELLED / f"{file}.csv.gz"
        if not path.is_file():
            raise FileNotFoundError(f"'{path}' is missing: the official split of ogbn-mag is "
                                    f"incomplete; copy OGB's 'split' folder again")
        chosen = torch.zeros(sizes[LABELLED], dtype=torch.bool)
        chosen[torch.from_numpy(csv_ids(path, sizes[LABELLED]))] = True
        paper[mask] = chosen
    for relation in relations:
        data[relation].edge_index = _relation(raw, relation, sizes)
    if features == "mean":
        _mean_features(data)
    return ToUndirected()(data) if to_undirected else data


def _read_text(path: Path) -> list[list[str]]:
    """The non-empty lines of the small gzipped CSV ``path``, split at commas."""
    if not path.is_file():
        raise FileNotFoundError(f"'{path}' is missing; copy OGB's 'raw' folder again")
    with gzip.open(path, "rt") as f:
        return [[cell.strip() for cell in line.split(",")] for line in f if line.strip()]


def _num_node_dict(path: Path) -> dict[str, int]:
    """``num-node-dict.csv.gz``: node types as a header, one line of counts per
    graph (one graph here; several are summed as OGB does)."""
    lines = _read_text(path)
    if len(lines) < 2 or any(len(line) != len(lines[0]) for line in lines[1:]):
        raise ValueError(f"'{path}' is not a header of node types over lines of their counts; "
                         f"download the dataset again")
    try:
        counts = np.array(lines[1:], dtype=np.int64).sum(axis=0)
    except ValueError as exc:
        raise ValueError(f"'{path}' has counts that are not integers ({exc}); download the "
                         f"dataset again") from exc
    if (counts < 0).any():
        raise ValueError(f"'{path}' has negative node counts; download the dataset again")
    return dict(zip(lines[0], counts.tolist()))


def _triplets(path: Path, sizes: dict[str, int]) -> list[EdgeType]:
    """``triplet-type-list.csv.gz``: the relations, sorted as OGB sorts them."""
    lines = _read_text(path)
    if not lines or any(len(line) != 3 for line in lines):
        raise ValueError(f"'{path}' is not a list of 'src,rel,dst' relations; download the "
                         f"dataset again")
    for src, rel, dst in lines:
        for t in (src, dst):
            if t not in sizes:
                raise ValueError(f"'{path}' names node type '{t}' (in {src}___{rel}___{dst}), "
                                 f"which num-node-dict.csv.gz does not count; the files are "
                                 f"from different downloads: download the dataset again")
    if LABELLED not in sizes:
        raise ValueError(f"num-node-dict.csv.gz next to '{path}' counts no '{LABELLED}' "
                         f"nodes; this is not ogbn-mag: download it again")
    return sorted((src, rel, dst) for src, rel, dst in lines)


def _node_order(sizes: dict[str, int], relations: list[EdgeType]) -> list[str]:
    """PyG's order of the node types: the labelled type first (the first rows
    of ``to_homogeneous()``), then as the relations name them."""
    order = [LABELLED]
    for src, _, dst in relations:
        order += [t for t in (src, dst) if t not in order]
    return order + [t for t in sizes if t not in order]


def _rows(path: Path, num_nodes: int, dtype: Any, label: bool = False) -> Tensor:
    arrays: list[np.ndarray] = []

    def allocate(shape: tuple[int, ...]) -> np.ndarray:
        arrays.append(np.empty(shape, dtype=dtype))
        return arrays[0]

    fill_rows(path, num_nodes, dtype, allocate, label)
    if not arrays:  # an empty file of no nodes
        arrays.append(np.empty((0,) if label else (0, 0), dtype=dtype))
    return torch.from_numpy(arrays[0])


def _relation(raw: Path, relation: EdgeType, sizes: dict[str, int]) -> Tensor:
    """``[2, E]`` int64: the rows of the relation's ``edge.csv.gz`` as columns,
    source ids checked against the source type's count, targets against the
    target type's."""
    src, _, dst = relation
    folder = raw / "relations" / "___".join(relation)
    path, count_path = folder / "edge.csv.gz", folder / "num-edge-list.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"'{path}' is missing (triplet-type-list.csv.gz lists the "
                                f"relation); copy OGB's 'raw' folder again")
    stored = csv_total(count_path)
    edges, filled = np.empty((2, stored), dtype=np.int64), 0
    for block in csv_chunks(path, np.int64, columns=2):
        check_ids(block[:, 0], sizes[src], path, f"{src} nodes (first column)")
        check_ids(block[:, 1], sizes[dst], path, f"{dst} nodes (second column)")
        end = filled + block.shape[0]
        if end > stored:
            check_count(end, stored, path, "edges", count_path, more=True)
        edges[:, filled:end] = block.T
        filled = end
    check_count(filled, stored, path, "edges", count_path)
    return torch.from_numpy(edges)


def _mean_features(data: HeteroData) -> None:
    """Gives every type without ``x`` the mean ``x`` of its neighbours over
    the relations linking it to types that had one before this round; types
    left with no such relation get zeros."""
    have = {t for t in data.node_types if "x" in data[t]}
    if not have:
        return
    width = {data[t].x.shape[1] for t in have}
    if len(width) != 1:
        raise ValueError(f"the node types with features have widths {sorted(width)}; the "
                         f"neighbour means need one width: load with features='none'")
    (num_features,) = width
    while True:
        means = {t: _mean(data, t, have, num_features) for t in data.node_types
                 if t not in have}
        means = {t: x for t, x in means.items() if x is not None}
        if not means:
            break
        for t, x in means.items():
            data[t].x = x
        have |= set(means)
    for t in data.node_types:
        if t not in have:
            data[t].x = torch.zeros(data[t].num_nodes, num_features)


def _mean(data: HeteroData, node_type: str, have: set[str], num_features: int) -> Tensor | None:
    """The mean over ``node_type``'s neighbours in types of ``have``, or
    :obj:`None` where no relation links it to one; rows summed
    :data:`MEAN_CHUNK` edges at a time."""
    links = []
    for (src, _, dst), store in zip(data.edge_types, data.edge_stores):
        if dst == node_type and src in have:
            links.append((store.edge_index[1], store.edge_index[0], data[src].x))
        if src == node_type and dst in have:
            links.append((store.edge_index[0], store.edge_index[1], data[dst].x))
    if not links:
        return None
    num_nodes = data[node_type].num_nodes
    total = torch.zeros(num_nodes, num_features)
    count = torch.zeros(num_nodes)
    for own, other, x in links:
        for start in range(0, own.numel(), MEAN_CHUNK):
            rows = own[start : start + MEAN_CHUNK]
            total.index_add_(0, rows, x[other[start : start + MEAN_CHUNK]])
        count += torch.bincount(own, minlength=num_nodes)
    return total / count.clamp(min=1).unsqueeze(1)
