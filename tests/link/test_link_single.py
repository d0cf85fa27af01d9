"""Link prediction in one process: train() on RandomLinkSplit's three graphs
equals plain PyG training step for step; negatives of both kinds; the
strategies that cannot train edges refuse, naming the one that can; the
LightGCN twin keeps PyG's state and outputs; MRR among a split's own
per-source negatives, and a recommendation's recall@K."""
import math

import pytest
import torch
from link_cases import EPOCHS, LR, brute_recall_ndcg, graph, link_split, model, reference
from tolerances import TOL, assert_close
from torch_geometric.data import Data
from torch_geometric.nn.models import LightGCN

from pyg_dist.config import FeatureParallel, GradientOnly, LayerPipeline
from pyg_dist.datasets import synthetic_recommendation
from pyg_dist.nn import DistLGConv, DistLightGCN, to_distributed
from pyg_dist.strategies.link_task import LinkTask
from pyg_dist.tasks.negatives import negatives
from pyg_dist.train import train


@pytest.mark.parametrize("kind,undirected", [("gcn-dot", True), ("sage-mlp", False)])
def test_train_on_a_link_split_equals_pyg(kind, undirected):
    split = link_split(graph(undirected=undirected), undirected)
    losses, grads, state, aucs = reference(kind, split)
    net = model(kind, split[0].x.size(1))
    result = train(net, split, EPOCHS, optimizer=torch.optim.Adam(net.parameters(), lr=LR),
                   progress=False)
    assert [s.loss for s in result.history] == pytest.approx(losses, rel=TOL[torch.float32])
    for name, p in net.named_parameters():
        assert_close(p.grad, grads[name], what=f"grad {name}")
        assert_close(p.detach(), state[name], what=f"weight {name}")
    assert result.history[-1].val_acc == pytest.approx(aucs["val"], abs=1e-6)
    assert result.history[-1].test_acc == pytest.approx(aucs["test"], abs=1e-6)


@pytest.mark.parametrize("kind", ["sage-mlp", "lightgcn"])
def test_pairs_scored_in_chunks_train_as_in_one(kind):
    """BCE with the MLP decoder and BPR with two negatives each: pairs scored
    7 at a time (recomputed in the backward) give one chunk's losses,
    gradients and weights, and the same evaluation."""
    split = link_split(graph(undirected=kind == "lightgcn"), kind == "lightgcn")
    light = kind == "lightgcn"
    runs = []
    for chunk in (1 << 20, 7):
        net = model(kind, split[0].num_nodes if light else split[0].x.size(1))
        net = to_distributed(net) if light else net  # its embeddings, not PyG's scores
        task = LinkTask(split, negatives="structured" if light else "uniform",
                        num_negatives=2 if light else 1, loss="bpr" if light else "bce",
                        features=not light, pair_chunk=chunk)
        result = train(net, task, EPOCHS, optimizer=torch.optim.Adam(net.parameters(), lr=LR),
                       progress=False)
        runs.append((result, net))
    (one, net_one), (chunked, net_chunked) = runs
    assert task.splits["train"].num_edges > 7 * 3, "more than a few chunks"
    assert [s.loss for s in chunked.history] == pytest.approx(
        [s.loss for s in one.history], rel=TOL[torch.float32])
    for (name, p), q in zip(net_chunked.named_parameters(), net_one.parameters()):
        assert_close(p.grad, q.grad, what=f"grad {name}")
        assert_close(p.detach(), q.detach(), what=f"weight {name}")
    assert chunked.history[-1].val_acc == pytest.approx(one.history[-1].val_acc, abs=1e-6)


def test_pair_chunk_must_be_a_positive_int():
    split = link_split(graph(), True)
    with pytest.raises(ValueError, match="pair_chunk=0; pass an int >= 1"):
        LinkTask(split, pair_chunk=0)


def test_negatives_by_hand():
    index = torch.tensor([[0, 3, 5], [1, 4, 2]])
    ids = torch.tensor([0, 1, 2])
    uniform = negatives(index, ids, 7, seed=1, epoch=2, num=2)
    # one edge asked alone draws what it draws among the others: keyed on its id
    assert torch.equal(negatives(index[:, 1:2], ids[1:2], 7, 1, 2, num=2), uniform[:, 2:4])
    assert not torch.equal(negatives(index, ids, 7, 1, 3, num=2), uniform)  # epochs differ
    structured = negatives(index, ids, 7, 1, 2, kind="structured", num=2)
    assert torch.equal(structured[0], torch.tensor([0, 0, 3, 3, 5, 5]))
    assert int(uniform.max()) < 7 and int(structured.min()) >= 0


def test_rejection_draws_again_until_no_true_edge():
    index = torch.tensor([[0, 1], [1, 0]])
    # on 2 nodes every draw is one of 4 pairs; those that hit a true edge are drawn again
    plain = negatives(index, torch.tensor([0, 1]), 2, 0, 1, num=8)
    kept = negatives(index, torch.tensor([0, 1]), 2, 0, 1, num=8, reject=True, tries=16)
    hit = lambda e: ((e[0] == 0) & (e[1] == 1)) | ((e[0] == 1) & (e[1] == 0))  # noqa: E731
    assert bool(hit(plain).any()), "the case must draw true edges without rejection"
    assert not bool(hit(kept).any())


def test_structured_task_keeps_the_source():
    split = link_split(graph(), True)
    task = LinkTask(split, negatives="structured", num_negatives=2).for_epoch(4)
    edges = task.edges("train")
    pos = split[0].edge_label_index
    neg = edges.index[:, edges.label == 0]
    assert torch.equal(neg[0], pos[0].repeat_interleave(2))


