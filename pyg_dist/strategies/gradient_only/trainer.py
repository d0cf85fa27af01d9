"""Gradient-only training: what :func:`pyg_dist.train.train` runs under
``strategy=GradientOnly(...)``. Each rank trains on its clusters' subgraph (no halo
exchange at all), regroups every ``regroup_every`` epochs, and weighs
messages or its gradient by the coverage correction; only gradients cross
the network."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from torch import Tensor

from pyg_dist.data.dist_data import DistEdgeIndex
from pyg_dist.halo.ledger import REGROUP
from pyg_dist.partitioning.io import CLUSTERS_DIR, read_meta
from pyg_dist.runtime import distributed
from pyg_dist.strategies.gradient_only.correction import batch_weight, edge_weights, shrink
from pyg_dist.strategies.gradient_only.group import ClusterGroup
from pyg_dist.strategies.gradient_only.move import move_clusters
from pyg_dist.strategies.gradient_only.schedule import groups, inclusion

__all__ = ["GroupRunner", "LAYER"]

#: The ledger's name for loading a new group of clusters.
LAYER = "regroup"
#: Where a new group of clusters comes from.
SOURCES = ("folder", "peers")


class GroupRunner:
    r"""Gradient-only training on the clusters of a partition folder cut
    with ``clusters_per_part`` :math:`m > 1`: in period
    :math:`t = \lfloor (\text{epoch} - 1) / R \rfloor` rank :math:`r` holds
    :func:`~pyg_dist.strategies.gradient_only.groups` ``(C, P, t)[r]`` and trains
    on the edges between them (see ``pyg_dist.strategies.gradient_only.correction`` for
    the corrections). A new group is read from the clusters folder
    (``regroup_from="folder"``: storage every rank can read) or, after the
    first, received from the ranks that held its clusters
    (``"peers"``); either is booked in the ledger (layer ``"regroup"``: the
    bytes read or received and sent, the seconds).

    Args:
        data (DistData): This rank's part of the folder (its ledger books the
            regroups; evaluation runs on it, exactly).
        regroup_every (int, optional): :math:`R`. (default: :obj:`50`)
        regroup (str, optional): ``"sweep"`` or ``"random"``. (default: :obj:`"sweep"`)
        correction (str, optional): ``"node"``, ``"batch"`` or ``"none"``.
            (default: :obj:`"node"`)
        shrinkage (float, optional): :math:`\lambda \in [0, 1]`. (default: :obj:`0.0`)
        seed (int, optional): Seed of the grouping. (default: :obj:`0`)
        regroup_from (str, optional): ``"folder"`` or ``"peers"``.
            (default: :obj:`"folder"`)
        clusters_per_rank (int, optional): :math:`m`, checked against the
            folder's ``clusters_per_part`` (clusters are cut once, by
            :func:`~pyg_dist.partition`); :obj:`None` takes the folder's.
            (default: :obj:`None`)
        model (torch.nn.Module, optional): Checked to set no halo policy other
            than exact on its layers (groups have no halo). (default: :obj:`None`)
    """

    def __init__(self, data: Any, regroup_every: int = 50, regroup: str = "sweep",
                 correction: str = "node", shrinkage: float = 0.0, seed: int = 0,
                 regroup_from: str = "folder", clusters_per_rank: int | None = None,
                 model: Any = None) -> None:
        _check(data, clusters_per_rank, model)
        self.source = regroup_from
        self.folder = Path(data.folder) / CLUSTERS_DIR
        self.meta = read_meta(self.folder)
        self.ledger = data.ledger
        self.rank, self.world = distributed.rank(), distributed.world_size()
        self.every, self.scheme, self.seed = regroup_every, regroup, seed
        self.correction, self.shrinkage = correction, shrinkage
        self.pi = inclusion(self.meta.num_parts, self.world, regroup, seed)
        self.device = data.x.device
        self.group: ClusterGroup | None = None
        self.groups: list[list[int]] = []
        self.data: Any = None
        self.graph: DistEdgeIndex | None = None
        self.edge_weight: Tensor | None = None
        self.scale = 1.0

    def prepare(self, epoch: int) -> ClusterGroup:
        """This rank's group for ``epoch`` (1-based), loaded when the groups
        change; collective then (the batch weights, moving clusters)."""
        period = (epoch - 1) // self.every
        every = groups(self.meta.num_parts, self.world, period, self.scheme, self.seed)
        if self.group is not None and every == self.groups:
            return self.group
        # The same on every rank: the batch weights and moves are collective.
        start, sent, received = time.perf_counter(), 0, 0
        if self.group is None or (self.source == "folder"
                                  and self.group.clusters != every[self.rank]):
            self.group = ClusterGroup.load(self.folder, self.meta, every[self.rank])
            received = self.group.bytes_read
        elif self.source == "peers":
            contents, sent, received = move_clusters(self.group.parts, self.groups, every)
            self.group = ClusterGroup.build(self.meta, contents, received)
        self.groups = every
        graph, order = self.group.graph(self.ledger)
        self.data, self.graph = self.group.data.to(self.device), graph.to(self.device)
        self._weigh(self.group, order)
        self.ledger.record(LAYER, REGROUP, bytes_recv=received, bytes_sent=sent,
                           exchanges=1, seconds=time.perf_counter() - start)
        assert self.group is not None, "loaded above"
        return self.group

    def inputs(self) -> tuple[Any, ...]:
        """What the model is called with: ``(x, edge_index)`` (the group as a
        :class:`~pyg_dist.DistEdgeIndex` without halo, so the Dist layers
        aggregate with :func:`~pyg_dist.ops.spmm` and exchange nothing), plus
        the edge weights under ``correction="node"``."""
        assert self.graph is not None, "prepare() first"
        if self.edge_weight is None:
            return self.data.x, self.graph
        return self.data.x, self.graph, self.edge_weight

    def _weigh(self, group: ClusterGroup, order: Tensor) -> None:
        if self.correction == "node":
            weight = shrink(edge_weights(group, self.pi), self.shrinkage)
            self.edge_weight = weight[order].to(self.device)
        elif self.correction == "batch":
            mine = batch_weight(group, self.pi)
            mean = distributed.all_reduce_values([mine])[0] / self.world
            self.scale = ((1.0 - self.shrinkage) * mine + self.shrinkage * mean) / mean


def _check(data: Any, clusters_per_rank: int | None = None, model: Any = None) -> None:
    """What the options (checked by :class:`pyg_dist.config.GradientOnly`)
    need of the folder, the data's halo policy and the model's layers."""
    meta = getattr(data, "meta", None)
    if getattr(data, "folder", None) is None or meta is None:
        raise ValueError("'train' with strategy=GradientOnly(...) needs a DistData loaded "
                         "from a partition folder (pyg_dist.DistData.load(folder))")
    if clusters_per_rank is not None:
        if clusters_per_rank != meta.clusters_per_part:
            raise ValueError(
                f"'train' got clusters_per_rank={clusters_per_rank}, but '{data.folder}' was "
                f"cut into {meta.clusters_per_part} cluster(s) per part; re-partition with "
                f"pyg_dist.partition(..., clusters_per_part={clusters_per_rank}) (CLI: "
                f"--clusters-per-rank {clusters_per_rank}) or pass clusters_per_rank="
                f"{meta.clusters_per_part}")
    if meta.clusters_per_part < 2:
        raise ValueError(
            f"'train' with strategy=GradientOnly(...) needs a partition folder cut into "
            f"clusters, but '{data.folder}' has none; re-partition with pyg_dist.partition(..., "
            f"clusters_per_part=m) for some m >= 2 (CLI: --clusters-per-part m)")
    default = data.edge_index.registry.default
    if default is not None and default.spec() != "exact":
        raise ValueError(
            f"'train' with GradientOnly exchanges no halo, but the data's halo policy is "
            f"'{default.spec()}'; load the data with the exact policy (the default) — "
            f"evaluation uses it")
    for name, module in model.named_modules() if model is not None else ():
        policy: Any = getattr(module, "halo", None)
        if policy is not None and policy.spec() != "exact":
            raise ValueError(
                f"'train' with GradientOnly exchanges no halo, but layer '{name}' sets "
                f"halo='{policy.spec()}'; leave its halo unset (None) or exact")
