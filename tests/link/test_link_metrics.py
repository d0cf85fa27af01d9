"""Link metrics against counts made by hand (link_cases.POS/NEG, MRR_*): in
one process, and with the scores spread over 2 and 3 ranks (every rank holds
every world-th score; no rank sees them all)."""
import math

import pytest
import torch
from link_cases import (
    RANKING,
    USERS,
    brute_recall_ndcg,
    hand_hits_mrr,
    hand_ranking,
    metrics,
    recommended_recall_ndcg,
)

from pyg_dist.tasks import hits_at_k, mrr, recall_ndcg_at_k, roc_auc

# pos 0.9 beats 5 negatives, each 0.5 beats 3 and ties 1 (3.5), 0.1 beats 1:
# (5 + 3.5 + 3.5 + 1) / (4 * 5)
AUC = 13 / 20
# K-th highest negative: 0.8, 0.5, 0.3; positives strictly above it:
# {0.9}, {0.9} (the 0.5s tie: not above), {0.9, 0.5, 0.5}; K=6 > 5 negatives: 1
HITS = {"hits@1": 0.25, "hits@2": 0.25, "hits@3": 0.75, "hits@6": 1.0}
# ranks: 1 + (#neg > pos + #neg >= pos) / 2 = 1 + (1 + 2) / 2, 1 + (1 + 2) / 2, 1
MRR = (1 / 2.5 + 1 / 2.5 + 1) / 3
HAND = {"auc": AUC, **HITS, "mrr": MRR}


def test_hand_counted_in_one_process():
    assert metrics() == pytest.approx(HAND, abs=1e-12)


def test_hand_counted_across_ranks(world):
    size, _, _, results = world
    for rank, r in enumerate(results):
        assert r[0] == pytest.approx(HAND, abs=1e-12), f"rank {rank} of {size}"


def test_degenerate_inputs():
    assert math.isnan(roc_auc(torch.tensor([0.3]), torch.tensor([])))
    assert roc_auc(torch.tensor([0.2, 0.2]), torch.tensor([0.2])) == 0.5
    assert mrr(torch.tensor([1.0]), torch.tensor([[1.0, 1.0]])) == pytest.approx(1 / 2)
    with pytest.raises(ValueError, match="'hits_at_k' got k=0; use k >= 1"):
        hits_at_k(torch.tensor([1.0]), torch.tensor([0.0]), 0)


def test_recall_and_ndcg_over_every_item_equal_the_definitions(world):
    """At once and in blocks of 7 users x 13 items, on every rank."""
    size, cases, refs, results = world
    c = [case["kind"] for case in cases].index("lightgcn")
    _, split, (_, grads, _, _) = refs[c]
    recall, ndcg = brute_recall_ndcg(grads["embeddings"], split)
    assert 0 < recall < 1 and 0 < ndcg < 1, "the case must rank some test items, not all"
    for rank, r in enumerate(results):
        got = r[c + 1]["recall_ndcg"]
        assert got["whole"] == pytest.approx((recall, ndcg), abs=1e-5), f"rank {rank} of {size}"
        assert got["blocks"] == got["whole"], f"rank {rank} of {size}"


def test_ties_rank_by_item_id_in_one_process():
    assert hand_ranking() == pytest.approx(RANKING, abs=1e-7)
    assert hand_ranking(user_chunk=1, item_chunk=2) == hand_ranking()


def test_ties_rank_by_item_id_across_ranks(world):
    size, _, _, results = world
    for rank, r in enumerate(results):
        assert r[-1]["whole"] == pytest.approx(RANKING, abs=1e-7), f"rank {rank} of {size}"
        assert r[-1]["blocks"] == r[-1]["whole"], f"rank {rank} of {size}"


@pytest.mark.parametrize("user_chunk,item_chunk", [(7, 13), (1, 1), (100, 7), (60, 40)])
def test_recall_and_ndcg_in_blocks_are_pygs_recommend(user_chunk, item_chunk):
    """Blocks that do not divide the 60 users or the 40 items rank as one
    block does, and as PyG's LightGCN.recommend."""
    from torch_geometric.nn.models import LightGCN

    from pyg_dist.datasets import synthetic_recommendation

    split = synthetic_recommendation(USERS, 40, avg_degree=4, seed=0)
    torch.manual_seed(0)
    net = LightGCN(split[0].num_nodes, 4, 2)
    expected = recommended_recall_ndcg(net, split, k=8)
    assert 0.05 < expected[0] < 0.95 and 0.05 < expected[1] < 0.95, "rank some, not all"
    with torch.no_grad():
        z = net.get_embedding(split[0].edge_index)
    train = split[0].edge_label_index
    args = (z, torch.arange(z.size(0)), (train[0], train[1]), split[2].edge_label_index,
            USERS, 8)
    whole = recall_ndcg_at_k(*args, user_chunk=10**6, item_chunk=10**6)
    assert whole == pytest.approx(expected, abs=1e-6)
    assert recall_ndcg_at_k(*args, user_chunk=user_chunk, item_chunk=item_chunk) == whole


def test_recall_and_ndcg_refuse_empty_blocks():
    z, ids = torch.ones(3, 1), torch.arange(3)
    pairs = (torch.tensor([0]), torch.tensor([2]))
    with pytest.raises(ValueError, match=r"'recall_ndcg_at_k' got item_chunk=0; pass an int "
                                         r">= 1 \(scored at a time\)"):
        recall_ndcg_at_k(z, ids, pairs, torch.tensor([[0], [1]]), 1, 1, item_chunk=0)


def test_trained_models_hits_and_mrr_equal_the_definitions(world):
    size, cases, refs, results = world
    for c, (case, (_, split, (_, grads, _, _))) in enumerate(zip(cases, refs)):
        if case["kind"] == "lightgcn":
            continue
        hits, mrr_value = hand_hits_mrr(case["kind"], grads["decoder"], grads["embeddings"],
                                        split)
        assert 0 < hits < 1 and 0 < mrr_value < 1, "the case must rank, not all or nothing"
        for rank, r in enumerate(results):
            assert r[c + 1]["hits@3"][1] == pytest.approx(hits, abs=1e-6), (case["kind"], rank)
            assert r[c + 1]["mrr"][1] == pytest.approx(mrr_value, abs=1e-6), (case["kind"], rank)