@pytest.mark.parametrize("strategy", [GradientOnly(), LayerPipeline(), FeatureParallel()])
def test_strategies_that_cannot_train_edges_refuse(strategy):
    split = link_split(graph(), True)
    net = model("gcn-dot", split[0].x.size(1))
    with pytest.raises(ValueError, match=r"cannot train link prediction: .*; train it with "
                                         r"strategy=GraphParallel\(halo=\.\.\.\) \(CLI: "
                                         r"--strategy graph-parallel, --strategy auto\)"):
        train(net, split, 1, strategy=strategy, progress=False)


def test_lightgcn_twin_keeps_pyg_state_and_output():
    split = synthetic_recommendation(20, 15, seed=3)
    ei = split[0].edge_index
    torch.manual_seed(0)
    plain = LightGCN(split[0].num_nodes, 4, 2)
    twin = DistLightGCN(split[0].num_nodes, 4, 2)
    twin.load_state_dict(plain.state_dict())
    assert all(isinstance(c, DistLGConv) for c in twin.convs)
    assert torch.equal(twin(ei), plain.get_embedding(ei))  # embeddings without pairs
    pairs = split[0].edge_label_index
    assert torch.equal(twin(ei, pairs), plain(ei, pairs))  # PyG's scores with them
    converted = to_distributed(plain)
    assert type(converted) is DistLightGCN and converted.state_dict().keys() == \
        twin.state_dict().keys()
    with pytest.raises(ValueError, match="convert the model first with "
                                         "pyg_dist.nn.to_distributed"):
        train(LightGCN(split[0].num_nodes, 4, 2), split, 1, progress=False)


def test_a_cut_lightgcn_loads_pyg_state_as_its_rows(tmp_path):
    from pyg_dist.loop import save_model
    from pyg_dist.nn.owned import owned_parameters

    torch.manual_seed(0)
    ref = LightGCN(12, 4, 2)
    net = DistLightGCN(12, 4, 2)
    weight = net.embedding.weight
    gid = torch.tensor([7, 2, 9])
    net.own(gid)
    assert net.embedding.weight is weight and weight.shape == (3, 4)
    assert owned_parameters(net) == {id(weight)}
    net.load_state_dict(ref.state_dict())
    assert torch.equal(net.embedding.weight, ref.embedding.weight[gid])
    with pytest.raises(ValueError, match="holds each rank's own rows of its embedding table; "
                                         r"write every node's embedding with "
                                         r"pyg_dist.save_embeddings\(model, data, folder\)"):
        save_model(net, tmp_path / "model.pt")
    assert not list(tmp_path.iterdir())


def test_mrr_ranks_among_a_split_s_own_negatives_where_it_holds_them():
    # OGB's citation2 layout: negatives m of positive i at P + i * M + m, its source theirs
    torch.manual_seed(0)
    x = torch.randn(6, 3)
    data = Data(x=x, edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]), num_nodes=6)
    pos = torch.tensor([[0, 4], [2, 5]])
    neg = torch.tensor([[0, 1], [0, 2], [0, 3], [2, 0], [2, 1], [2, 4]])
    split_edge = {"train": {"edge": torch.tensor([[0, 1], [1, 2]])},
                  "valid": {"edge": pos, "edge_neg": neg},
                  "test": {"edge": pos, "edge_neg": neg.flip(0)}}  # sources no longer theirs
    task = LinkTask((data, split_edge), metric="mrr", eval_negatives=4)
    both, per = task.own_negatives("val")
    assert per == 3 and torch.equal(both.index[:, :2], pos.t())
    assert task.own_negatives("test") is None and task.own_negatives("train") is None
    net = model("gcn-dot", 3)
    net.eval()
    with torch.no_grad():
        z = net(x, data.edge_index)
    score = lambda e: (z[e[:, 0]] * z[e[:, 1]]).sum(-1)  # noqa: E731
    s_pos, s_neg = score(pos).view(2, 1), score(neg).view(2, 3)
    rank = 1 + ((s_neg > s_pos).sum(1) + (s_neg >= s_pos).sum(1)).double() / 2
    _, val, _ = task.evaluate(net)
    assert val == pytest.approx(float((1 / rank).mean()))


def test_recall_metric_ranks_items_for_users_and_refuses_other_graphs():
    split = synthetic_recommendation(30, 20, avg_degree=3, seed=2)
    task = LinkTask(split, negatives="structured", loss="bpr", features=False,
                    metric="recall@5")
    assert task.num_users == 30
    torch.manual_seed(0)
    net = to_distributed(LightGCN(50, 4, 2))
    train_acc, val, test = task.evaluate(net)
    with torch.no_grad():
        z = net(split[0].edge_index)
    ref_val = brute_recall_ndcg(z, (split[0], None, split[1]), users=30, k=5)
    ref_test = brute_recall_ndcg(z, split, users=30, k=5)
    assert math.isnan(train_acc)
    assert (val, test) == (pytest.approx(ref_val[0]), pytest.approx(ref_test[0]))
    assert task.ranking(z, "test", 5) == (pytest.approx(ref_test[0]),
                                          pytest.approx(ref_test[1]))
    with pytest.raises(ValueError, match=r"ranks items for users, but the supervision edges "
                                         r"do not all go from a user \(ids 0 to 39\) to an item "
                                         r"\(ids 40 to 49\): sources reach 29, targets start "
                                         r"at 30; pass a user-item graph"):
        LinkTask(split, features=False, metric="recall@5", num_users=40)
    with pytest.raises(ValueError, match="use 'auc', 'mrr', 'hits@K' or 'recall@K'"):
        LinkTask(split, features=False, metric="recall@0")
