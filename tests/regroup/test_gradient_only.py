"""``train(mode="gradient-only")`` on real gloo ranks: no halo traffic in
training, gradients and regroups booked, shrinkage 1 of the batch weights is
no correction, a resumed run ends with the uninterrupted weights; and the
errors that name the fix."""
import pytest
import torch
from graphs import awkward_graph

import pyg_dist
from pyg_dist.halo import Stale

EPOCHS = 6


class Interrupted(Exception):
    pass


def _train(parts, kind="gcn", ckpt=None, fail_at=None, resume=False, **options):
    from pyg_dist.models import GNN
    from pyg_dist.train import train

    data = pyg_dist.DistData.load(parts)
    torch.manual_seed(0)
    model = GNN(kind, data.x.size(1), 16, 3, dropout=0.0)

    def stop(stats):
        if stats.epoch == fail_at:
            raise Interrupted

    try:
        result = train(model, data, epochs=EPOCHS, progress=False, mode="gradient-only",
                       regroup_every=2, checkpoint=ckpt, checkpoint_every=2 if ckpt else 0,
                       resume=resume, callback=stop, **options)
    except Interrupted:
        return None
    return {
        "summary": result.summary(),
        "regroups": [r["step"] for r in data.ledger.rows() if r["direction"] == "regroup"],
        "regroup rows": [r for r in data.ledger.rows() if r["direction"] == "regroup"],
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "numel": sum(p.numel() for p in model.parameters()),
    }


def body(parts, ckpt):
    out = {c: _train(parts, correction=c) for c in ("node", "batch", "none")}
    out["batch, shrinkage 1"] = _train(parts, correction="batch", shrinkage=1.0)
    out["random"] = _train(parts, regroup="random")
    out["random, peers"] = _train(parts, regroup="random", regroup_from="peers")
    out["home"] = _train(parts, regroup="home")
    out["node, peers"] = _train(parts, regroup_from="peers")
    out["covap"] = _train(parts, correction="batch", grad_compress="covap:2")
    _train(parts, ckpt=ckpt, fail_at=5)
    out["resumed"] = _train(parts, ckpt=ckpt, resume=True)
    try:
        _train(parts, kind="gat", correction="node")
    except ValueError as error:
        out["gat error"] = str(error)
    out["sage batch"] = _train(parts, kind="sage", correction="batch")
    out["sage node"] = _train(parts, kind="sage", correction="node")
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("gradient_only")
    pyg_dist.partition(awkward_graph(num_nodes=200, num_edges=1200, num_features=12), 2,
                       root / "parts", clusters_per_part=3)
    return pyg_dist.launch(body, 2, args=(str(root / "parts"), str(root / "ckpt")),
                           timeout=600)


def test_only_gradients_cross_in_training(results):
    for res in results:
        for name in ("node", "batch", "none", "random", "home", "sage batch", "sage node"):
            run = res[name]["summary"]
            assert run["halo_bytes_fwd"] == 0 and run["halo_bytes_bwd"] == 0, name
            assert run["halo_bytes_eval"] > 0  # evaluation stays exact, on the full graph
            assert run["grad_bytes"] == EPOCHS * 2 * 4 * res[name]["numel"], name
        covap = res["covap"]["summary"]
        assert covap["grad_bytes"] == EPOCHS * 2 * 4 * res["covap"]["numel"] // 2


def test_regroups_every_period_and_books_it(results):
    for res in results:
        assert res["node"]["regroups"] == [0, 2, 4]  # epochs 1, 3, 5 load new clusters
        assert res["node"]["summary"]["regroup_seconds"] > 0


def test_clusters_moved_between_ranks_train_as_clusters_read_again(results):
    for res in results:
        for name in ("node", "random"):
            moved = res[f"{name}, peers"]
            for key, value in res[name]["state"].items():
                assert torch.equal(moved["state"][key], value), (name, key)
            rows = moved["regroup rows"]
            assert [r["step"] for r in rows] == res[name]["regroups"]
            # the first group is read from the folder, later ones come from peers
            assert rows[0]["bytes_sent"] == 0 and rows[0]["bytes_recv"] > 0
            assert sum(r["bytes_sent"] for r in rows[1:]) > 0
    sent = sum(r["bytes_sent"] for res in results for r in res["node, peers"]["regroup rows"])
    received = sum(r["bytes_recv"] for res in results
                   for r in res["node, peers"]["regroup rows"][1:])
    assert sent == received


