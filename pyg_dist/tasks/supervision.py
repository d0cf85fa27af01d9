r"""Supervision edges: the edges a link-prediction task scores, apart from
the edges messages pass along.

:func:`~pyg_dist.tasks.link_split` reads a link split in either of PyG's or OGB's spellings:

- the ``(train_data, val_data, test_data)`` triple that
  :class:`torch_geometric.transforms.RandomLinkSplit` returns: messages pass
  along ``train_data.edge_index`` (the training edges alone, both directions
  of an undirected graph, exactly as ``RandomLinkSplit`` leaves them), and
  each split's ``edge_label_index`` / ``edge_label`` are its supervision
  edges (negatives that ``RandomLinkSplit`` added included, label 0);
- a ``(data, split_edge)`` pair as OGB's ``LinkPropPredDataset`` gives it:
  messages pass along ``data.edge_index``; ``split_edge[s]["edge"]``
  (``[E, 2]``) are positives and ``split_edge[s]["edge_neg"]`` negatives
  (``"valid"`` is read as ``"val"``).

:func:`pyg_dist.partition` stores each supervision edge on one rank: the
owner of its source node :math:`u`. The score of :math:`(u, v)` then needs
one remote row at most (:math:`h_v`), per-source negatives
:math:`(u, v')` keep :math:`u` local, and a source's ranking (MRR) is
computed where its row lives.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch_geometric.transforms import RandomLinkSplit

__all__ = ["SupervisionEdges", "link_split", "SPLITS", "is_link_split", "split_links"]

#: The splits of a link task, in order.
SPLITS = ("train", "val", "test")
#: Attributes of RandomLinkSplit's graphs that are supervision, not graph.
_LABEL_KEYS = ("edge_label_index", "edge_label")


@dataclass
class SupervisionEdges:
    """A split's supervision edges (of one rank, or of the whole graph).

    Attributes:
        index (torch.Tensor): ``[2, L]`` int64 global ids of source and target.
        label (torch.Tensor): ``[L]`` float, 1 for a positive edge, 0 for a
            negative one.
        id (torch.Tensor): ``[L]`` int64 position of each edge in the split's
            whole list (what keys its negatives, on any number of ranks).
    """

    index: Tensor
    label: Tensor
    id: Tensor

    @property
    def num_edges(self) -> int:
        return int(self.index.size(1))

    def select(self, keep: Tensor) -> SupervisionEdges:
        """The edges in ``keep`` (``[L]`` bool)."""
        return SupervisionEdges(self.index[:, keep], self.label[keep], self.id[keep])

    def to(self, device: torch.device | str) -> SupervisionEdges:
        return SupervisionEdges(self.index.to(device), self.label.to(device), self.id.to(device))

    def state(self) -> dict[str, Tensor]:
        """The tensors as a part file stores them."""
        return {"index": self.index.contiguous(), "label": self.label.contiguous(),
                "id": self.id.contiguous()}


def is_link_split(data: Any) -> bool:
    """Whether ``data`` is a link split :func:`~pyg_dist.tasks.link_split` reads (a tuple
    or list).

    Args:
        data (Any): A graph, or PyG's or OGB's link split.
    """
    return isinstance(data, (tuple, list))


def link_split(data: Any, what: str = "'partition'") -> tuple[Any, dict[str, SupervisionEdges]]:
    """The graph messages pass along and each split's supervision edges.

    Args:
        data (tuple): ``(train_data, val_data, test_data)`` from
            ``RandomLinkSplit``, or ``(data, split_edge)`` as OGB gives them.
        what (str, optional): The call that errors name.
            (default: :obj:`"'partition'"`)

    Returns:
        The message-passing graph (a ``Data`` without ``edge_label*``) and the
        :class:`SupervisionEdges` of each split it has, by name.
    """
    if len(data) == 3:
        graph = _without_labels(data[0])
        splits = {name: _from_data(name, d, what) for name, d in zip(SPLITS, data)}
    elif len(data) == 2 and isinstance(data[1], dict):
        graph, splits = _without_labels(data[0]), _from_ogb(data[1], what)
    else:
        raise ValueError(f"{what} got a sequence of {len(data)} items; pass a graph, the "
                         f"(train_data, val_data, test_data) of RandomLinkSplit, or OGB's "
                         f"(data, split_edge)")
    num_nodes = int(graph.num_nodes)
    for name, edges in splits.items():
        if edges.num_edges and (int(edges.index.min()) < 0
                                or int(edges.index.max()) >= num_nodes):
            raise ValueError(f"{what} found {name} supervision edges outside the "
                             f"{num_nodes} nodes of the graph; pass edges between its nodes")
    return graph, splits


def _without_labels(data: Any) -> Any:
    graph = data.clone() if hasattr(data, "clone") else data
    for key in _LABEL_KEYS:
        if key in graph:
            del graph[key]
    return graph


def _from_data(name: str, data: Any, what: str) -> SupervisionEdges:
    if "edge_label_index" not in data:
        raise ValueError(f"{what} got a {name} graph without edge_label_index; pass the "
                         f"three graphs RandomLinkSplit returns (train, val, test)")
    index = data.edge_label_index.to(torch.int64)
    label = (data.edge_label.float() if "edge_label" in data
             else torch.ones(index.size(1)))
    return SupervisionEdges(index, label, torch.arange(index.size(1)))


def _from_ogb(split_edge: dict[str, Any], what: str) -> dict[str, SupervisionEdges]:
    out = {}
    for key, name in (("train", "train"), ("valid", "val"), ("test", "test")):
        if key not in split_edge:
            continue
        parts = split_edge[key]
        if "edge" not in parts:
            raise ValueError(f"{what} reads OGB splits of 'edge' (and 'edge_neg') pairs; "
                             f"split '{key}' has {', '.join(parts)}")
        pos = torch.as_tensor(parts["edge"]).to(torch.int64).t()
        neg = torch.as_tensor(parts.get("edge_neg", torch.empty(0, 2))).to(torch.int64).t()
        index = torch.cat([pos, neg.view(2, -1)], 1)
        label = torch.cat([torch.ones(pos.size(1)), torch.zeros(neg.numel() // 2)])
        out[name] = SupervisionEdges(index, label, torch.arange(index.size(1)))
    return out


def split_links(data: Any, seed: int = 0, num_val: float = 0.05,
                num_test: float = 0.1) -> tuple[Any, Any, Any]:
    """PyG's ``RandomLinkSplit`` of ``data`` under ``seed`` (torch's and
    Python's global random states are left as they were; PyG draws the
    validation and test negatives with Python's ``random``): undirected
    when ``data`` is, no training negatives (the task draws them each
    epoch). The same ``seed`` gives the same split in any process.

    Args:
        data (torch_geometric.data.Data): The graph.
        seed (int, optional): The split's seed. (default: :obj:`0`)
        num_val (float, optional): Share of the edges held out for validation.
            (default: :obj:`0.05`)
        num_test (float, optional): Share held out for testing. (default: :obj:`0.1`)
    """
    state = random.getstate()
    try:
        random.seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            split = RandomLinkSplit(num_val=num_val, num_test=num_test,
                                    is_undirected=bool(data.is_undirected()),
                                    add_negative_train_samples=False)
            return split(data)
    finally:
        random.setstate(state)
