"""Link prediction in one process: train() on RandomLinkSplit's three graphs
equals plain PyG training step for step; negatives of both kinds; the
strategies that cannot train edges refuse, naming the one that can; the
LightGCN twin keeps PyG's state and outputs."""
import pytest
import torch
from link_cases import EPOCHS, LR, graph, link_split, model, reference
from tolerances import TOL, assert_close
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
