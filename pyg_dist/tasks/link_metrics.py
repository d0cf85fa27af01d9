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
#: Users and items scored at a time by :func:`recall_ndcg_at_k`: a block of
#: scores is at most USER_CHUNK x ITEM_CHUNK floats (16 MB), whatever the graph.
USER_CHUNK = 1024
ITEM_CHUNK = 4096


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
                     test_edges: Tensor, num_users: int, k: int, user_chunk: int = USER_CHUNK,
                     item_chunk: int = ITEM_CHUNK) -> tuple[float, float]:
    r"""Recall@K and NDCG@K of every user over every item, across the ranks:
    each user's items ranked by :math:`h_u^\top h_i` among all items but
    those it trained on (equal scores by item id, the lowest first), averaged
    over the users with test items. Each rank scores every user against the
    items it owns, a block of ``user_chunk`` users times ``item_chunk`` items
    at a time, and keeps the :math:`K` best of each user from block to
    block; each user's owner then merges the ranks' :math:`K` best into the
    global top-:math:`K`. No rank holds more scores than one block; every
    rank receives every user's embedding (:math:`U \times F`) and its own
    users' offers from every rank (:math:`P \times U_{own} \times K`).
    Collective.

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
        user_chunk (int, optional): Users scored at a time.
            (default: :obj:`1024`)
        item_chunk (int, optional): Items scored at a time.
            (default: :obj:`4096`)
    """
    if k < 1:
        raise ValueError(f"'recall_ndcg_at_k' got k={k}; use k >= 1")
    for name, value in (("user_chunk", user_chunk), ("item_chunk", item_chunk)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"'recall_ndcg_at_k' got {name}={value!r}; pass an int >= 1 "
                             f"(scored at a time)")
    h, global_id = h.detach().float().cpu(), global_id.cpu()
    is_user = global_id < num_users
    users_here = global_id[is_user]
    users, user_rows, counts = _every_user(users_here, h[is_user])
    items, order = torch.sort(global_id[~is_user])  # columns in id order: ties by id
    item_rows = h[~is_user][order]
    excluded = _excluded(train_edges, users, items, num_users)
    values, ids = _top_k(user_rows, item_rows, items, excluded, k, user_chunk, item_chunk)
    values, ids = _at_owners(values, ids, counts, k)
    return _scored(values, ids, users_here, test_edges.cpu(), num_users)


def _every_user(users_here: Tensor, rows_here: Tensor) -> tuple[Tensor, Tensor, list[int]]:
    """Every rank's users (global ids) and their rows, in rank order, and
    how many each rank owns."""
    if not distributed.is_distributed():
        return users_here, rows_here, [users_here.numel()]
    world, rank = distributed.world_size(), distributed.rank()
    counts = [int(c) for c in distributed.all_gather_objects(users_here.numel())]
    out = [counts[rank] if q != rank else 0 for q in range(world)]  # own rows to every peer
    into = [c if q != rank else 0 for q, c in enumerate(counts)]
    got_ids, got_rows = (exchange_rows(t.repeat(world - 1, 1), out, into, tag=_TAG)
                         for t in (users_here.view(-1, 1), rows_here))
    assert isinstance(got_ids, Tensor) and isinstance(got_rows, Tensor), "synchronous exchanges"
    before = sum(counts[:rank])
    users = torch.cat([got_ids[:before].view(-1), users_here, got_ids[before:].view(-1)])
    rows = torch.cat([got_rows[:before], rows_here, got_rows[before:]])
    return users, rows, counts


def _excluded(train_edges: tuple[Tensor, Tensor], users: Tensor, items: Tensor,
              num_users: int) -> tuple[Tensor, Tensor]:
    """The (row of ``users``, column of ``items``) of each training
    interaction between a user and an item of this rank, by row then column."""
    u, i = train_edges[0].cpu(), train_edges[1].cpu()
    keep = (u >= 0) & (u < num_users) & (i >= num_users)
    u, i = u[keep], i[keep]
    slot = torch.full((num_users,), -1, dtype=torch.long)
    slot[users] = torch.arange(users.numel())
    col = torch.searchsorted(items, i)
    found = col < items.numel()
    found[found.clone()] = items[col[found]] == i[found]
    row, col = slot[u[found]], col[found]
    row, col = row[row >= 0], col[row >= 0]
    order = torch.argsort(row * max(items.numel(), 1) + col)
    return row[order], col[order]


