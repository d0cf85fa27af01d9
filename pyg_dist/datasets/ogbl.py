"""OGB's link-property datasets from the folder OGB downloaded them into, as
the ``(data, split_edge)`` pair :func:`pyg_dist.partition` cuts: nothing is
downloaded.

OGB's on-disk layout (``ogb.linkproppred.LinkPropPredDataset``)::

    <root>/ogbl_collab/raw/num-node-list.csv.gz  nodes
                          /num-edge-list.csv.gz  stored edges
                          /edge.csv.gz           one edge a line (u,v)
                          /node-feat.csv.gz      features (collab, citation2)
    <root>/ogbl_collab/split/time/train.pt       the official split: a dict
                                /valid.pt        of tensors per split
                                /test.pt

ogbl-collab and ogbl-ddi add the reverse of every stored edge (OGB's
``add_inverse_edge``); their splits hold ``edge`` (``[E, 2]``) and, for
validation and test, ``edge_neg``. ogbl-citation2's hold ``source_node``,
``target_node`` and ``target_node_neg`` (``[n, 1000]``), which come back as
``edge`` and ``edge_neg`` pairs (each source with each of its negatives).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from pyg_dist.datasets.ogb_csv import check_ids, csv_chunks, csv_total

__all__ = ["OGBL", "ogbl"]


@dataclass(frozen=True)
class OgblSpec:
    """What OGB's ``master.csv`` says of a link-property dataset.

    Attributes:
        folder: The dataset's folder under ``root``.
        split: The official split's folder under ``split/``.
        add_inverse_edge: Whether the reverse of every stored edge is added.
        features: Whether ``raw/node-feat.csv.gz`` holds node features.
        metric: OGB's evaluation metric, as
            :class:`~pyg_dist.strategies.link_task.LinkTask` spells it
            (``"hits@50"``; ``"mrr"``: each positive ranked among its own
            negatives of the split).
    """

    folder: str
    split: str
    add_inverse_edge: bool
    features: bool
    metric: str


OGBL = {
    "ogbl-collab": OgblSpec("ogbl_collab", "time", True, True, "hits@50"),
    "ogbl-citation2": OgblSpec("ogbl_citation2", "time", False, True, "mrr"),
    "ogbl-ddi": OgblSpec("ogbl_ddi", "target", True, False, "hits@20"),
}
_SPLITS = ("train", "valid", "test")


def ogbl(name: str, root: str | os.PathLike) -> tuple[Data, dict[str, dict[str, Any]]]:
    """The OGB link dataset ``name`` from ``root``: the graph (``edge_index``,
    ``x`` where OGB has features) and its official ``split_edge``.

    Args:
        name (str): :obj:`"ogbl-collab"`, :obj:`"ogbl-citation2"` or :obj:`"ogbl-ddi"`.
        root (str or os.PathLike): The folder OGB downloaded into (holding
            ``ogbl_collab/raw``, ...).
    """
    if name not in OGBL:
        raise ValueError(f"unknown OGB link dataset '{name}'; use one of {', '.join(OGBL)}")
    spec = OGBL[name]
    folder = Path(root) / spec.folder
    raw = folder / "raw"
    if not (raw / "edge.csv.gz").is_file():
        raise FileNotFoundError(
            f"dataset '{name}' is not in '{root}' (no {spec.folder}/raw/edge.csv.gz); pyg_dist "
            f"does not download: on a machine with internet run `pip install ogb && python -c "
            f"\"from ogb.linkproppred import LinkPropPredDataset; "
            f"LinkPropPredDataset('{name}', root='{root}')\"` and copy the folder here")
    num_nodes = csv_total(raw / "num-node-list.csv.gz")
    path = raw / "edge.csv.gz"
    blocks = list(csv_chunks(path, np.int64, columns=2))
    edges = np.concatenate(blocks) if blocks else np.zeros((0, 2), dtype=np.int64)
    check_ids(edges, num_nodes, path)
    edge_index = torch.from_numpy(edges.T.copy())
    if spec.add_inverse_edge:  # OGB's order: each edge, then its reverse
        edge_index = torch.stack([edge_index, edge_index.flip(0)], 2).view(2, -1)
    data = Data(edge_index=edge_index, num_nodes=num_nodes)
    if spec.features:
        feats = [torch.from_numpy(b) for b in csv_chunks(raw / "node-feat.csv.gz", np.float32)]
        data.x = torch.cat(feats)
    return data, {s: _split(folder / "split" / spec.split / f"{s}.pt", num_nodes)
                  for s in _SPLITS}


def _split(path: Path, num_nodes: int) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"'{path}' is missing: the official split is incomplete; "
                                f"copy OGB's 'split' folder again")
    raw = {k: torch.as_tensor(v) for k, v in torch.load(path, weights_only=True).items()}
    if "source_node" in raw:  # citation2: a source, its target and its negatives
        source, target = raw.pop("source_node"), raw.pop("target_node")
        raw["edge"] = torch.stack([source, target], 1)
        if "target_node_neg" in raw:
            neg = raw.pop("target_node_neg")
            raw["edge_neg"] = torch.stack(
                [source.repeat_interleave(neg.size(1)), neg.reshape(-1)], 1)
    for key in ("edge", "edge_neg"):
        if key in raw:
            check_ids(raw[key].numpy(), num_nodes, path)
    return raw
