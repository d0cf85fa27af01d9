"""A minimal graph-folder reader and writer with the API of
``pyg_dist.datasets.ondisk``, for the distributed partitioner's tests until
that module is available; :func:`install` makes it importable under that name."""
import json
import sys
from pathlib import Path

import numpy as np
import torch

MASKS = {"train_mask": "split/train.npy", "val_mask": "split/valid.npy",
         "test_mask": "split/test.npy"}


def install():
    """Registers this module as ``pyg_dist.datasets.ondisk`` unless the real one exists."""
    try:
        import pyg_dist.datasets.ondisk  # noqa: F401
    except ImportError:
        sys.modules["pyg_dist.datasets.ondisk"] = sys.modules[__name__]


class GraphFolder:
    def __init__(self, root, spec):
        self.root, self.spec = Path(root), spec
        self.num_nodes, self.num_edges = spec["num_nodes"], spec["num_edges"]
        self.num_classes, self.name = spec.get("num_classes"), spec.get("name")
        self._edges = np.load(self.root / spec["edges"], mmap_mode="r")
        self._node = {k: np.load(self.root / v, mmap_mode="r") for k, v in spec["node"].items()}
        self._splits = {k: np.load(self.root / v) for k, v in spec.get("splits", {}).items()}
        self.node_attrs = sorted([*self._node, *self._splits])

    @staticmethod
    def open(path):
        root = Path(path)
        meta = root / "graph.json"
        if not meta.is_file():
            raise FileNotFoundError(f"'{root}' is not a graph folder (no graph.json); write one "
                                    f"with write_graph_folder(data, '{root}')")
        spec = json.loads(meta.read_text())
        for rel in [spec["edges"], *spec["node"].values(), *spec.get("splits", {}).values()]:
            if not (root / rel).is_file():
                raise FileNotFoundError(f"graph folder '{root}' lacks '{rel}'; rewrite it with "
                                        f"write_graph_folder")
        g = GraphFolder(root, spec)
        if g._edges.shape != (2, g.num_edges):
            raise ValueError(f"'{rel}' has shape {g._edges.shape}, graph.json says "
                             f"[2, {g.num_edges}]; rewrite the folder with write_graph_folder")
        for k, v in g._node.items():
            if v.shape[0] != g.num_nodes:
                raise ValueError(f"node array '{k}' has {v.shape[0]} rows, graph.json says "
                                 f"{g.num_nodes} nodes; rewrite the folder with "
                                 f"write_graph_folder")
        return g

    def edges(self, lo=0, hi=None):
        return np.array(self._edges[:, lo:hi], dtype=np.int64)

    def node(self, name, lo=0, hi=None):
        hi = self.num_nodes if hi is None else hi
        if name in self._splits:
            ids = self._splits[name]
            mask = np.zeros(hi - lo, dtype=bool)
            inside = ids[(ids >= lo) & (ids < hi)]
            mask[inside - lo] = True
            return mask
        return np.array(self._node[name][lo:hi])

    def check_edges(self, lo, hi):
        e = self.edges(lo, hi)
        if e.size and (e.min() < 0 or e.max() >= self.num_nodes):
            raise ValueError(f"edges {lo}:{hi} hold node ids outside [0, {self.num_nodes}); fix "
                             f"the edge list or num_nodes in graph.json")

    def check_nodes(self, lo, hi):
        for k, v in self._node.items():
            rows = np.asarray(v[lo:hi])
            if rows.dtype.kind == "f" and not np.isfinite(rows).all():
                raise ValueError(f"node array '{k}' has NaN or infinite values in rows "
                                 f"{lo}:{hi}; clean them (e.g. numpy.nan_to_num)")

    def to_data(self):
        from torch_geometric.data import Data

        data = Data(edge_index=torch.from_numpy(self.edges()), num_nodes=self.num_nodes)
        for name in self.node_attrs:
            data[name] = torch.from_numpy(self.node(name))
        return data


def write_graph_folder(data, out_dir, overwrite=False, name=None):
    root = Path(out_dir)
    (root / "split").mkdir(parents=True, exist_ok=True)
    edge_index = data.edge_index.numpy()
    np.save(root / "edges.npy", edge_index)
    node, splits = {}, {}
    for key in data.keys():
        value = data[key]
        if key == "edge_index" or not torch.is_tensor(value) or value.dim() == 0 \
                or value.size(0) != data.num_nodes:
            continue
        if key in MASKS:
            np.save(root / MASKS[key], value.nonzero().view(-1).numpy())
            splits[key] = MASKS[key]
        else:
            np.save(root / f"{key}.npy", value.numpy())
            node[key] = f"{key}.npy"
    y = getattr(data, "y", None)
    spec = {"format": "pyg_dist.graph", "version": 1, "name": name or "graph",
            "num_nodes": int(data.num_nodes), "num_edges": int(edge_index.shape[1]),
            "num_classes": None if y is None else int(y.max()) + 1, "edges": "edges.npy",
            "node": node, "splits": splits}
    (root / "graph.json").write_text(json.dumps(spec))
    return GraphFolder.open(root)
