r"""Large seeded graphs shaped like real ones: heavy-tailed degrees, communities
of varied sizes, labels that follow the communities and features that follow
the labels.

The model is a degree-corrected planted partition (the family of LFR
benchmarks): node :math:`v` gets a community and a propensity
:math:`\theta_v` from a power law; each undirected edge picks its first end
with probability :math:`\propto \theta`, and its second end
:math:`\propto \theta` inside the first end's community with probability
:math:`1 - \mu`, anywhere with probability :math:`\mu` (``mixing``); a node
whose expected degree would fill its own community mixes more (hubs link
across communities instead of drawing duplicates). So degrees are
heavy-tailed, a fraction of a little more than :math:`\mu` of the edges
leaves its community, and a partitioner that keeps communities together cuts
about that fraction times :math:`1 - 1/P` into :math:`P` parts.

Edges are drawn in chunks, then deduplicated and symmetrised with in-place
sorts of one int64 key per edge: memory stays a small multiple of the output's
``edge_index``, time is a pass over the edges plus a few sorts (a first draw,
top-ups for the duplicates it dropped, the symmetrisation).
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["community_graph", "CommunityGraphConfig", "PRESETS", "preset"]

#: Edges drawn per chunk: bounds the float64 temporaries (~10 vectors of this
#: length, 320 MB at 4M) whatever the graph's size.
EDGE_CHUNK = 1 << 22
#: Rounds of top-up draws (duplicates are dropped) before settling for fewer edges.
MAX_ROUNDS = 8
#: Feature rows given their class centroid at a time.
ROW_CHUNK = 1 << 18


@dataclass
class CommunityGraphConfig:
    r"""The parameters of :func:`community_graph`.

    Attributes:
        num_nodes: Nodes.
        avg_degree: Directed edges per node (each undirected edge counts twice).
        num_features: Width of ``x``.
        num_classes: Classes of ``y``.
        mixing: Fraction :math:`\mu` of edges whose second end is drawn from the
            whole graph rather than the first end's community.
        degree_exponent: Exponent :math:`\gamma` of the power law
            :math:`P(d) \propto d^{-\gamma}` of expected degrees (:math:`> 2`).
        max_degree: Cap on a node's expected degree (:obj:`None`:
            :math:`\sqrt{N} \cdot` ``avg_degree``).
        community_exponent: Exponent of the power law of community sizes.
        min_community: Smallest community (:obj:`None`: ``4 * avg_degree``, at
            least 20, so that communities are not saturated by their own edges).
        max_community: Largest community (:obj:`None`: ``num_nodes // 32``, at
            least ``10 * min_community``).
        label_purity: Probability that a node's class is its community's class
            (else a class drawn from the class frequencies).
        class_skew: Class :math:`c` is the class of a community with probability
            :math:`\propto (c + 1)^{-\text{skew}}` (0: balanced classes).
        signal: Scale of the class centroid in a node's features (unit noise
            around it): small values make features alone weak predictors.
        split: Fractions of nodes in ``train_mask`` and ``val_mask``; the rest
            is ``test_mask``.
    """

    num_nodes: int = 100_000
    avg_degree: float = 16.0
    num_features: int = 64
    num_classes: int = 16
    mixing: float = 0.15
    degree_exponent: float = 2.5
    max_degree: int | None = None
    community_exponent: float = 2.0
    min_community: int | None = None
    max_community: int | None = None
    label_purity: float = 0.75
    class_skew: float = 0.8
    signal: float = 0.2
    split: tuple[float, float] = (0.5, 0.2)


#: Graphs shaped like OGB benchmarks (sizes, degree, feature width, classes and
#: split fractions of the real ones; structure synthetic): two node-property
#: ones, and ogbl-collab for link prediction (its classes only shape the
#: features; cut it with ``RandomLinkSplit``).
PRESETS: dict[str, CommunityGraphConfig] = {
    # ogbn-arxiv: 169,343 nodes, 1,166,243 citations (2,315,598 directed once
    # symmetrised), 128 features, 40 classes, 54% / 18% / 28% split.
    "synthetic-arxiv": CommunityGraphConfig(
        num_nodes=169_343, avg_degree=13.7, num_features=128, num_classes=40, mixing=0.15,
        max_degree=13_000, label_purity=0.7, signal=0.2, split=(0.54, 0.18),
    ),
    # ogbn-products: 2,449,029 nodes, 61,859,140 undirected edges, 100
    # features, 47 classes, 8% / 1.6% / 90.4% split.
    "synthetic-products": CommunityGraphConfig(
        num_nodes=2_449_029, avg_degree=50.5, num_features=100, num_classes=47, mixing=0.1,
        max_degree=17_000, label_purity=0.8, signal=0.3, split=(0.08, 0.016),
    ),
    # ogbl-collab: 235,868 authors, 1,285,465 collaborations, average degree
    # 8.2 (OGB's table), 128 features, largest degree 671.
    "synthetic-collab": CommunityGraphConfig(
        num_nodes=235_868, avg_degree=8.2, num_features=128, num_classes=40, mixing=0.1,
        max_degree=671, label_purity=0.7, signal=0.3,
    ),
}


def preset(name: str, **overrides: Any) -> CommunityGraphConfig:
    """The configuration of preset ``name`` with ``overrides`` applied
    (e.g. ``num_nodes=``, ``avg_degree=``); ``None`` values are ignored.

    Args:
        name (str): A key of :data:`~pyg_dist.datasets.PRESETS`.
        **overrides (optional): Fields of :class:`CommunityGraphConfig` to
            replace.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset '{name}'; use one of {', '.join(PRESETS)}")
    base = PRESETS[name]
    fields = {k: v for k, v in overrides.items() if v is not None}
    unknown = sorted(set(fields) - set(vars(base)))
    if unknown:
        raise TypeError(f"'{name}' has no parameter {', '.join(unknown)}; set one of "
                        f"{', '.join(vars(base))}")
    return CommunityGraphConfig(**{**vars(base), **fields})


