r"""A graph as a folder of ``.npy`` files that every rank memory-maps and reads
a slice of, so that no step needs the whole graph in one process.

A homogeneous graph (a PyG ``Data``)::

    graph/
      graph.json        {"format": "pyg_dist.graph", "version": 1,
                         "kind": "homogeneous", "name": ...,
                         "num_nodes": N, "num_edges": E, "num_classes": C or null,
                         "edges": "edges.npy",
                         "node": {"x": "x.npy", "y": "y.npy", ...},
                         "splits": {"train_mask": "split/train.npy", ...},
                         "link": {"train": {"num_edges": L,
                                            "edge_label_index":
                                            "link/train/edge_label_index.npy",
                                            "edge_label": "link/train/edge_label.npy"},
                                  "val": {...}, "test": {...}}}
      edges.npy         [2, E] int32 or int64: row 0 sources, row 1 targets
      x.npy, y.npy, ... [N, ...] one file per node-level attribute
      split/train.npy   int64 ids of the nodes in each split (read as masks)
      link/train/edge_label_index.npy   [2, L] int32 or int64: the split's
                        supervision edges, sources then targets
      link/train/edge_label.npy         [L] float32: 1 positive, 0 negative

``"link"`` (and ``link/``) only for a link split (:mod:`pyg_dist.tasks.supervision`):
then ``edges.npy`` is the graph messages pass along (RandomLinkSplit's
``train_data.edge_index``: the held-out edges are not in it), and each
split's edges are those :func:`pyg_dist.partition` stores, OGB's negatives
(``edge_neg``) after its positives with label 0.

A heterogeneous graph (a PyG ``HeteroData``), read by
:class:`~pyg_dist.datasets.ondisk_hetero.HeteroGraphFolder`::

    graph/
      graph.json        {"format": "pyg_dist.graph", "version": 1, "kind": "hetero",
                         "name": ...,
                         "node_types": [{"name": "paper", "num_nodes": N_paper,
                                         "num_classes": C or null,
                                         "node": {"x": "paper/x.npy", ...},
                                         "splits": {"train_mask":
                                                    "paper/split/train.npy", ...}},
                                        ...],
                         "edge_types": [{"type": ["author", "writes", "paper"],
                                         "num_edges": E_r,
                                         "edges": "edges/author__writes__paper.npy"},
                                        ...]}
      paper/x.npy, ...  [N_t, ...] one file per node-level attribute of a type
      paper/split/train.npy   int64 ids within the type of each split
      edges/author__writes__paper.npy   [2, E_r] int32 or int64: sources (ids
                        within the source type), then targets (within the target type)

The types keep the input's order (``node_types`` gives the offsets of the
homogeneous view that :func:`~pyg_dist.partitioning.partition_distributed`
cuts). Edge-level attributes are not stored.

``graph.json`` is written last, into a temporary sibling folder that is then
renamed: a folder with a ``graph.json`` is complete. Write one with
:func:`write_graph_folder` (from a PyG ``Data`` or ``HeteroData``) or
``pyg-dist convert`` (from any dataset :func:`~pyg_dist.datasets.load_dataset`
knows, OGB's downloaded folders streamed in chunks); :func:`open_graph_folder`
opens either kind; ``pyg-dist partition --distributed --input DIR`` cuts it
on the ranks themselves.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pyg_dist.datasets.folder_files import (
    FORMAT,
    GRAPH_FILE,
    HOMOGENEOUS,
    VERSION,
    EdgeArray,
    FolderWriter,
    LinkArrays,
    NodeArrays,
    entry,
    read_info,
    require,
    spans,
)
from pyg_dist.datasets.graph import (
    attributes,
    check_finite,
    check_graph,
    is_hetero,
    num_classes,
)
from pyg_dist.datasets.ondisk_hetero import (
    HeteroGraphFolder,
    is_hetero_info,
    write_hetero_graph_folder,
)
from pyg_dist.tasks.supervision import SupervisionEdges, is_link_split, link_split

__all__ = ["GraphFolder", "GraphFolderWriter", "HeteroGraphFolder", "write_graph_folder",
           "open_graph_folder"]


def open_graph_folder(path: str | os.PathLike) -> GraphFolder | HeteroGraphFolder:
    """Opens the graph folder ``path`` of either kind: a
    :class:`HeteroGraphFolder` for a heterogeneous graph, else a
    :class:`GraphFolder`.

    Args:
        path (str or os.PathLike): A folder written by
            :func:`write_graph_folder` or ``pyg-dist convert``.
    """
    info = read_info(path)
    return HeteroGraphFolder.open(path) if is_hetero_info(info) else GraphFolder.open(path)


class GraphFolder:
    r"""A graph folder opened for reading: its arrays are memory-mapped, and
    a rank reads only the slices it asks for.

    Opening checks the description, that every file is present and that the
    shapes agree; :meth:`check_edges` and :meth:`check_nodes` check the
    values of a slice (node ids in range, finite features), so that each rank
    checks only what it reads.

    Args:
        path (pathlib.Path): The folder.
        info (dict): Its parsed ``graph.json``; :meth:`open` reads and checks it.

    Attributes:
        path (pathlib.Path): The folder.
        name (str): The graph's name.
        num_nodes (int): Nodes :math:`N`.
        num_edges (int): Directed edges :math:`E` (as stored: duplicates and
            self-loops included).
        num_classes (int, optional): Classes of ``y``, when it holds them.
        node_attrs (list[str]): Node-level attributes: the arrays, then the
            split masks (``train_mask``, ``val_mask``, ``test_mask``, ...).
        link_splits (list[str]): The splits of the folder's link split
            (``"train"``, ``"val"``, ``"test"``); empty for none.
        link_sizes (dict[str, int]): Supervision edges of each of them.
    """

    def __init__(self, path: Path, info: dict[str, Any]) -> None:
        self.path = path
        self.name = str(info.get("name", path.name))
        where = f"'{path / GRAPH_FILE}'"
        self.num_nodes = int(entry(info, "num_nodes", where))
        self.num_edges = int(entry(info, "num_edges", where))
        self.num_classes = entry(info, "num_classes", where)
        self._edges = EdgeArray(path, entry(info, "edges", where), self.num_edges,
                                self.num_nodes, self.num_nodes)
        self._nodes = NodeArrays(path, self.num_nodes, entry(info, "node", where, {}),
                                 entry(info, "splits", where, {}))
        self.node_attrs = self._nodes.names
        self._link = LinkArrays(path, entry(info, "link", where, {}), self.num_nodes)
        self.link_splits, self.link_sizes = self._link.names, self._link.sizes

    @classmethod
    def open(cls, path: str | os.PathLike) -> GraphFolder:
        """Opens the graph folder ``path``.

        Args:
            path (str or os.PathLike): A folder written by
                :func:`write_graph_folder` or ``pyg-dist convert``.
        """
        path = Path(path)
        info = read_info(path)
        if is_hetero_info(info):
            raise ValueError(
                f"'{path}' holds a heterogeneous graph; open it with "
                f"pyg_dist.datasets.HeteroGraphFolder.open('{path}') (or "
                f"open_graph_folder, which opens either kind)"
            )
        require(info, ("num_nodes", "num_edges", "edges"), str(path / GRAPH_FILE))
        return cls(path, info)

    def __repr__(self) -> str:
        link = f", link_sizes={self.link_sizes}" if self.link_splits else ""
        return (f"GraphFolder('{self.path}', num_nodes={self.num_nodes}, "
                f"num_edges={self.num_edges}, node_attrs={self.node_attrs}{link})")

    def edges(self, lo: int = 0, hi: int | None = None, dtype: Any = np.int64) -> np.ndarray:
        """Edge columns ``lo:hi`` as a ``[2, hi - lo]`` array of ``dtype``
        (a copy, read from the file: the pages read do not stay resident in
        this process)."""
        return self._edges.read(lo, hi, dtype)

    def node(self, name: str, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Rows ``lo:hi`` of node attribute ``name`` (a copy); a split comes
        out as a bool mask."""
        return self._nodes.read(name, lo, hi)

    def check_edges(self, lo: int = 0, hi: int | None = None) -> None:
        """Raises :class:`ValueError` if edge columns ``lo:hi`` name a node
        outside :math:`[0, N)`."""
        self._edges.check(lo, hi, f"fix the edge list, or num_nodes in {GRAPH_FILE} if the "
                                  f"graph has more nodes")

    def check_nodes(self, lo: int = 0, hi: int | None = None) -> None:
        """Raises :class:`ValueError` if rows ``lo:hi`` of a floating node
        attribute hold NaN or infinite values, or a split names a node
        outside :math:`[0, N)` (checked whole: splits are small)."""
        self._nodes.check(lo, hi)

    def supervision(self, split: str, lo: int = 0, hi: int | None = None,
                    dtype: Any = np.int64) -> tuple[np.ndarray, np.ndarray]:
        """Supervision edges ``lo:hi`` of link split ``split``: ``[2, hi -
        lo]`` node ids of ``dtype`` (sources, then targets) and ``[hi - lo]``
        float32 labels (copies)."""
        if split not in self._link.sizes:
            raise KeyError(f"'{self.path}' has no '{split}' supervision edges (its link "
                           f"splits: {', '.join(self.link_splits) or 'none'})")
        return self._link.read(split, lo, hi, dtype)

    def check_supervision(self, split: str, lo: int = 0, hi: int | None = None) -> None:
        """Raises :class:`ValueError` if supervision edges ``lo:hi`` of
        ``split`` name a node outside :math:`[0, N)` or have a NaN label."""
        self._link.check(split, lo, hi)

    def to_data(self) -> Any:
        """The whole graph as a :class:`torch_geometric.data.Data` (for graphs
        that fit one process): with a link split, the graph messages pass
        along (its splits: :meth:`supervision`)."""
        from torch_geometric.data import Data

        data = Data(edge_index=torch.from_numpy(self.edges()), num_nodes=self.num_nodes)
        for key in self.node_attrs:
            data[key] = torch.from_numpy(self.node(key))
        return data


