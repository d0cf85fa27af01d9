r"""Link-prediction metrics over the scores of all ranks, none of them
gathering every score on one rank. Each function takes this rank's scores
and is collective (every rank calls it; in one process it is the plain
metric).

- :func:`roc_auc`: :math:`\frac{1}{|P||N|}\sum_{p,n}
  [s_p > s_n] + \tfrac12 [s_p = s_n]`, exact: the scores are sorted across
  the ranks (a sample sort: each rank ends with one range of values, ties
  together) and each positive counts the negatives below it;
- :func:`hits_at_k`: OGB's ``Hits@K``, the fraction of positives scored
  strictly above the :math:`K`-th highest negative of all ranks (1 when
  there are fewer than :math:`K` negatives), from a distributed top-:math:`K`
  (each rank offers its own :math:`K` highest);
- :func:`mrr`: OGB's mean reciprocal rank with per-source negatives: the
  rank of a positive among its own negatives is
  :math:`1 + \tfrac12(\#\{n > p\} + \#\{n \ge p\})` (optimistic and
  pessimistic counts averaged, as ``ogb.linkproppred.Evaluator`` does),
  averaged over the positives of all ranks;
- :func:`recall_ndcg_at_k`: a recommendation's Recall@K and NDCG@K over
  every item, from a distributed top-:math:`K` per user.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pyg_dist.halo.comm import MAX_TAG, exchange_rows
from pyg_dist.runtime import distributed

__all__ = ["roc_auc", "hits_at_k", "mrr", "recall_ndcg_at_k"]

#: The message tag of the metrics' exchanges (evaluation runs no other
#: exchange under it).
_TAG = MAX_TAG
#: Users scored at a time by :func:`recall_ndcg_at_k`: the block of scores is
#: at most this many users times the rank's items (4096 x 5,000 items: 80 MB).
USER_CHUNK = 4096


def roc_auc(pos: Tensor, neg: Tensor) -> float:
    """Global ROC-AUC of positive scores ``pos`` against negative scores
    ``neg`` (nan without a positive or a negative). Collective.

    Args:
        pos (torch.Tensor): ``[A]`` this rank's positive scores.
        neg (torch.Tensor): ``[B]`` this rank's negative scores.
    """
    values = torch.cat([pos, neg]).detach().double().cpu()
    is_pos = torch.cat([torch.ones(pos.numel()), torch.zeros(neg.numel())]).double()
    rows = torch.stack([values, is_pos], 1)
    if distributed.is_distributed():
        rows = _sorted_ranges(rows)
    values, is_pos = rows[:, 0].contiguous(), rows[:, 1] > 0
    negs = torch.sort(values[~is_pos]).values
    below = torch.searchsorted(negs, values[is_pos], right=False).double()
    equal = torch.searchsorted(negs, values[is_pos], right=True).double() - below
    num_neg_here = float(negs.numel())
    before = _count_before(num_neg_here)
    local = float((below + before + 0.5 * equal).sum())
    total, num_pos, num_neg = distributed.all_reduce_values(
        [local, float(is_pos.sum()), num_neg_here]) if distributed.is_distributed() \
        else (local, float(is_pos.sum()), num_neg_here)
    if num_pos == 0 or num_neg == 0:
        return float("nan")
    return total / (num_pos * num_neg)


def _count_before(count: float) -> float:
    """The sum of ``count`` over the ranks before this one."""
    if not distributed.is_distributed():
        return 0.0
    world, rank = distributed.world_size(), distributed.rank()
    mine = [0.0] * world
    mine[rank] = count
    every = distributed.all_reduce_values(mine)
    return float(sum(every[:rank]))


def _sorted_ranges(rows: Tensor) -> Tensor:
    """``rows`` (``[n, 2]`` float64, value first) moved so that rank
    :math:`r` holds the :math:`r`-th range of values of all ranks (equal
    values on one rank); splitters from every rank's quantiles."""
    world, rank = distributed.world_size(), distributed.rank()
    values = torch.sort(rows[:, 0]).values
    picks = (values[torch.linspace(0, values.numel() - 1, world + 1)[1:-1].long()].tolist()
             if values.numel() else [])
    every = sorted(v for mine in distributed.all_gather_objects(picks) for v in mine)
    step = max(1, len(every) // world)
    splitters = torch.tensor(every[step - 1::step][: world - 1], dtype=torch.float64)
    dest = torch.searchsorted(splitters, rows[:, 0].contiguous(), right=False)
    order = torch.argsort(dest, stable=True)
    counts = torch.bincount(dest, minlength=world).tolist()
    here = rows[dest == rank]
    away = order[dest[order] != rank]
    counts[rank] = 0
    ones = [1] * world
    ones[rank] = 0
    sent = torch.tensor([c for q, c in enumerate(counts) if q != rank],
                        dtype=torch.float64).view(-1, 1)
    counted = exchange_rows(sent, ones, ones, tag=_TAG)
    assert isinstance(counted, Tensor), "a synchronous exchange returns a tensor"
    got = counted.view(-1).long().tolist()
    got.insert(rank, 0)
    moved = exchange_rows(rows[away], counts, got, tag=_TAG)
    assert isinstance(moved, Tensor), "a synchronous exchange returns a tensor"
    return torch.cat([moved, here])


def hits_at_k(pos: Tensor, neg: Tensor, k: int) -> float:
    """OGB's Hits@K over all ranks: the fraction of positives scored above
    the :math:`K`-th highest negative. Collective.

    Args:
        pos (torch.Tensor): ``[A]`` this rank's positive scores.
        neg (torch.Tensor): ``[B]`` this rank's negative scores.
        k (int): :math:`K`.
    """
    if k < 1:
        raise ValueError(f"'hits_at_k' got k={k}; use k >= 1")
    top = torch.topk(neg.detach().double().cpu(), min(k, neg.numel())).values.tolist()
    if distributed.is_distributed():
        top = [v for mine in distributed.all_gather_objects(top) for v in mine]
    num_pos = float(pos.numel())
    if len(top) < k:
        above = num_pos
    else:
        kth = sorted(top, reverse=True)[k - 1]
        above = float((pos.detach().double().cpu() > kth).sum())
    if distributed.is_distributed():
        above, num_pos = distributed.all_reduce_values([above, num_pos])
    return above / num_pos if num_pos else float("nan")


def mrr(pos: Tensor, neg: Tensor) -> float:
    """OGB's mean reciprocal rank over all ranks, each positive ranked
    among its own negatives. Collective.

    Args:
        pos (torch.Tensor): ``[A]`` this rank's positive scores.
        neg (torch.Tensor): ``[A, M]`` the scores of each positive's negatives.
    """
    pos, neg = pos.detach().double().cpu().view(-1, 1), neg.detach().double().cpu()
    optimistic = (neg > pos).sum(dim=1).double()
    pessimistic = (neg >= pos).sum(dim=1).double()
    rank = 0.5 * (optimistic + pessimistic) + 1
    local, count = float((1.0 / rank).sum()), float(pos.numel())
    if distributed.is_distributed():
        local, count = distributed.all_reduce_values([local, count])
    return local / count if count else float("nan")


def recall_ndcg_at_k(h: Tensor, global_id: Tensor, train_edges: tuple[Tensor, Tensor],
                     test_edges: Tensor, num_users: int, k: int) -> tuple[float, float]:
    r"""Recall@K and NDCG@K of every user over every item, across the ranks:
    each user's items ranked by :math:`h_u^\top h_i` among all items but
    those it trained on, averaged over the users with test items. Each rank
    scores the users against the items it owns and keeps the :math:`K` best
    per user; the user's owner merges the ranks' :math:`K` best into the
    global top-:math:`K` (no rank holds every score; each rank scores
    ``USER_CHUNK`` users at a time). Every rank receives every user's
    embedding (:math:`U \times F`). Collective.

    Args:
        h (torch.Tensor): ``[N_own, F]`` this rank's embeddings.
        global_id (torch.Tensor): ``[N_own]`` their global ids (users are
            ``0 .. num_users - 1``, items the rest).
        train_edges (tuple): ``(user, item)`` global ids of the training
            interactions whose item this rank owns (excluded from ranking;
            other pairs are ignored).
        test_edges (torch.Tensor): ``[2, T]`` (user, item) held-out
            interactions of the users this rank owns.
        num_users (int): Users.
        k (int): :math:`K`.
    """
    if k < 1:
        raise ValueError(f"'recall_ndcg_at_k' got k={k}; use k >= 1")
    h, global_id = h.detach().float().cpu(), global_id.cpu()
    is_user = global_id < num_users
    users_here = global_id[is_user]
    blocks = [(users_here, h[is_user])]
    if distributed.is_distributed():
        blocks = distributed.all_gather_objects((users_here, h[is_user]))
    users = torch.cat([b[0] for b in blocks])
    user_rows = torch.cat([b[1] for b in blocks])
    items, item_rows = global_id[~is_user], h[~is_user]
    slot_user = torch.full((num_users,), -1, dtype=torch.long)
    slot_user[users] = torch.arange(users.numel())
    slot_item = torch.full((int(global_id.max()) + 1 if global_id.numel() else 0,), -1,
                           dtype=torch.long)
    slot_item[items] = torch.arange(items.numel())
    u, i = train_edges[0].cpu(), train_edges[1].cpu()
    mine = (u < num_users) & (i >= num_users)
    row, col = slot_user[u[mine]], slot_item[i[mine]]
    values, indices = [], []
    for lo in range(0, users.numel(), USER_CHUNK):  # a block of users at a time
        scores = user_rows[lo:lo + USER_CHUNK] @ item_rows.t()  # [B, I_own]
        here = (row >= lo) & (row < lo + USER_CHUNK)
        scores[row[here] - lo, col[here]] = float("-inf")
        top = torch.topk(scores, min(k, items.numel()), dim=1)
        values.append(top.values)
        indices.append(top.indices)
    width = min(k, items.numel())
    top_values = torch.cat(values) if values else user_rows.new_empty(0, width)
    top_items = items[torch.cat(indices)] if indices else items.new_empty(0, width)
    offers = [(users, top_values, top_items)]
    if distributed.is_distributed():
        offers = distributed.all_gather_objects(offers[0])
    return _merge(offers, users_here, test_edges.cpu(), num_users, k)


def _merge(offers: list[tuple[Tensor, Tensor, Tensor]], users_here: Tensor, test: Tensor,
           num_users: int, k: int) -> tuple[float, float]:
    """Each of this rank's users' global top-K from every rank's K best,
    scored against its test items; the sums over all ranks' users."""
    values = torch.cat([_rows_of(o[0], o[1], users_here, num_users, float("-inf"))
                        for o in offers], 1)
    ids = torch.cat([_rows_of(o[0], o[2], users_here, num_users, -1) for o in offers], 1)
    best = torch.topk(values, min(k, values.size(1)), dim=1)
    ranked = ids.gather(1, best.indices)
    ranked[best.values == float("-inf")] = -1
    slot = torch.full((num_users,), -1, dtype=torch.long)
    slot[users_here] = torch.arange(users_here.numel())
    rows = slot[test[0]]
    hit = torch.zeros(users_here.numel(), ranked.size(1))
    hit.index_add_(0, rows, (ranked[rows] == test[1].view(-1, 1)).float())
    counts = torch.bincount(rows, minlength=users_here.numel()).float()
    has = counts > 0
    discount = 1.0 / torch.log2(torch.arange(ranked.size(1), dtype=torch.float) + 2)
    dcg = (hit * discount).sum(1)
    ideal = torch.cumsum(discount, 0)
    idcg = ideal[(counts.clamp(max=ranked.size(1)) - 1).clamp(min=0).long()]
    recall = float((hit.sum(1)[has] / counts[has]).sum())
    ndcg = float((dcg[has] / idcg[has]).sum())
    seen = float(has.sum())
    if distributed.is_distributed():
        recall, ndcg, seen = distributed.all_reduce_values([recall, ndcg, seen])
    if seen == 0:
        return float("nan"), float("nan")
    return recall / seen, ndcg / seen


def _rows_of(users: Tensor, rows: Tensor, wanted: Tensor, num_users: int,
             fill: float) -> Tensor:
    """The rows of ``rows`` (one per user of ``users``) of the users ``wanted``."""
    slot = torch.full((num_users,), -1, dtype=torch.long)
    slot[users] = torch.arange(users.numel())
    out = torch.full((wanted.numel(), rows.size(1)), fill, dtype=rows.dtype)
    at = slot[wanted]
    present = at >= 0
    out[present] = rows[at[present]]
    return out
