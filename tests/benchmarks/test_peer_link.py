"""The pieces of benchmarks/peer_link.py on graphs small enough to count by
hand: the recipe's chunks of training edges, its metrics against their
definitions and pyg_dist's, its LightGCN on a subgraph against PyG's on the
whole graph, the figures of a run; with a neighbour sampler, both sides end
to end on two ranks."""
import json
import math
import sys
from pathlib import Path

import pytest
import torch
from torch_geometric.nn.models import LightGCN

BENCHMARKS = str(Path(__file__).resolve().parents[2] / "benchmarks")
# benchmarks/ is on the path only while its modules are imported (and while
# ranks run them): left there, its hetero.py would shadow the tests' hetero
# folder (a module anywhere on the path wins over a namespace package)
sys.path.insert(0, BENCHMARKS)
try:
    import peer_link
    from peer_sampling import INSTALL, sampler_missing
finally:
    sys.path.remove(BENCHMARKS)

from pyg_dist.tasks import hits_at_k, recall_ndcg_at_k  # noqa: E402


def test_each_rank_takes_the_recipes_chunk_of_training_edges():
    edges = torch.stack([torch.arange(10), torch.arange(10) + 100])
    chunks = [peer_link.train_chunk(edges, r, 4) for r in range(4)]
    assert [c[0].tolist() for c in chunks] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert chunks[3][1].tolist() == [106, 107]  # edges 8 and 9, the remainder: no rank's
    with pytest.raises(ValueError, match="3 training edges cannot be split over 4 ranks"):
        peer_link.train_chunk(edges[:, :3], 0, 4)


def test_hits_counts_positives_strictly_above_the_kth_negative():
    pos, neg = torch.tensor([0.9, 0.5, 0.5, 0.1]), torch.tensor([0.8, 0.5, 0.3, 0.3, 0.0])
    assert peer_link.hits_at(pos, neg, 2) == 0.25  # the 2nd negative is 0.5: ties miss
    assert peer_link.hits_at(pos, neg, 3) == 0.75  # the 3rd is 0.3
    assert peer_link.hits_at(pos, neg, 6) == 1.0  # fewer negatives than k
    gen = torch.Generator().manual_seed(0)
    pos, neg = torch.randint(0, 30, (200,), generator=gen), torch.randint(0, 30, (300,),
                                                                            generator=gen)
    assert peer_link.hits_at(pos.float(), neg.float(), 20) == pytest.approx(
        hits_at_k(pos.float(), neg.float(), 20))


def _brute_recall(z, users, exclude, target, k):
    """Recall@k by its definition, one user at a time."""
    items = torch.arange(users, z.size(0))
    total = seen = 0
    for u in range(users):
        wanted = set(target[1, target[0] == u].tolist())
        if not wanted:
            continue
        scores = z[items] @ z[u]
        scores[torch.isin(items, exclude[1, exclude[0] == u])] = float("-inf")
        top = set(items[torch.topk(scores, k).indices].tolist())
        total += len(top & wanted) / len(wanted)
        seen += 1
    return total / seen


def test_recall_is_its_definition_and_pyg_dists():
    users, items, k = 37, 50, 5
    gen = torch.Generator().manual_seed(3)
    z = torch.randn(users + items, 6, generator=gen)
    pairs = torch.stack([torch.randint(0, users, (400,), generator=gen),
                         torch.randint(users, users + items, (400,), generator=gen)])
    pairs = torch.unique(pairs, dim=1)
    exclude, target = pairs[:, ::2], pairs[:, 1::2]
    expected = _brute_recall(z, users, exclude, target, k)
    assert expected > _brute_recall(z, users, exclude[:, :0], target, k) + 0.02  # it matters
    assert peer_link.recall_at(z, users, exclude, target, k, chunk=8) == pytest.approx(expected)
    mine = recall_ndcg_at_k(z, torch.arange(users + items), (exclude[0], exclude[1]), target,
                            users, k)[0]
    assert mine == pytest.approx(expected)


def test_lightgcn_on_the_whole_graph_as_a_subgraph_is_pygs():
    torch.manual_seed(0)
    model = LightGCN(12, 4, 2, alpha=torch.tensor([0.5, 0.3, 0.2]))  # layers told apart
    edge_index = torch.tensor([[0, 1, 1, 2, 5, 7, 7, 11], [1, 0, 2, 1, 7, 5, 11, 7]])
    whole = peer_link.subgraph_embedding(model, torch.arange(12), edge_index)
    assert torch.allclose(whole, model.get_embedding(edge_index), atol=1e-6)
    # a relabelled subgraph of nodes 5, 7, 11 gives their rows
    sub = peer_link.subgraph_embedding(model, torch.tensor([5, 7, 11]),
                                       torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]))
    assert torch.allclose(sub, whole[[5, 7, 11]], atol=1e-6)