def community_graph(config: CommunityGraphConfig | None = None, seed: int = 0,
                    **kwargs: Any) -> Any:
    r"""A seeded graph with heavy-tailed degrees and communities of varied
    sizes, labels that follow the communities and features that follow the
    labels (see the module's documentation for the model).

    Node ids are shuffled, so they reveal nothing about the communities. A
    node's features are its class's random centroid scaled by ``signal`` plus
    unit Gaussian noise: alone they classify poorly, and averaging over
    neighbours (mostly of the node's community, mostly of its class) helps.

    Args:
        config (CommunityGraphConfig, optional): The parameters; keyword
            arguments override its fields. (default: :obj:`None`, the defaults)
        seed (int, optional): The seed; the graph is a function of
            ``(config, seed)``. (default: :obj:`0`)
        **kwargs (optional): Fields of :class:`CommunityGraphConfig`.

    Returns:
        :class:`torch_geometric.data.Data` with ``x`` (float32), ``y``,
        ``edge_index`` (both directions, no self-loops, no duplicates, sorted
        by source then target), ``community`` and the three masks.

    Shapes:
        - **x:** :math:`(N, F)`, **y**, **community**, masks: :math:`(N)`
        - **edge_index:** :math:`(2, E)`, :math:`E = 2 \cdot
          \mathrm{round}(N \cdot` ``avg_degree`` :math:`/ 2)` (fewer only if
          duplicates still fall short after ``MAX_ROUNDS`` top-ups)
    """
    from torch_geometric.data import Data

    cfg = _check(CommunityGraphConfig(**{**vars(config or CommunityGraphConfig()), **kwargs}))
    g = torch.Generator().manual_seed(seed)
    sizes = _community_sizes(cfg, g)
    theta = _propensities(cfg, g)
    relabel = torch.randperm(cfg.num_nodes, generator=g)
    edge_index = _edges(cfg, sizes, theta, relabel, g)
    community = torch.empty(cfg.num_nodes, dtype=torch.long)
    community[relabel] = torch.repeat_interleave(torch.arange(sizes.numel()), sizes)
    y = _labels(cfg, community, sizes.numel(), g)
    x = _features(cfg, y, g)
    masks = _masks(cfg, g)
    return Data(x=x, y=y, edge_index=edge_index, community=community, train_mask=masks[0],
                val_mask=masks[1], test_mask=masks[2])


