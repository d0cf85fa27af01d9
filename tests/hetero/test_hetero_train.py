"""pyg_dist.train.train on a DistHeteroData: the heterogeneous model builders
trained on two ranks end with the weights of a plain single-process PyG loop
on the whole HeteroData; loss and accuracies are the labelled type's; the
ledger's halo bytes are booked; what cannot train a heterogeneous graph is
refused up front, naming what to use instead."""
import pytest
import torch
import torch.nn.functional as F
from tolerances import SAME, assert_close
from torch_geometric.data import HeteroData
from worlds import Battery

import pyg_dist
from pyg_dist.config import Checkpoint, GradientOnly, GradSync, GraphParallel, LayerPipeline
from pyg_dist.datasets import synthetic_mag
from pyg_dist.models.hetero import HETERO_MODELS, hetero_model
from pyg_dist.nn import to_distributed
from pyg_dist.train import train

NUM_NODES, HIDDEN, EPOCHS, LR = 400, 16, 3, 0.5


def build(kind, data):
    return hetero_model(kind, data.metadata(), data["paper"].x.size(1), HIDDEN,
                        int(data["paper"].y.max()) + 1 if hasattr(data, "node_stores")
                        else data.meta.num_classes, "paper", seed=7)


def reference(kind, data):
    """Plain PyG: full-batch SGD on the papers' mean training loss, then the
    accuracies of the last weights."""
    model = build(kind, data)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    paper = data["paper"]
    if kind == "rgcn":
        h = data.to_homogeneous()
        inputs = (h.x, h.edge_index, h.edge_type, h.node_type)
    else:
        inputs = (data.x_dict, data.edge_index_dict)
    for _ in range(EPOCHS):
        optimizer.zero_grad()
        out = model(*inputs)
        F.cross_entropy(out[paper.train_mask], paper.y[paper.train_mask]).backward()
        optimizer.step()
    with torch.no_grad():
        pred = model(*inputs).argmax(-1)
    accs = [float((pred[m] == paper.y[m]).float().mean())
            for m in (paper.train_mask, paper.val_mask, paper.test_mask)]
    return {n: p.detach().clone() for n, p in model.named_parameters()}, accs


def trained(model, data, **kwargs):
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    return train(model, data, EPOCHS, optimizer=optimizer, progress=False, **kwargs)