def test_the_peers_bpr_loss_is_pygs_recommendation_loss():
    torch.manual_seed(0)
    model = LightGCN(10, 4, 1)
    n_id = torch.tensor([3, 8, 1, 6, 0])
    batch = type("Batch", (), {"n_id": n_id, "edge_index": torch.tensor([[0, 1, 2], [1, 2, 3]]),
                               "src_index": torch.tensor([0, 1]),
                               "dst_pos_index": torch.tensor([1, 2]),
                               "dst_neg_index": torch.tensor([3, 1])})()
    loss = peer_link._peer_loss(peer_link.PeerLink(model, "lightgcn"), batch, "lightgcn")
    z = peer_link.subgraph_embedding(model, n_id, batch.edge_index)
    pos, neg = (z[[0, 1]] * z[[1, 2]]).sum(-1), (z[[0, 1]] * z[[3, 1]]).sum(-1)
    expected = model.recommendation_loss(pos, neg, node_id=n_id[[0, 1, 2, 3]], lambda_reg=1e-4)
    assert torch.allclose(loss, expected, atol=1e-6)


def test_both_sides_start_from_the_same_weights():
    setup = peer_link.GRAPHS["collab"]
    peer = peer_link.build_model(setup, 7, 0).state_dict()
    ours = peer_link.LinkModel(peer_link.build_model(setup, 7, 0)).state_dict()
    assert len(peer) == len(ours) > 0
    for (_, a), (_, b) in zip(peer.items(), ours.items()):
        assert torch.equal(a, b)


def test_a_json_file_takes_a_graphs_rows_in_place_of_its_old_ones(tmp_path):
    path = tmp_path / "peer_link.json"
    peer_link.write_result(path, {"graph": "recommendation", "run": 1})
    peer_link.write_result(path, {"graph": "collab", "run": 1})
    peer_link.write_result(path, {"graph": "recommendation", "run": 2})
    assert json.loads(path.read_text()) == [{"graph": "collab", "run": 1},
                                            {"graph": "recommendation", "run": 2}]
    assert [p.name for p in tmp_path.iterdir()] == ["peer_link.json"]


def test_figures_time_to_the_peers_best_and_the_memory_ratio():
    mb = 2**20
    peer = {"row": peer_link.PEER, "above_floor": [400 * mb, 300 * mb],
            "curve": [{"epoch": 1, "seconds": 10.0, "val": 0.3},
                      {"epoch": 2, "seconds": 30.0, "val": 0.5},
                      {"epoch": 3, "seconds": 40.0, "val": 0.5}]}
    ours = {"row": peer_link.OURS, "above_floor": [100 * mb, 150 * mb],
            "curve": [{"epoch": 5, "seconds": 5.0, "val": 0.4},
                      {"epoch": 10, "seconds": 12.0, "val": 0.55}]}
    ratios = peer_link.figures([peer, ours])
    assert ratios == {"target": 0.5, "time_ratio": 0.4, "rss_ratio": 0.375}
    assert (peer["to_peer_best_s"], ours["to_peer_best_s"], ours["best_val"]) == (30.0, 12.0,
                                                                                   0.55)
    ours["curve"] = ours["curve"][:1]  # never reaches 0.5
    assert "time_ratio" not in peer_link.figures([peer, ours])


@pytest.fixture(scope="module")
def sampler():
    missing = sampler_missing()
    if missing:
        pytest.skip(f"the peer's LinkNeighborLoader needs a neighbour sampler: {INSTALL}")


@pytest.mark.parametrize("name", ["collab", "recommendation"])
def test_both_sides_train_on_two_ranks(sampler, name, tmp_path, monkeypatch):
    """Two epochs each: every peer rank takes len(chunk) // 2048 steps an
    epoch; both sides evaluate every epoch."""
    monkeypatch.syspath_prepend(BENCHMARKS)  # the ranks import peer_link
    import pyg_dist

    args = type("Args", (), {"num_nodes": 1500, "users": 600, "items": 300,
                             "avg_degree": 16.0})()
    split = peer_link.build_split(name, args)
    torch.save(peer_link.peer_graph(split, args.users), tmp_path / "graph.pt")
    pyg_dist.partition(split, 2, tmp_path / "parts")
    setup = peer_link.GRAPHS[name]
    peer = pyg_dist.launch(peer_link.peer_rank, 2, args=(str(tmp_path / "graph.pt"), setup, 2,
                                                         None, 1), timeout=300)
    chunk = split[0].edge_label_index.size(1) // 2
    assert [r["steps"] for r in peer] == [2 * (chunk // peer_link.BATCH_SIZE)] * 2
    assert [p["epoch"] for p in peer[0]["curve"]] == [1, 2]
    ours = pyg_dist.launch(peer_link.ours_rank, 2, args=(str(tmp_path / "parts"), setup, 2,
                                                         None, 1, args.users), timeout=300)
    assert [p["epoch"] for p in ours[0]["curve"]] == [1, 2]
    assert all(not math.isnan(p["val"]) for p in ours[0]["curve"] + peer[0]["curve"])
