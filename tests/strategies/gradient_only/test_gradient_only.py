"""``train(strategy=GradientOnly(...))`` on real gloo ranks: no halo traffic in
training, gradients and regroups booked, shrinkage 1 of the batch weights is
no correction, a resumed run ends with the uninterrupted weights; and the
errors that name the fix."""
import pytest
import torch
import torch.nn.functional as F
from graphs import awkward_graph
from tolerances import SAME, TOL, assert_close, rel_err
from worlds import Battery

import pyg_dist
from pyg_dist.config import Checkpoint, GradientOnly, GradSync
from pyg_dist.halo import Stale

EPOCHS = 6


class Interrupted(Exception):
    pass


def _train(parts, kind="gcn", ckpt=None, fail_at=None, resume=False, grad_compress=None,
           **options):
    from pyg_dist.models import GNN
    from pyg_dist.train import train

    data = pyg_dist.DistData.load(parts)
    torch.manual_seed(0)
    model = GNN(kind, data.x.size(1), 16, 3, dropout=0.0)

    def stop(stats):
        if stats.epoch == fail_at:
            raise Interrupted

    try:
        result = train(model, data, EPOCHS, progress=False,
                       strategy=GradientOnly(regroup_every=2, **options),
                       grad_sync=GradSync(grad_compress),
                       checkpoint=Checkpoint(ckpt, every=2, resume=resume) if ckpt else None,
                       callback=stop)
    except Interrupted:
        return None
    return {
        "summary": result.summary(),
        "regroups": [r["step"] for r in data.ledger.rows() if r["direction"] == "regroup"],
        "regroup rows": [r for r in data.ledger.rows() if r["direction"] == "regroup"],
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "numel": sum(p.numel() for p in model.parameters()),
    }


#: The one-step runs: (model, correction), trained one epoch with SGD(lr=1).
ONE_STEP = [("gcn", "node"), ("gcn", "batch"), ("gcn", "none"), ("sage", "node"),
            ("sage", "batch")]


def _one_step(parts, kind, correction):
    """One epoch of gradient-only training (regroup="random") with SGD of
    learning rate 1: the weights after it are the initial ones minus the
    gradient."""
    from pyg_dist.models import GNN
    from pyg_dist.train import train

    data = pyg_dist.DistData.load(parts)
    torch.manual_seed(0)
    model = GNN(kind, data.x.size(1), 16, 3, dropout=0.0)
    train(model, data, 1, progress=False,
          strategy=GradientOnly(regroup="random", correction=correction),
          optimizer=torch.optim.SGD(model.parameters(), lr=1.0))
    return {k: v.clone() for k, v in model.state_dict().items()}


def body(parts, ckpt):
    out = {c: _train(parts, correction=c) for c in ("node", "batch", "none")}
    out["one step"] = {case: _one_step(parts, *case) for case in ONE_STEP}
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


def the_graph():
    return awkward_graph(num_nodes=200, num_edges=1200, num_features=12)


def prepare(root):
    pyg_dist.partition(the_graph(), 2, root / "parts", clusters_per_part=3)
    return (str(root / "parts"), str(root / "ckpt")), root


RANKS = Battery(2, body, prepare)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return RANKS.results(tmp_path_factory)[0]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return RANKS.results(tmp_path_factory)[1]


