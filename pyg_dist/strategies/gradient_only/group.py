"""The subgraph a rank trains on in gradient-only mode: the union of its
clusters with the edges between them, read from the clusters folder."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from pyg_dist.data.dist_data import DistEdgeIndex
from pyg_dist.halo import HaloChannel, HaloPlan, HaloRegistry, Isolated, Ledger
from pyg_dist.ops.csr import ptr_from_sorted
from pyg_dist.partitioning.io import PartitionMeta, part_file, read_part
from pyg_dist.runtime import distributed

__all__ = ["ClusterGroup"]


@dataclass
class ClusterGroup:
    """A rank's clusters for one period.

    Attributes:
        clusters: The clusters, sorted.
        data: Their union as a plain PyG graph in local ids: every node
            attribute of the folder, ``edge_index`` (the in-edges whose source
            is in the union too) and the edge attributes; ``global_id``.
        cluster: ``[N]`` the cluster of each node.
        edge_cluster: ``[2, E]`` the clusters of each edge's source and target.
        in_degree: ``[N]`` each node's in-degree in the whole graph.
        bytes_read: Size of the cluster files read (or received).
        parts: The clusters' contents as read from the folder, by cluster
            (what a rank hands on when clusters move between ranks).

    Shapes:
        - **data.edge_index**, **edge_cluster:** :obj:`[2, E]`
        - **cluster**, **in_degree**, **coverage:** :obj:`[N]`
    """

    clusters: list[int]
    data: Data
    cluster: Tensor
    edge_cluster: Tensor
    in_degree: Tensor
    bytes_read: int
    parts: dict[int, Any] = field(default_factory=dict, repr=False)

    @property
    def coverage(self) -> Tensor:
        """``[N]`` the fraction of each node's in-neighbours (edges, with
        multiplicity) present on this rank (1 for a node without any)."""
        kept = torch.bincount(self.data.edge_index[1], minlength=self.data.num_nodes)
        return torch.where(self.in_degree > 0, kept / self.in_degree.clamp(min=1), 1.0)

    def graph(self, ledger: Ledger) -> tuple[DistEdgeIndex, Tensor]:
        """The group as a graph the Dist layers run on without any exchange:
        every node owned, no halo rows, :class:`~pyg_dist.halo.Isolated` for
        every layer; and ``[E]`` the position in ``data.edge_index`` of each of
        its (CSR-ordered) edges, to order edge weights by."""
        source, target = self.data.edge_index
        order = torch.argsort(target, stable=True)
        num_nodes = self.data.num_nodes
        device = target.device
        empty = torch.empty(0, dtype=torch.long, device=device)
        pointers = torch.zeros(distributed.world_size() + 1, dtype=torch.long, device=device)
        plan = HaloPlan.from_pointers(distributed.rank(), empty, pointers, pointers, empty,
                                      self.data.global_id)
        graph = DistEdgeIndex(ptr_from_sorted(target[order], num_nodes), source[order], order,
                              empty, empty, HaloChannel(plan, ledger), self.data.global_id,
                              HaloRegistry(Isolated(), fixed=True))
        return graph, order

    @classmethod
    def load(cls, folder: str | os.PathLike, meta: PartitionMeta,
             clusters: list[int]) -> ClusterGroup:
        """Reads ``clusters`` from ``folder`` (a clusters folder, one part per
        cluster) and keeps the edges between them."""
        parts = {c: read_part(folder, c, meta) for c in clusters}
        size = sum((Path(folder) / part_file(c)).stat().st_size for c in clusters)
        return cls.build(meta, parts, size)

    @classmethod
    def build(cls, meta: PartitionMeta, contents: dict[int, Any],
              size: int) -> ClusterGroup:
        """The group of the clusters whose contents (as :func:`~pyg_dist.partitioning.read_part`
        returns them) are ``contents``; ``size``: the bytes they came in."""
        clusters = sorted(contents)
        parts = [contents[c] for c in clusters]
        global_id = torch.cat([p["graph"]["global_id"] for p in parts])
        cluster = torch.cat([torch.full((p["graph"]["global_id"].numel(),), c, dtype=torch.long)
                             for c, p in zip(clusters, parts)])
        order = torch.argsort(global_id)
        ordered = global_id[order]
        src, dst, kept_edges, degrees = [], [], [], []
        offset = 0
        for p in parts:
            g = p["graph"]
            owned = g["global_id"].numel()
            counts = g["rowptr"][1:] - g["rowptr"][:-1]
            degrees.append(counts)
            source = torch.where(g["col"] < owned, g["global_id"][g["col"].clamp(max=owned - 1)],
                                 g["halo_global_id"][(g["col"] - owned).clamp(min=0)]
                                 if g["halo_global_id"].numel() else g["col"])
            place = torch.searchsorted(ordered, source).clamp(max=max(ordered.numel() - 1, 0))
            present = ordered[place] == source
            target = offset + torch.repeat_interleave(torch.arange(owned), counts)
            src.append(order[place[present]])
            dst.append(target[present])
            kept_edges.append(present)
            offset += owned
        edge_index = torch.stack([torch.cat(src), torch.cat(dst)])
        data = Data(edge_index=edge_index, num_nodes=global_id.numel(), global_id=global_id)
        for key in meta.node_attrs:
            setattr(data, key, torch.cat([p["node"][key] for p in parts]))
        for key in meta.edge_attrs:
            setattr(data, key, torch.cat([p["edge"][key][kept]
                                          for p, kept in zip(parts, kept_edges)]))
        return cls(clusters, data, cluster, cluster[edge_index], torch.cat(degrees), size,
                   dict(contents))
