r"""Which clusters each rank holds in each period of gradient-only training,
and how often two clusters share a rank.

The folder holds :math:`C = mP` clusters; in every period each of the
:math:`P` ranks holds :math:`m` of them (balanced, disjoint, all covered), the
same on every rank for a given seed:

* ``"sweep"``: rank :math:`r` keeps its base cluster :math:`rm` for good; the
  other :math:`L = (m - 1)P` clusters, in a seeded order, fill the ranks'
  :math:`m - 1` free slots, rotated by one rank's worth of slots each period
  (a full sweep: every extra cluster visits every rank in :math:`P` periods),
  plus one slot per sweep, so that the extras meet different company over
  time (Grappa's reference code sweeps likewise);
* ``"random"``: a seeded uniform permutation of the clusters cut into
  :math:`P` groups of :math:`m`;
* ``"home"``: rank :math:`r` keeps its own part's clusters
  :math:`rm, \dots, rm + m - 1` but one: in period :math:`t`, slot
  :math:`j = t \bmod m` goes to rank :math:`r + s` and rank :math:`r - s`'s goes
  to :math:`r` (mod :math:`P`), with :math:`s = 1 + \lfloor t/m \rfloor \bmod (P - 1)`;
  a rank keeps most of its part's edges (as an isolated part does) while every
  cluster meets every other part over a cycle of :math:`m(P - 1)` periods.

:func:`inclusion` gives :math:`\pi_{ab}`, the probability that clusters
:math:`a \ne b` share a rank in a period: :math:`(m - 1)/(C - 1)` under
``"random"`` (the other :math:`m - 1` places of :math:`a`'s group are a
uniform draw from the :math:`C - 1` other clusters), the fraction of a full
cycle's periods under ``"sweep"`` and ``"home"``; :math:`\pi_{aa} = 1`.
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["SCHEMES", "groups", "inclusion"]

SCHEMES = ("sweep", "random", "home")


def groups(num_clusters: int, num_ranks: int, period: int, scheme: str = "sweep",
           seed: int = 0) -> list[list[int]]:
    """The clusters of every rank in ``period`` (sorted per rank).

    Args:
        num_clusters (int): :math:`C`, the clusters of the folder.
        num_ranks (int): :math:`P`, the ranks.
        period (int): :math:`t`, the period, from :obj:`0`.
        scheme (str, optional): One of :data:`~pyg_dist.strategies.gradient_only.SCHEMES`
            (see ``pyg_dist.strategies.gradient_only.schedule``). (default: :obj:`"sweep"`)
        seed (int, optional): Seed of the ``"sweep"`` order and the
            ``"random"`` draws. (default: :obj:`0`)
    """
    per_rank = num_clusters // num_ranks
    if scheme == "home":
        return _home(per_rank, num_ranks, period)
    if scheme == "random":
        gen = torch.Generator().manual_seed(_period_seed(seed, period))
        perm = torch.randperm(num_clusters, generator=gen).tolist()
        return [sorted(perm[r * per_rank:(r + 1) * per_rank]) for r in range(num_ranks)]
    extras = _extras(num_clusters, num_ranks, seed)
    slots = per_rank - 1
    if not extras:
        return [[r * per_rank] for r in range(num_ranks)]
    shift = (period * slots + period // num_ranks) % len(extras)
    turned = extras[shift:] + extras[:shift]
    return [sorted([r * per_rank, *turned[r * slots:(r + 1) * slots]]) for r in range(num_ranks)]


def inclusion(num_clusters: int, num_ranks: int, scheme: str = "sweep", seed: int = 0) -> Tensor:
    """``[C, C]`` float64: :math:`\\pi_{ab}`, how often clusters ``a`` and
    ``b`` share a rank (see ``pyg_dist.strategies.gradient_only.schedule``).

    Args:
        num_clusters (int): :math:`C`, the clusters of the folder.
        num_ranks (int): :math:`P`, the ranks.
        scheme (str, optional): One of :data:`~pyg_dist.strategies.gradient_only.SCHEMES`.
            (default: :obj:`"sweep"`)
        seed (int, optional): The seed :func:`groups` is given.
            (default: :obj:`0`)
    """
    per_rank = num_clusters // num_ranks
    if scheme == "random":
        share = (per_rank - 1) / max(num_clusters - 1, 1)
        pi = torch.full((num_clusters, num_clusters), share, dtype=torch.float64)
    else:
        cycle = (per_rank * max(num_ranks - 1, 1) if scheme == "home"
                 else num_ranks * max(len(_extras(num_clusters, num_ranks, seed)), 1))
        together = torch.zeros(num_clusters, num_clusters, dtype=torch.float64)
        for period in range(cycle):
            for group in groups(num_clusters, num_ranks, period, scheme, seed):
                index = torch.tensor(group)
                together[index.unsqueeze(1), index.unsqueeze(0)] += 1.0
        pi = together / cycle
    pi.fill_diagonal_(1.0)
    return pi


def _home(per_rank: int, num_ranks: int, period: int) -> list[list[int]]:
    """The ``"home"`` groups of ``period`` (see the module docstring)."""
    homes = [list(range(r * per_rank, (r + 1) * per_rank)) for r in range(num_ranks)]
    if num_ranks == 1:
        return homes
    slot = period % per_rank
    shift = 1 + (period // per_rank) % (num_ranks - 1)
    out = []
    for r, home in enumerate(homes):
        guest = homes[(r - shift) % num_ranks][slot]
        out.append(sorted([c for j, c in enumerate(home) if j != slot] + [guest]))
    return out


def _extras(num_clusters: int, num_ranks: int, seed: int) -> list[int]:
    """The clusters that are nobody's base, in the seeded order of the sweep."""
    per_rank = num_clusters // num_ranks
    extras = [c for c in range(num_clusters) if c % per_rank != 0]
    order = torch.randperm(len(extras), generator=torch.Generator().manual_seed(seed)).tolist()
    return [extras[i] for i in order]


def _period_seed(seed: int, period: int) -> int:
    return (seed * 1_000_003 + period) % (2**63 - 1)
