"""The heterogeneous graph folder (layout in :mod:`pyg_dist.datasets.ondisk`):
one :class:`~pyg_dist.datasets.folder_files.NodeArrays` per node type, one
``[2, E_r]`` edge file per relation, memory-mapped and read a slice at a
time, and its writer from a PyG ``HeteroData``."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pyg_dist.datasets.folder_files import (
    FORMAT,
    GRAPH_FILE,
    HETEROGENEOUS,
    VERSION,
    EdgeArray,
    FolderWriter,
    NodeArrays,
    entry,
    read_info,
    require,
    spans,
)
from pyg_dist.datasets.graph import (
    check_finite,
    check_relation,
    edge_key,
    num_classes,
    type_sizes,
)

__all__ = ["HeteroGraphFolder", "write_hetero_graph_folder", "is_hetero_info"]

EdgeType = tuple[str, str, str]
_CALLER = "write_graph_folder"


def is_hetero_info(info: dict[str, Any]) -> bool:
    """Whether the parsed ``graph.json`` ``info`` describes a heterogeneous graph."""
    return info.get("kind") == HETEROGENEOUS


class HeteroGraphFolder:
    r"""A heterogeneous graph folder opened for reading: every node type's
    arrays and every relation's edges are memory-mapped, and a rank reads
    only the slices it asks for.

    Opening checks the description, that every file is present and that the
    shapes agree; :meth:`check_edges` and :meth:`check_nodes` check the
    values of a slice (ids in range of their types, finite features).

    Args:
        path (pathlib.Path): The folder.
        info (dict): Its parsed ``graph.json``; :meth:`open` reads and checks it.

    Attributes:
        path (pathlib.Path): The folder.
        name (str): The graph's name.
        node_types (list[str]): Node types, in the input's order.
        edge_types (list[tuple[str, str, str]]): Relations, in the input's order.
        sizes (dict[str, int]): Nodes of each type.
        num_edges_of (dict[tuple[str, str, str], int]): Edges of each relation.
        num_classes (dict[str, int]): Classes of each type's ``y``, where it
            holds them.
        num_nodes (int): Nodes of all types.
        num_edges (int): Edges of all relations.
    """

    def __init__(self, path: Path, info: dict[str, Any]) -> None:
        self.path = path
        self.name = str(info.get("name", path.name))
        where = str(path / GRAPH_FILE)
        self._nodes: dict[str, NodeArrays] = {}
        self.num_classes: dict[str, int] = {}
        for node_type in entry(info, "node_types", f"'{where}'"):
            require(node_type, ("name", "num_nodes"), f"{where}: node_types")
            t = entry(node_type, "name", f"'{where}', node_types")
            inside = f"'{where}', node type '{t}'"
            self._nodes[t] = NodeArrays(path, entry(node_type, "num_nodes", inside),
                                        entry(node_type, "node", inside, {}),
                                        entry(node_type, "splits", inside, {}),
                                        f"node type '{t}'")
            if entry(node_type, "num_classes", inside) is not None:
                self.num_classes[t] = int(node_type["num_classes"])
        self.node_types = list(self._nodes)
        self.sizes = {t: nodes.num_nodes for t, nodes in self._nodes.items()}
        self._edges: dict[EdgeType, EdgeArray] = {}
        for edge_type in entry(info, "edge_types", f"'{where}'"):
            require(edge_type, ("type", "num_edges", "edges"), f"{where}: edge_types")
            names = entry(edge_type, "type", f"'{where}', edge_types")
            unknown = [t for t in names[::2] if t not in self._nodes]
            if unknown:
                raise ValueError(f"'{where}' lists relation {names} whose node types "
                                 f"{unknown} are not among node_types {self.node_types} (a "
                                 f"relation is [source, name, target]); convert the graph "
                                 f"again")
            e = (names[0], names[1], names[2])
            inside = f"'{where}', relation {edge_key(e)}"
            self._edges[e] = EdgeArray(path, entry(edge_type, "edges", inside),
                                       entry(edge_type, "num_edges", inside),
                                       self.sizes[e[0]], self.sizes[e[2]])
        self.edge_types = list(self._edges)
        self.num_edges_of = {e: edges.num_edges for e, edges in self._edges.items()}
        self.num_nodes = sum(self.sizes.values())
        self.num_edges = sum(self.num_edges_of.values())

    @classmethod
    def open(cls, path: str | os.PathLike) -> HeteroGraphFolder:
        """Opens the heterogeneous graph folder ``path``.

        Args:
            path (str or os.PathLike): A folder written by
                :func:`~pyg_dist.datasets.write_graph_folder` from a
                ``HeteroData`` or ``pyg-dist convert``.
        """
        path = Path(path)
        info = read_info(path)
        if not is_hetero_info(info):
            raise ValueError(f"'{path}' holds a homogeneous graph; open it with "
                             f"pyg_dist.datasets.GraphFolder.open('{path}')")
        require(info, ("node_types", "edge_types"), str(path / GRAPH_FILE))
        return cls(path, info)

    def __repr__(self) -> str:
        return (f"HeteroGraphFolder('{self.path}', sizes={self.sizes}, "
                f"num_edges={ {edge_key(e): n for e, n in self.num_edges_of.items()} })")

    def node_attrs(self, t: str) -> list[str]:
        """Node type ``t``'s attributes: the arrays, then the split masks."""
        return self._nodes[t].names

    def edges(self, e: EdgeType, lo: int = 0, hi: int | None = None,
              dtype: Any = np.int64) -> np.ndarray:
        """Relation ``e``'s columns ``lo:hi`` as a ``[2, hi - lo]`` array of
        ``dtype`` (ids within the source and target types; a copy)."""
        return self._edges[e].read(lo, hi, dtype)

    def node(self, t: str, name: str, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Rows ``lo:hi`` of node type ``t``'s attribute ``name`` (a copy); a
        split comes out as a bool mask."""
        return self._nodes[t].read(name, lo, hi)

    def check_edges(self, e: EdgeType, lo: int = 0, hi: int | None = None) -> None:
        """Raises :class:`ValueError` if relation ``e``'s columns ``lo:hi``
        name a source or a target outside its type's range."""
        self._edges[e].check(lo, hi, f"fix the edge list, or the num_nodes of node types "
                                     f"'{e[0]}' and '{e[2]}' in {GRAPH_FILE} if they have "
                                     f"more nodes")

    def check_nodes(self, t: str, lo: int = 0, hi: int | None = None) -> None:
        """Raises :class:`ValueError` if rows ``lo:hi`` of a floating
        attribute of type ``t`` hold NaN or infinite values, or a split names
        a node outside the type."""
        self._nodes[t].check(lo, hi)

    def to_data(self) -> Any:
        """The whole graph as a :class:`torch_geometric.data.HeteroData` (for
        graphs that fit one process)."""
        from torch_geometric.data import HeteroData

        data = HeteroData()
        for t in self.node_types:
            data[t].num_nodes = self.sizes[t]
            for key in self.node_attrs(t):
                data[t][key] = torch.from_numpy(self.node(t, key))
        for e in self.edge_types:
            data[e].edge_index = torch.from_numpy(self.edges(e))
        return data


def write_hetero_graph_folder(data: Any, out_dir: str | os.PathLike, overwrite: bool = False,
                              name: str | None = None) -> HeteroGraphFolder:
    """Writes the PyG ``HeteroData`` ``data`` as a heterogeneous graph folder:
    per node type every node-level tensor and every boolean ``<name>_mask``
    as a split, per relation its ``edge_index`` (edge-level attributes are
    not stored).

    Args:
        data (torch_geometric.data.HeteroData): The graph; every relation
            needs ``edge_index``, every node type a node count.
        out_dir (str or os.PathLike): Folder to create (atomically).
        overwrite (bool, optional): Replace an existing ``out_dir``.
            (default: :obj:`False`)
        name (str, optional): The graph's name. (default: the folder's name)
    """
    sizes = type_sizes(data, _CALLER)
    edges = {e: check_relation(data, e, sizes, _CALLER) for e in data.edge_types}
    stores = {t: _node_attrs(data[t], sizes[t]) for t in data.node_types}
    check_finite({f"{t}.{k}": v for t, attrs in stores.items() for k, v in attrs.items()}, {},
                 _CALLER)
    with FolderWriter(out_dir, overwrite) as writer:
        node_types = [_write_type(writer, t, sizes[t], attrs) for t, attrs in stores.items()]
        edge_types = []
        for e, edge_index in edges.items():
            file = f"edges/{edge_key(e)}.npy"
            array = writer.array(file, tuple(edge_index.shape), edge_index.numpy().dtype)
            for lo, hi in spans(edge_index.size(1)):
                array[:, lo:hi] = edge_index[:, lo:hi].numpy()
            array.flush()
            edge_types.append({"type": list(e), "num_edges": int(edge_index.size(1)),
                               "edges": file})
        info = {"format": FORMAT, "version": VERSION, "kind": HETEROGENEOUS,
                "name": name or Path(out_dir).name, "node_types": node_types,
                "edge_types": edge_types}
        return writer.finish(info, HeteroGraphFolder)


def _write_type(writer: FolderWriter, t: str, size: int,
                attrs: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Writes node type ``t``'s arrays and splits under ``t/``; its entry of
    ``node_types``."""
    node, splits = {}, {}
    for key, value in attrs.items():
        if key.endswith("_mask") and value.dim() == 1 and value.dtype == torch.bool:
            splits[key] = writer.split(key, value.nonzero().view(-1).numpy(), f"{t}/")
            continue
        node[key] = f"{t}/{key}.npy"
        array = writer.array(node[key], tuple(value.shape), value.numpy().dtype)
        for lo, hi in spans(value.size(0)):
            array[lo:hi] = value[lo:hi].numpy()
        array.flush()
    return {"name": t, "num_nodes": size, "num_classes": num_classes(attrs.get("y")),
            "node": node, "splits": splits}


def _node_attrs(store: Any, size: int) -> dict[str, torch.Tensor]:
    """The node-level tensors of one node type's store."""
    return {key: value.detach().cpu() for key, value in store.items()
            if key != "num_nodes" and isinstance(value, torch.Tensor) and value.dim() > 0
            and value.size(0) == size}