class GraphFolderWriter(FolderWriter):
    """Writes a homogeneous graph folder atomically: arrays go into a
    temporary sibling folder (filled in chunks through the memory maps that
    ``edges``, ``node_array`` and ``array`` return), ``split`` writes a
    split's node ids, and ``commit`` writes ``graph.json`` there and renames
    the folder into place. Used as a context manager, an exception removes
    what was written (``abort``). The heterogeneous writer shares its base,
    ``pyg_dist.datasets.folder_files.FolderWriter``.

    Args:
        out_dir (str or os.PathLike): The folder to create.
        overwrite (bool, optional): Replace an existing ``out_dir``.
            (default: :obj:`False`)
    """

    def edges(self, num_edges: int, dtype: Any = np.int64) -> np.memmap:
        """The ``[2, num_edges]`` edge array to fill."""
        return self.array("edges.npy", (2, num_edges), dtype)

    def node_array(self, name: str, shape: tuple[int, ...], dtype: Any) -> np.memmap:
        """Node attribute ``name``'s array to fill (``shape[0]`` = nodes)."""
        self.node[name] = f"{name}.npy"
        return self.array(self.node[name], shape, dtype)

    def commit(self, num_nodes: int, num_edges: int, name: str,
               num_classes: int | None = None) -> GraphFolder:
        """Writes ``graph.json`` and renames the folder into place."""
        info = {"format": FORMAT, "version": VERSION, "kind": HOMOGENEOUS, "name": name,
                "num_nodes": int(num_nodes), "num_edges": int(num_edges),
                "num_classes": num_classes, "edges": "edges.npy", "node": self.node,
                "splits": self.splits}
        if self.link:
            info["link"] = self.link
        return self.finish(info, GraphFolder)