def _check(cfg: CommunityGraphConfig) -> CommunityGraphConfig:
    problems = []
    if cfg.num_nodes < 2:
        problems.append(f"num_nodes={cfg.num_nodes} (needs >= 2)")
    if not 0 < cfg.avg_degree < cfg.num_nodes - 1:
        problems.append(f"avg_degree={cfg.avg_degree} (needs 0 < avg_degree < num_nodes - 1)")
    if not 0.0 <= cfg.mixing <= 1.0:
        problems.append(f"mixing={cfg.mixing} (needs 0 <= mixing <= 1)")
    if cfg.degree_exponent <= 2.0:
        problems.append(f"degree_exponent={cfg.degree_exponent} (needs > 2 for a finite mean)")
    if cfg.num_classes < 1 or cfg.num_features < 1:
        problems.append("num_classes and num_features must be >= 1")
    if not (0 <= cfg.split[0] and 0 <= cfg.split[1] and sum(cfg.split) <= 1):
        problems.append(f"split={cfg.split} (needs two fractions summing to <= 1)")
    if problems:
        raise ValueError(f"'community_graph' got {'; '.join(problems)}; fix these parameters")
    return cfg


def _community_sizes(cfg: CommunityGraphConfig, g: torch.Generator) -> Tensor:
    """Community sizes from a power law on ``[min_community, max_community]``,
    summing to ``num_nodes`` (the last one truncated)."""
    n = cfg.num_nodes
    lo = min(cfg.min_community or max(20, math.ceil(4 * cfg.avg_degree)), n)
    hi = max(lo, min(cfg.max_community or max(n // 32, 10 * lo), n))
    mean = max(float(lo), _power_law_mean(lo, hi, cfg.community_exponent))
    sizes = _power_law(int(2 * n / mean) + 16, lo, hi, cfg.community_exponent, g).round().long()
    while int(sizes.sum()) < n:  # the draw fell short: add more
        more = _power_law(int(n / mean) + 16, lo, hi, cfg.community_exponent, g).round().long()
        sizes = torch.cat([sizes, more])
    end = torch.cumsum(sizes, 0)
    count = int(torch.searchsorted(end, torch.tensor(n))) + 1
    sizes = sizes[:count].clone()
    sizes[-1] -= int(end[count - 1]) - n
    return sizes[sizes > 0]


def _power_law(count: int, lo: float, hi: float, exponent: float, g: torch.Generator) -> Tensor:
    """``count`` float64 draws of density :math:`\\propto s^{-exponent}` on ``[lo, hi]``."""
    u = torch.rand(count, generator=g, dtype=torch.float64)
    if hi <= lo:
        return torch.full((count,), float(lo), dtype=torch.float64)
    if abs(exponent - 1.0) < 1e-9:
        return lo * (hi / lo) ** u
    a, b = lo ** (1 - exponent), hi ** (1 - exponent)
    return (a + u * (b - a)) ** (1 / (1 - exponent))


def _power_law_mean(lo: float, hi: float, exponent: float) -> float:
    draws = _power_law(4096, lo, hi, exponent, torch.Generator().manual_seed(0))
    return float(draws.mean())


def _propensities(cfg: CommunityGraphConfig, g: torch.Generator) -> Tensor:
    """``[N]`` float64 propensities, scaled to expected degrees: a power law of
    exponent ``degree_exponent`` with mean ``avg_degree``, capped at
    ``max_degree`` (and re-scaled once after capping)."""
    n = cfg.num_nodes
    cap = float(cfg.max_degree or math.sqrt(n) * cfg.avg_degree)
    u = torch.rand(n, generator=g, dtype=torch.float64)
    theta = (1.0 - u).pow(-1.0 / (cfg.degree_exponent - 1.0))
    for _ in range(2):
        theta = (theta * (cfg.avg_degree / theta.mean())).clamp_(max=cap)
    return theta


def _edges(cfg: CommunityGraphConfig, sizes: Tensor, theta: Tensor, relabel: Tensor,
           g: torch.Generator) -> Tensor:
    """``[2, E]`` int64 symmetric edges without loops or duplicates, sorted."""
    target = int(round(cfg.num_nodes * cfg.avg_degree / 2))
    drawer = _EdgeDrawer(theta, sizes, relabel, cfg.mixing, g)
    keys = np.empty(0, dtype=np.int64)
    draw = int(target * 1.02) + 1
    for _ in range(MAX_ROUNDS):  # duplicates and self-loops are dropped: top up
        fresh = _sorted_unique(np.concatenate(list(drawer.draw(draw))))
        before = keys.size
        keys = np.concatenate([keys, fresh])
        keys.sort(kind="stable")  # a merge of two sorted runs
        keys = _sorted_unique(keys, presorted=True)
        missing = target - keys.size
        if missing <= 0:
            break
        # Draw what is missing, scaled by the share of this round's draws that were new.
        draw = int(missing * draw / max(keys.size - before, 1) * 1.05) + 1
    if keys.size > target:  # drop a random surplus, keep the order
        keep = torch.randperm(keys.size, generator=g)[:target].numpy()
        keep.sort()
        keys = keys[keep]
    return _symmetrise(keys, cfg.num_nodes)


class _EdgeDrawer:
    """Draws undirected edges of the model as keys ``min * N + max`` of the
    shuffled ids, in chunks of about :data:`EDGE_CHUNK`.

    First ends come from Poisson counts per node, so they arrive sorted by
    (unshuffled) node and hence by community; second ends are binary searches
    in the cumulative propensities over queries that are sorted (anywhere) or
    confined to one community's range (inside): both stay cache-friendly,
    where searches for random queries over millions of nodes would not.
    """

    def __init__(self, theta: Tensor, sizes: Tensor, relabel: Tensor, mixing: float,
                 g: torch.Generator) -> None:
        self.cum = torch.cumsum(theta, 0)
        self.total = float(self.cum[-1])
        self.prob = theta / self.total
        start = torch.zeros(sizes.numel() + 1, dtype=torch.long)
        torch.cumsum(sizes, 0, out=start[1:])
        self.community = torch.repeat_interleave(torch.arange(sizes.numel()), sizes)
        self.mass_lo = torch.cat([self.cum.new_zeros(1), self.cum])[start[:-1]]
        self.mass_hi = self.cum[start[1:] - 1]
        # A node whose expected degree would fill its community mixes more:
        # hubs link across communities instead of drawing duplicates.
        size = sizes.to(torch.float64)[self.community]
        self.mixing = (1.0 - size / (2.0 * theta)).clamp_(min=mixing, max=1.0).float()
        self.relabel, self.g = relabel, g

    def draw(self, count: int) -> Iterator[np.ndarray]:
        """About ``count`` edges (a Poisson number), self-loops dropped."""
        counts = torch.poisson(self.prob * count, generator=self.g).long()
        ends = torch.cumsum(counts, 0)
        splits = torch.arange(EDGE_CHUNK, max(int(ends[-1]), EDGE_CHUNK), EDGE_CHUNK)
        bounds = torch.searchsorted(ends, splits)
        nodes = [0, *bounds.add(1).tolist(), counts.numel()]
        for lo, hi in zip(nodes[:-1], nodes[1:]):
            if hi > lo:
                yield self._chunk(torch.arange(lo, hi), counts[lo:hi])

    def _chunk(self, nodes: Tensor, counts: Tensor) -> np.ndarray:
        src = torch.repeat_interleave(nodes, counts)
        dst = torch.empty_like(src)
        inside = torch.rand(src.numel(), generator=self.g) >= self.mixing[src]
        c = self.community[src[inside]]
        lo, hi = self.mass_lo[c], self.mass_hi[c]
        u = torch.rand(c.numel(), generator=self.g, dtype=torch.float64)
        dst[inside] = _search(self.cum, lo + u * (hi - lo))
        outside = int(src.numel() - c.numel())
        anywhere = _search(self.cum, _sorted_uniform(outside, self.g) * self.total)
        dst[~inside] = anywhere[torch.randperm(outside, generator=self.g)]
        src, dst = self.relabel[src], self.relabel[dst]
        keep = src != dst
        src, dst = src[keep], dst[keep]
        n = self.cum.numel()
        return (torch.minimum(src, dst) * n + torch.maximum(src, dst)).numpy()


def _sorted_uniform(count: int, g: torch.Generator) -> Tensor:
    """``count`` sorted float64 uniforms on [0, 1) in O(count), from normalised
    cumulative sums of exponential gaps."""
    gaps = torch.empty(count + 1, dtype=torch.float64).exponential_(generator=g)
    points = torch.cumsum(gaps, 0)
    return points[:-1] / points[-1]


def _sorted_unique(keys: np.ndarray, presorted: bool = False) -> np.ndarray:
    """The distinct values of ``keys``, sorted (sorts ``keys`` in place)."""
    if not presorted:
        keys.sort()
    if keys.size < 2:
        return keys
    distinct = np.empty(keys.size, dtype=bool)
    distinct[0] = True
    np.not_equal(keys[1:], keys[:-1], out=distinct[1:])
    return keys[distinct]


def _search(cum: Tensor, mass: Tensor) -> Tensor:
    """The node whose cumulative propensity interval holds each ``mass``."""
    return torch.searchsorted(cum, mass, right=True).clamp_(max=cum.numel() - 1)


def _symmetrise(keys: np.ndarray, n: int) -> Tensor:
    """Both directions of the undirected keys ``a * n + b`` (``a < b``), sorted."""
    both = np.empty(2 * keys.size, dtype=np.int64)
    both[: keys.size] = keys
    np.floor_divide(keys, n, out=both[keys.size :])
    both[keys.size :] += (keys % n) * n  # b * n + a
    del keys
    both.sort()
    edge_index = torch.empty(2, both.size, dtype=torch.long)
    np.floor_divide(both, n, out=edge_index[0].numpy())
    np.remainder(both, n, out=edge_index[1].numpy())
    return edge_index


def _labels(cfg: CommunityGraphConfig, community: Tensor, num_communities: int,
            g: torch.Generator) -> Tensor:
    """Each community's class, drawn from skewed class frequencies; a node keeps
    it with probability ``label_purity``, else draws a class of its own."""
    weights = torch.arange(1, cfg.num_classes + 1, dtype=torch.float64).pow(-cfg.class_skew)
    of_community = torch.multinomial(weights, num_communities, replacement=True, generator=g)
    y = of_community[community]
    own = torch.rand(cfg.num_nodes, generator=g) >= cfg.label_purity
    y[own] = torch.multinomial(weights, int(own.sum()), replacement=True, generator=g)
    return y


def _features(cfg: CommunityGraphConfig, y: Tensor, g: torch.Generator) -> Tensor:
    centroids = torch.randn(cfg.num_classes, cfg.num_features, generator=g)
    x = torch.randn(cfg.num_nodes, cfg.num_features, generator=g)
    for lo in range(0, cfg.num_nodes, ROW_CHUNK):  # no second [N, F] temporary
        rows = slice(lo, lo + ROW_CHUNK)
        x[rows].add_(centroids[y[rows]], alpha=cfg.signal)
    return x


def _masks(cfg: CommunityGraphConfig, g: torch.Generator) -> list[Tensor]:
    order = torch.randperm(cfg.num_nodes, generator=g)
    n_train = int(cfg.split[0] * cfg.num_nodes)
    n_val = int(cfg.split[1] * cfg.num_nodes)
    bounds = [0, n_train, n_train + n_val, cfg.num_nodes]
    masks = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        mask = torch.zeros(cfg.num_nodes, dtype=torch.bool)
        mask[order[lo:hi]] = True
        masks.append(mask)
    return masks