def one_step_reference(folder, kind, correction, world=2):
    """The weights after one SGD step (learning rate 1) of gradient-only
    training, from PyG's layers on each rank's induced subgraph of the whole
    graph: rank r holds the clusters random grouping gives it in period 0,
    where two clusters share a rank with probability pi = (m - 1)/(C - 1).
    ``"node"``: an edge between two clusters weighs 1/pi (GCN: in the
    normalisation; SAGE: a weighted mean); ``"batch"``: rank r's loss counts
    w_r / mean(w) times, w_r the mean over its training nodes i of
    (1 + sum of i's retained in-edges' weights)/(1 + their count); the loss
    is the cross entropy summed over the ranks' training nodes, divided by
    their number."""
    from torch_geometric.nn import GCNConv, SAGEConv
    from torch_geometric.utils import scatter

    from pyg_dist.models import GNN
    from pyg_dist.partitioning.io import read_meta, read_part
    from pyg_dist.strategies.gradient_only import groups

    graph = the_graph()
    path = folder / "parts" / "clusters"
    meta = read_meta(path)
    clusters = meta.num_parts
    pi = (clusters // world - 1) / (clusters - 1)
    cluster = torch.full((graph.num_nodes,), -1, dtype=torch.long)
    for c in range(clusters):
        cluster[read_part(path, c, meta)["graph"]["global_id"]] = c
    assert bool((cluster >= 0).all())
    torch.manual_seed(0)
    net = GNN(kind, 12, 16, 3, dropout=0.0)
    convs = [GCNConv(12, 16), GCNConv(16, 3)] if kind == "gcn" else [SAGEConv(12, 16),
                                                                    SAGEConv(16, 3)]
    for conv, twin in zip(convs, net.convs):
        conv.load_state_dict(twin.state_dict())
    ranks = []
    for mine in groups(clusters, world, 0, "random"):
        inside = torch.isin(cluster, torch.tensor(mine))
        src, dst = graph.edge_index
        keep = inside[src] & inside[dst]
        local = torch.cumsum(inside.long(), 0) - 1
        edge_index = torch.stack([local[src[keep]], local[dst[keep]]])
        weight = torch.where(cluster[src[keep]] == cluster[dst[keep]], 1.0, 1.0 / pi).float()
        n = int(inside.sum())
        omega = ((1 + scatter(weight.double(), edge_index[1], 0, dim_size=n, reduce="sum"))
                 / (1 + torch.bincount(edge_index[1], minlength=n).double()))
        train = graph.train_mask[inside]
        ranks.append((graph.x[inside], graph.y[inside], train, edge_index, weight,
                      float(omega[train].mean())))
    count = sum(int(r[2].sum()) for r in ranks)
    mean_w = sum(r[5] for r in ranks) / world
    for x, y, train, edge_index, weight, w in ranks:
        h = x
        for k, conv in enumerate(convs):
            if correction != "node":
                h = conv(h, edge_index)
            elif kind == "gcn":
                h = conv(h, edge_index, weight)
            else:
                src, dst = edge_index
                mean = (scatter(weight.view(-1, 1) * h[src], dst, 0, dim_size=h.size(0))
                        / scatter(weight, dst, 0, dim_size=h.size(0)).clamp(min=1e-12)
                        .view(-1, 1))
                h = conv.lin_l(mean) + conv.lin_r(h)
            h = h.relu() if k == 0 else h
        loss = F.cross_entropy(h[train], y[train], reduction="sum") / count
        (loss * (w / mean_w if correction == "batch" else 1.0)).backward()
    state = {}
    for k, conv in enumerate(convs):
        for name, p in conv.named_parameters():
            state[f"convs.{k}.{name}"] = (p - p.grad).detach()
    return state


def check_one_step(results, folder, kind, correction):
    expected = one_step_reference(folder, kind, correction)
    for rank, res in enumerate(results):
        state = res["one step"][(kind, correction)]
        assert set(state) == set(expected)
        for key, value in expected.items():
            assert_close(state[key], value, what=f"{kind}/{correction} rank {rank}: {key}")
    return expected


def differ(a, b):
    """Whether two weight sets differ by more than the float32 tolerance."""
    return max(rel_err(a[k], b[k]) for k in a) > 10 * TOL[torch.float32]


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


def test_full_shrinkage_of_batch_weights_is_no_correction(results, folder):
    for res in results:
        for name, value in res["none"]["state"].items():
            assert torch.equal(res["batch, shrinkage 1"]["state"][name], value), name
    # without shrinkage, the batch weights are the ones computed by hand
    batch = check_one_step(results, folder, "gcn", "batch")
    none = check_one_step(results, folder, "gcn", "none")
    assert differ(batch, none), "the ranks' batch weights must make a difference here"


def test_corrections_change_training_and_ranks_stay_equal(results, folder):
    for name in ("node", "batch", "none", "random"):
        for key, value in results[0][name]["state"].items():
            assert torch.equal(results[1][name]["state"][key], value), f"{name}: {key}"
    node = check_one_step(results, folder, "gcn", "node")
    assert differ(node, one_step_reference(folder, "gcn", "none"))


def test_resumed_run_ends_with_the_uninterrupted_weights(results):
    for res in results:
        for name, value in res["node"]["state"].items():
            assert_close(res["resumed"]["state"][name], value, what=name, tol=SAME)


def test_node_correction_needs_layers_that_take_edge_weights(results, folder):
    assert "correction='batch'" in results[0]["gat error"]
    # SAGE takes them (a weighted mean), and they change its training as computed by hand
    node = check_one_step(results, folder, "sage", "node")
    batch = check_one_step(results, folder, "sage", "batch")
    assert differ(node, batch)


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
            train(model, data, 1, progress=False, strategy=GradientOnly(**options))

    fails("plain", "clusters_per_part=m")
    fails("clusters", "regroup_every must be an integer >= 1", regroup_every=0)
    fails("clusters", "use one of sweep, random, home", regroup="sorted")
    fails("clusters", "use one of node, batch, none", correction="edge")
    fails("clusters", r"use a value in \[0, 1\]", shrinkage=1.5)
    fails("clusters", "exchanges no halo", halo=Stale(2))
    fails("clusters", "use one of folder, peers", regroup_from="disk")
    fails("clusters", "clusters_per_rank must be an integer >= 1", clusters_per_rank=0)
    fails("clusters", r"clusters_per_part=2\) \(CLI: --clusters-per-rank 2\) or pass "
          "clusters_per_rank=3", clusters_per_rank=2)
    model.convs[1].halo = Stale(2)
    fails("clusters", "layer 'convs.1' sets halo='stale:2'")
    model.convs[1].halo = None
    with pytest.raises(ValueError, match="clusters_per_part >= 1"):
        pyg_dist.partition(graph, 1, tmp_path / "x", clusters_per_part=0)
    with pytest.raises(ValueError, match="61 clusters|clusters for a graph of 60 nodes"):
        pyg_dist.partition(graph, 2, tmp_path / "x", clusters_per_part=40)
    assert not (tmp_path / "x").exists()
