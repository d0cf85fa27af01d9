r"""A seeded heterogeneous graph shaped like ogbn-mag: papers, authors,
institutions and fields of study, with the four relations of ogbn-mag and
their reverses (as :class:`torch_geometric.transforms.ToUndirected` adds
them), scalable by its node count.

Every node has a community (uniformly drawn, :math:`C` communities); a
relation's edge picks its source with probability proportional to a
power-law propensity (heavy-tailed out-degrees: prolific authors, much-cited
fields) and its target inside the source's community with probability
:math:`1 - \mu` (``mixing``), anywhere otherwise. Papers carry labels (the
community's class) and features (the class centroid plus noise); the other
types carry features of their community's centroid plus noise, standing in
for the metapath2vec embeddings PyG's ``OGB_MAG(preprocess="metapath2vec")``
gives them. Only papers have labels and masks.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import HeteroData
from torch_geometric.transforms import ToUndirected

__all__ = ["synthetic_mag", "MAG_NODES", "MAG_EDGES"]

#: ogbn-mag's node counts.
MAG_NODES = {"paper": 736_389, "author": 1_134_649, "institution": 8_740,
             "field_of_study": 59_965}
#: ogbn-mag's edge counts, before reverse relations are added.
MAG_EDGES = {
    ("author", "affiliated_with", "institution"): 1_043_998,
    ("author", "writes", "paper"): 7_145_660,
    ("paper", "cites", "paper"): 5_416_271,
    ("paper", "has_topic", "field_of_study"): 7_505_078,
}
#: Power-law exponent of the source propensities (a Pareto tail).
PROPENSITY_EXPONENT = 2.5


def synthetic_mag(num_nodes: int | None = None, seed: int = 0, num_features: int = 128,
                  num_classes: int = 349, mixing: float = 0.2,
                  nodes_per_community: int = 400, feature_noise: float = 8.0) -> HeteroData:
    r"""A seeded graph shaped like ogbn-mag (see the module's description).

    Args:
        num_nodes (int, optional): Nodes of all types together; every type's
            node and edge count scale by ``num_nodes / 1,939,743`` (ogbn-mag's
            total). :obj:`None` for ogbn-mag's sizes. (default: :obj:`None`)
        seed (int, optional): The seed. (default: :obj:`0`)
        num_features (int, optional): Width of every type's ``x``. (default: :obj:`128`)
        num_classes (int, optional): Classes of the papers' ``y``. (default: :obj:`349`)
        mixing (float, optional): Fraction :math:`\mu` of edges whose target
            is drawn anywhere instead of in the source's community.
            (default: :obj:`0.2`)
        nodes_per_community (int, optional): Papers per community (at least
            one community per class). (default: :obj:`400`)
        feature_noise (float, optional): Standard deviation of the Gaussian
            noise added to the centroids (unit normal entries): at 8, a
            paper's own features name its class about half the time, its
            neighbourhood's nearly always. (default: :obj:`8.0`)
    """
    scale = 1.0 if num_nodes is None else num_nodes / sum(MAG_NODES.values())
    if scale <= 0:
        raise ValueError(f"'synthetic_mag' needs num_nodes > 0 (got {num_nodes})")
    g = torch.Generator().manual_seed(seed)
    sizes = {t: max(1, round(n * scale)) for t, n in MAG_NODES.items()}
    num_communities = max(num_classes, sizes["paper"] // nodes_per_community)
    community = {t: torch.randint(0, num_communities, (n,), generator=g) for t, n in sizes.items()}
    centroids = torch.randn(num_communities, num_features, generator=g)
    data = HeteroData()
    for t, n in sizes.items():
        data[t].x = centroids[community[t]] + feature_noise * torch.randn(n, num_features,
                                                                          generator=g)
    paper = data["paper"]
    paper.y = community["paper"] % num_classes
    split = torch.rand(sizes["paper"], generator=g)
    paper.train_mask, paper.val_mask, paper.test_mask = split < 0.6, (split >= 0.6) & (
        split < 0.8), split >= 0.8
    for (src, rel, dst), count in MAG_EDGES.items():
        num_edges = max(1, round(count * scale))
        data[src, rel, dst].edge_index = _edges(community[src], community[dst], num_edges,
                                                num_communities, mixing, g)
    return ToUndirected()(data)


def _edges(src_community: Tensor, dst_community: Tensor, num_edges: int, num_communities: int,
           mixing: float, g: torch.Generator) -> Tensor:
    """``[2, num_edges]``: sources by power-law propensity, targets in the
    source's community with probability ``1 - mixing`` (anywhere when the
    community has no target node)."""
    propensity = torch.rand(src_community.numel(), generator=g).pow(
        -1.0 / (PROPENSITY_EXPONENT - 1.0))
    src = torch.multinomial(propensity, num_edges, replacement=True, generator=g)
    order = torch.argsort(dst_community, stable=True)
    counts = torch.bincount(dst_community, minlength=num_communities)
    start = torch.cumsum(counts, 0) - counts
    c = src_community[src]
    inside = (torch.rand(num_edges, generator=g) >= mixing) & (counts[c] > 0)
    offset = (torch.rand(num_edges, generator=g) * counts[c]).long().clamp(
        max=_max_index(counts[c]))
    anywhere = torch.randint(0, dst_community.numel(), (num_edges,), generator=g)
    dst = torch.where(inside, order[(start[c] + offset).clamp(max=order.numel() - 1)], anywhere)
    return torch.stack([src, dst])


def _max_index(counts: Tensor) -> Any:
    return (counts - 1).clamp(min=0)
