r"""Negative edges that every world size draws alike.

PyG draws negatives with a generator (``negative_sampling``,
``structured_negative_sampling``): each rank would draw its own, and a run on
:math:`P` ranks would train on other negatives than one process. Here the
:math:`k`-th negative of positive edge :math:`i` (its position in the split's
whole list, :attr:`~pyg_dist.tasks.supervision.SupervisionEdges.id`) in
epoch :math:`e` under seed :math:`s` is a pure function of
:math:`(s, e, i, k)`, with the counter-based hash of
:mod:`pyg_dist.utils.hashing` (the one shared dropout draws from):

.. math::
    \kappa = \mathrm{mix32}(s \cdot \mathtt{0x9E3779B1} + e), \qquad
    d(j) = \mathrm{mix32}\big((j \cdot \mathtt{0x85EBCA6B} + \kappa) \bmod 2^{32}\big)
    \bmod N

- ``"uniform"`` (as ``negative_sampling``): the pair
  :math:`(d(2m), d(2m + 1))` with :math:`m = i \cdot K + k`;
- ``"structured"`` (as ``structured_negative_sampling``): the pair
  :math:`(u_i, d(m))`, the positive's own source.

The rank that holds positive :math:`i` draws its negatives, so 1, 2 or 4
ranks draw exactly the negatives one process draws. The modulo leaves a
bias of at most :math:`N / 2^{32}` between nodes; ids are keyed by their low
32 bits. With ``reject=True`` a draw that hits an edge of ``exclude`` (the
positives given, by default) is drawn again with the next counter,
:math:`m + LK` (at most ``tries`` times; the last draw is kept).
"""
from __future__ import annotations

import torch
from torch import Tensor

from pyg_dist.utils.hashing import M32, call_key, mix32

__all__ = ["negatives", "KINDS", "draw_nodes"]

#: The kinds of negatives.
KINDS = ("uniform", "structured")


def draw_nodes(counter: Tensor, num_nodes: int, seed: int, epoch: int) -> Tensor:
    """``d(counter)``: a node id in ``[0, num_nodes)`` per counter.

    Args:
        counter (torch.Tensor): int64 counters, any shape.
        num_nodes (int): Nodes of the graph.
        seed (int): The seed.
        epoch (int): The epoch.
    """
    key = call_key(seed, epoch, counter.device)
    return mix32((counter * 0x85EBCA6B + key) & M32) % num_nodes


def negatives(index: Tensor, edge_id: Tensor, num_nodes: int, seed: int, epoch: int,
              kind: str = "uniform", num: int = 1, reject: bool = False,
              exclude: Tensor | None = None, total: int | None = None,
              tries: int = 4) -> Tensor:
    r"""The ``num`` negatives of each positive edge, in epoch ``epoch``.

    Args:
        index (torch.Tensor): ``[2, L]`` global ids of the positive edges.
        edge_id (torch.Tensor): ``[L]`` their positions in the split's whole list.
        num_nodes (int): Nodes of the graph.
        seed (int): The seed.
        epoch (int): The epoch.
        kind (str, optional): ``"uniform"`` or ``"structured"``. (default: :obj:`"uniform"`)
        num (int, optional): Negatives per positive. (default: :obj:`1`)
        reject (bool, optional): Draw again a negative that is an edge of
            ``exclude``. (default: :obj:`False`)
        exclude (torch.Tensor, optional): ``[2, E]`` edges a negative must
            not be, with ``reject``; :obj:`None` for ``index``. Every rank
            must pass the same edges for the draws to agree.
            (default: :obj:`None`)
        total (int, optional): Positive edges of the whole split (what a
            redrawn counter adds); :obj:`None` for ``num_nodes``.
            (default: :obj:`None`)
        tries (int, optional): Draws at most, with ``reject``. (default: :obj:`4`)

    Returns:
        ``[2, L * num]`` the negatives, positive after positive (negative
        :math:`k` of positive :math:`i` at :math:`i \cdot num + k`).
    """
    if kind not in KINDS:
        raise ValueError(f"'negatives' got kind='{kind}'; use one of {', '.join(KINDS)}")
    if num < 1:
        raise ValueError(f"'negatives' got num={num}; draw at least one negative per edge")
    m = (edge_id.to(torch.int64)[:, None] * num
         + torch.arange(num, device=edge_id.device)).view(-1)
    source = index[0].repeat_interleave(num)
    stride = num * (num_nodes if total is None else total)
    known = _edge_keys(index if exclude is None else exclude, num_nodes) if reject else None
    out = _draw(m, source, num_nodes, seed, epoch, kind)
    for attempt in range(1, tries if reject else 1):
        assert known is not None, "rejection knows the true edges"
        hit = torch.isin(_pair_keys(out, num_nodes), known)
        if not bool(hit.any()):
            break
        again = _draw(m[hit] + attempt * stride, source[hit], num_nodes, seed, epoch, kind)
        out[:, hit] = again
    return out


def _draw(m: Tensor, source: Tensor, num_nodes: int, seed: int, epoch: int,
          kind: str) -> Tensor:
    if kind == "uniform":
        return torch.stack([draw_nodes(2 * m, num_nodes, seed, epoch),
                            draw_nodes(2 * m + 1, num_nodes, seed, epoch)])
    return torch.stack([source, draw_nodes(m, num_nodes, seed, epoch)])


def _pair_keys(index: Tensor, num_nodes: int) -> Tensor:
    return index[0].to(torch.int64) * num_nodes + index[1]


def _edge_keys(index: Tensor, num_nodes: int) -> Tensor:
    return torch.unique(_pair_keys(index, num_nodes))