def test_full_shrinkage_of_batch_weights_is_no_correction(results):
    for res in results:
        for name, value in res["none"]["state"].items():
            assert torch.equal(res["batch, shrinkage 1"]["state"][name], value), name
        assert any(not torch.equal(res["batch"]["state"][k], v)
                   for k, v in res["none"]["state"].items())


def test_corrections_change_training_and_ranks_stay_equal(results):
    for name in ("node", "batch", "none", "random"):
        for key, value in results[0][name]["state"].items():
            assert torch.equal(results[1][name]["state"][key], value), f"{name}: {key}"
    assert any(not torch.equal(results[0]["node"]["state"][k], v)
               for k, v in results[0]["none"]["state"].items())


def test_resumed_run_ends_with_the_uninterrupted_weights(results):
    for res in results:
        for name, value in res["node"]["state"].items():
            assert torch.allclose(res["resumed"]["state"][name], value, atol=1e-6), name


def test_node_correction_needs_layers_that_take_edge_weights(results):
    assert "correction='batch'" in results[0]["gat error"]
    # SAGE takes them (a weighted mean), and they change its training
    node, batch = results[0]["sage node"]["state"], results[0]["sage batch"]["state"]
    assert any(not torch.equal(node[k], v) for k, v in batch.items())


def test_bad_options_name_the_fix(tmp_path):
    from pyg_dist.models import GNN
    from pyg_dist.train import train

    graph = awkward_graph(num_nodes=60, num_edges=200, num_features=4)
    pyg_dist.partition(graph, 1, tmp_path / "plain")
    pyg_dist.partition(graph, 1, tmp_path / "clusters", clusters_per_part=3)
    model = GNN("gcn", 4, 8, 3)

    def fails(folder, match, halo=None, **options):
        data = pyg_dist.DistData.load(tmp_path / folder, halo=halo)
        with pytest.raises(ValueError, match=match):
            train(model, data, epochs=1, progress=False, mode="gradient-only", **options)

    fails("plain", "clusters_per_part=m")
    fails("clusters", "regroup_every >= 1", regroup_every=0)
    fails("clusters", "use one of sweep, random, home", regroup="sorted")
    fails("clusters", "use one of node, batch, none", correction="edge")
    fails("clusters", r"shrinkage in \[0, 1\]", shrinkage=1.5)
    fails("clusters", "exchanges no halo", halo=Stale(2))
    fails("clusters", "use one of folder, peers", regroup_from="disk")
    fails("clusters", "clusters_per_rank >= 1", clusters_per_rank=0)
    fails("clusters", r"clusters_per_part=2\) \(CLI: --clusters-per-rank 2\) or pass "
          "clusters_per_rank=3", clusters_per_rank=2)
    model.convs[1].halo = Stale(2)
    fails("clusters", "layer 'convs.1' sets halo='stale:2'")
    model.convs[1].halo = None
    with pytest.raises(ValueError, match="clusters_per_rank in mode='gradient-only' only"):
        train(model, pyg_dist.DistData.load(tmp_path / "clusters"), epochs=1,
              clusters_per_rank=3)
    with pytest.raises(ValueError, match="use one of exact, gradient-only"):
        train(model, pyg_dist.DistData.load(tmp_path / "plain"), epochs=1, mode="isolated")
    with pytest.raises(ValueError, match="clusters_per_part >= 1"):
        pyg_dist.partition(graph, 1, tmp_path / "x", clusters_per_part=0)
    with pytest.raises(ValueError, match="61 clusters|clusters for a graph of 60 nodes"):
        pyg_dist.partition(graph, 2, tmp_path / "x", clusters_per_part=40)
    assert not (tmp_path / "x").exists()