def weights(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def resumed(folder, ckpt):
    """Four epochs under a stale policy straight, and two then two more from
    the checkpoint of the second (halo state, ledger, optimizer restored)."""
    runs = []
    for epochs, checkpoint in ((4, None), (2, Checkpoint(ckpt, every=1)),
                               (4, Checkpoint(ckpt, every=1, resume=True))):
        data = pyg_dist.DistHeteroData.load(folder)
        model = to_distributed(build("hetero-sage", data))
        result = train(model, data, epochs, strategy=GraphParallel(halo="stale:2"),
                       checkpoint=checkpoint, progress=False)
        runs.append((weights(model), result.halo_bytes))
    return runs[0], runs[2]


def rank_main(folder, ckpt):
    out = {"resume": resumed(folder, ckpt)}
    for kind in HETERO_MODELS:
        data = pyg_dist.DistHeteroData.load(folder)
        model = to_distributed(build(kind, data))
        result = trained(model, data)
        out[kind] = (weights(model), result.history[-1], result.summary())
    data = pyg_dist.DistHeteroData.load(folder)
    stale = trained(to_distributed(build("hetero-sage", data)), data,
                    strategy=GraphParallel(halo="stale:3"))
    out["stale"] = stale.summary()
    data = pyg_dist.DistHeteroData.load(folder)
    try:
        trained(build("hetero-sage", data), data)
    except ValueError as exc:
        out["plain"] = str(exc)
    return out


def prepare(root):
    graph = synthetic_mag(num_nodes=NUM_NODES, seed=1)
    pyg_dist.partition(graph, 2, root / "parts", method="metis", seed=0)
    return (str(root / "parts"), str(root / "ckpt")), None


RANKS = Battery(2, rank_main, prepare, timeout=240)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return RANKS.results(tmp_path_factory)[1]


def test_train_on_two_ranks_equals_single_process_pyg(results):
    graph = synthetic_mag(num_nodes=NUM_NODES, seed=1)
    for kind in HETERO_MODELS:
        weights, accs = reference(kind, graph)
        for rank, res in enumerate(results):
            for n, w in weights.items():
                assert_close(res[kind][0][n], w, what=f"{kind} rank {rank} {n}")
        last, summary = results[0][kind][1], results[0][kind][2]
        assert [last.train_acc, last.val_acc, last.test_acc] == pytest.approx(accs, abs=1e-6)
        assert last.halo_bytes_fwd > 0 and last.halo_bytes_bwd > 0, kind
        assert last.grad_bytes == 2 * 4 * sum(w.numel() for w in weights.values()), kind
        assert summary["halo_bytes"] == results[1][kind][2]["halo_bytes"]
    # one step of staleness 3 reuses the second layer's halo rows: fewer bytes
    exact = results[0]["hetero-sage"][2]
    assert 0 < results[0]["stale"]["halo_bytes_fwd"] < exact["halo_bytes_fwd"]
    assert "to_distributed(model)" in results[0]["plain"]
    for rank, ((straight, straight_bytes), (again, again_bytes)) in enumerate(
            r["resume"] for r in results):
        for n, w in straight.items():
            assert_close(again[n], w, what=f"resumed rank {rank} {n}", tol=SAME)
        assert again_bytes == straight_bytes


def test_train_in_one_process_on_a_heterodata_equals_pyg():
    graph = synthetic_mag(num_nodes=NUM_NODES, seed=1)
    for kind in ("hetero-sage", "rgcn"):
        weights, accs = reference(kind, graph)
        model = build(kind, graph)
        result = trained(model, graph)
        for n, p in model.named_parameters():
            assert_close(p, weights[n], what=f"{kind} {n}")
        last = result.history[-1]
        assert [last.train_acc, last.val_acc, last.test_acc] == pytest.approx(accs, abs=1e-6)


def small_graph(labelled=("paper",)):
    data = HeteroData()
    for t, n in (("paper", 5), ("author", 6)):
        data[t].x = torch.randn(n, 4)
    for t in labelled:
        data[t].y = torch.zeros(data[t].num_nodes, dtype=torch.long)
        data[t].train_mask = torch.ones(data[t].num_nodes, dtype=torch.bool)
    data["author", "writes", "paper"].edge_index = torch.tensor([[0, 1], [1, 2]])
    data["paper", "rev_writes", "author"].edge_index = torch.tensor([[1, 2], [0, 1]])
    return data


@pytest.mark.parametrize("labelled", [(), ("paper", "author")])
def test_train_needs_one_labelled_node_type(labelled):
    data = small_graph(labelled)
    model = hetero_model("hetero-sage", data.metadata(), 4, 8, 2, "paper", seed=0)
    with pytest.raises(ValueError, match="one node type with labels y.*exactly one type"):
        train(model, data, 1, progress=False)


def test_train_needs_the_labelled_types_train_mask():
    data = small_graph()
    del data["paper"].train_mask
    model = hetero_model("hetero-sage", data.metadata(), 4, 8, 2, "paper", seed=0)
    with pytest.raises(ValueError, match=r"data\['paper'\].train_mask"):
        train(model, data, 1, progress=False)


@pytest.mark.parametrize("options, match", [
    ({"strategy": GradientOnly()}, "gradient-only.*GraphParallel"),
    ({"strategy": LayerPipeline(stages=2)}, "layer pipeline.*GraphParallel"),
    ({"strategy": "auto"}, r"GraphParallel\(halo='auto'\)"),
    ({"strategy": GraphParallel(pre_aggregate=True)}, "pre_aggregate off"),
    ({"grad_sync": GradSync("fp16")}, "leave grad_sync out"),
])
def test_strategies_that_cannot_train_a_heterogeneous_graph_are_refused(options, match):
    data = small_graph()
    model = hetero_model("hetero-sage", data.metadata(), 4, 8, 2, "paper", seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=match):
        train(model, data, 1, progress=False, **options)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_a_model_returning_other_rows_is_told_to_return_the_labelled_type():
    data = small_graph()
    model = hetero_model("hetero-sage", data.metadata(), 4, 8, 2, "author", seed=0)
    with pytest.raises(ValueError, match="logits of the labelled type 'paper'"):
        train(model, data, 1, progress=False)


def test_builders_are_deterministic_under_a_seed_and_check_their_arguments():
    data = small_graph()
    for kind in HETERO_MODELS:
        a = hetero_model(kind, data.metadata(), 4, 8, 2, "paper", seed=3)
        b = hetero_model(kind, data.metadata(), 4, 8, 2, "paper", seed=3)
        c = hetero_model(kind, data.metadata(), 4, 8, 2, "paper", seed=4)
        assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
        assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))
    with pytest.raises(ValueError, match="use one of hetero-sage, hgt, rgcn"):
        hetero_model("gcn", data.metadata(), 4, 8, 2, "paper")
    with pytest.raises(ValueError, match="node_type='venue'.*paper, author"):
        hetero_model("hgt", data.metadata(), 4, 8, 2, "venue")