def _top_k(user_rows: Tensor, item_rows: Tensor, items: Tensor, excluded: tuple[Tensor, Tensor],
           k: int, user_chunk: int, item_chunk: int) -> tuple[Tensor, Tensor]:
    """``[U, k]`` each user's best scores against this rank's items and
    their ids (``-inf`` and ``-1`` past the items there are), the
    ``excluded`` pairs left out, scored ``user_chunk x item_chunk`` at a time.

    Args:
        user_rows (torch.Tensor): ``[U, F]`` the users' embeddings.
        item_rows (torch.Tensor): ``[I, F]`` the items', by id.
        items (torch.Tensor): ``[I]`` the items' global ids, ascending.
        excluded (tuple): ``([E], [E])`` the user row and item column of
            each pair left out, by row.
        k (int): Items kept per user.
        user_chunk (int): Users of a block.
        item_chunk (int): Items of a block.
    """
    num = user_rows.size(0)
    values = torch.full((num, k), float("-inf"))
    ids = torch.full((num, k), -1, dtype=torch.long)
    row, col = excluded
    starts = torch.arange(0, num + user_chunk, user_chunk)
    bounds = torch.searchsorted(row, starts).tolist()
    for b, lo in enumerate(starts[:-1].tolist()):
        hi = min(lo + user_chunk, num)
        brow, bcol = row[bounds[b]:bounds[b + 1]] - lo, col[bounds[b]:bounds[b + 1]]
        for ilo in range(0, items.numel(), item_chunk):
            ihi = min(ilo + item_chunk, items.numel())
            scores = user_rows[lo:hi] @ item_rows[ilo:ihi].t()  # [hi - lo, ihi - ilo]
            here = (bcol >= ilo) & (bcol < ihi)
            scores[brow[here], bcol[here] - ilo] = float("-inf")
            best, column = _block_best(scores, k)
            values[lo:hi], ids[lo:hi] = _best(torch.cat([values[lo:hi], best], 1),
                                              torch.cat([ids[lo:hi], items[ilo + column]], 1),
                                              k)
    return values, ids


def _block_best(scores: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The ``min(k, columns)`` best of each row of ``scores`` and their
    columns: highest first, equal scores by column, the lowest first (a
    row whose equal scores straddle the cut is sorted whole)."""
    top = torch.topk(scores, min(k, scores.size(1)), dim=1)
    values, columns = _best(top.values, top.indices, k)
    kth = values[:, -1:]
    straddles = ((kth > float("-inf"))
                 & ((scores == kth).sum(1, keepdim=True) > (values == kth).sum(1, keepdim=True)))
    rows = straddles.view(-1).nonzero().view(-1)
    if rows.numel():
        whole = torch.sort(scores[rows], dim=1, descending=True, stable=True)
        values[rows] = whole.values[:, :values.size(1)]
        columns[rows] = whole.indices[:, :values.size(1)]
    return values, columns


def _best(values: Tensor, ids: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The ``k`` best of each row: highest value first, equal values by id,
    the lowest first."""
    by_id = torch.argsort(ids, dim=1, stable=True)
    values, ids = values.gather(1, by_id), ids.gather(1, by_id)
    order = torch.sort(values, dim=1, descending=True, stable=True).indices[:, :k]
    return values.gather(1, order), ids.gather(1, order)


def _at_owners(values: Tensor, ids: Tensor, counts: list[int], k: int) -> tuple[Tensor, Tensor]:
    """This rank's users' global top-``k`` from every rank's ``k`` best of
    every user (rows of all users in rank order, ``counts`` a rank): each
    rank sends each user's offer to its owner only."""
    if not distributed.is_distributed():
        return values, ids
    world, rank = distributed.world_size(), distributed.rank()
    lo = sum(counts[:rank])
    hi = lo + counts[rank]
    rows = torch.cat([values.double(), ids.double()], 1)  # ids < 2**53: exact
    out = [c if q != rank else 0 for q, c in enumerate(counts)]  # each user's to its owner
    into = [counts[rank] if q != rank else 0 for q in range(world)]
    got = exchange_rows(torch.cat([rows[:lo], rows[hi:]]), out, into, tag=_TAG)
    assert isinstance(got, Tensor), "a synchronous exchange returns a tensor"
    offers = torch.cat([got.view(world - 1, counts[rank], 2 * k), rows[lo:hi].unsqueeze(0)])
    every_values = offers[:, :, :k].permute(1, 0, 2).reshape(counts[rank], world * k)
    every_ids = offers[:, :, k:].permute(1, 0, 2).reshape(counts[rank], world * k).long()
    best, best_ids = _best(every_values.float(), every_ids, k)
    return best, best_ids


def _scored(values: Tensor, ids: Tensor, users_here: Tensor, test: Tensor,
            num_users: int) -> tuple[float, float]:
    """Recall and NDCG of this rank's users' top items (``-inf``: no
    item) against their test items, averaged over the users of all ranks
    that have test items."""
    ranked = ids.clone()
    ranked[values == float("-inf")] = -1
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