def write_graph_folder(data: Any, out_dir: str | os.PathLike, overwrite: bool = False,
                       name: str | None = None) -> GraphFolder | HeteroGraphFolder:
    """Writes the PyG ``Data`` ``data`` as a graph folder: ``edge_index``,
    every node-level tensor (``x``, ``y``, ...) and every boolean
    ``<name>_mask`` as a split of node ids; a ``HeteroData`` the same per
    node type and edge type (the heterogeneous layout).

    A link split (RandomLinkSplit's ``(train_data, val_data, test_data)``
    or OGB's ``(data, split_edge)``) is written as the graph messages pass
    along and, per split, the supervision edges and labels that
    :func:`pyg_dist.partition` stores (``link/``); the split's edges must
    join nodes of the graph.

    Args:
        data (torch_geometric.data.Data or torch_geometric.data.HeteroData or tuple):
            The graph (``edge_index`` int32 or int64; node attributes with one
            row per node), or a link split of a ``Data``.
        out_dir (str or os.PathLike): Folder to create (atomically).
        overwrite (bool, optional): Replace an existing ``out_dir``.
            (default: :obj:`False`)
        name (str, optional): The graph's name. (default: the folder's name)
    """
    splits: dict[str, SupervisionEdges] = {}
    if is_link_split(data):
        if any(is_hetero(d) for d in data):
            raise ValueError("'write_graph_folder' writes the link split of a homogeneous graph "
                             "(a Data); write a HeteroData without one")
        data, splits = link_split(data, "'write_graph_folder'")
    if is_hetero(data):
        return write_hetero_graph_folder(data, out_dir, overwrite, name)
    edge_index, num_nodes = check_graph(data, "write_graph_folder")
    node_attrs, _ = attributes(data, num_nodes, edge_index.size(1))
    check_finite(node_attrs, {}, "write_graph_folder")
    with GraphFolderWriter(out_dir, overwrite) as writer:
        edges = writer.edges(edge_index.size(1), edge_index.numpy().dtype)
        for lo, hi in spans(edge_index.size(1)):
            edges[:, lo:hi] = edge_index[:, lo:hi].numpy()
        edges.flush()
        for key, value in node_attrs.items():
            if key.endswith("_mask") and value.dim() == 1 and value.dtype == torch.bool:
                writer.split(key, value.nonzero().view(-1).numpy())
                continue
            array = writer.node_array(key, tuple(value.shape), value.numpy().dtype)
            for lo, hi in spans(value.size(0)):
                array[lo:hi] = value[lo:hi].numpy()
            array.flush()
        for split, supervision in splits.items():
            writer.supervision(split, supervision.index.numpy(), supervision.label.numpy())
        return writer.commit(num_nodes, edge_index.size(1),
                             name or Path(out_dir).name, num_classes(node_attrs.get("y")))
