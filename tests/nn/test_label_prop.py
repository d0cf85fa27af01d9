"""Label propagation and Correct & Smooth on 1, 2 and 4 real gloo ranks
against PyG's LabelPropagation and CorrectAndSmooth on the whole graph.

One launch per world size runs every case on a METIS and a random cut of the
awkward graph (directed, self-loops, duplicate edges, isolated nodes, edge
weights) and of Cora; the test process builds the references. Soft
predictions are a fixed random softmax per graph, so the cases check the
propagation alone."""
import pytest
import torch
from graphs import awkward_graph, cora
from tolerances import assert_close
from torch_geometric.nn.models import CorrectAndSmooth, LabelPropagation

import pyg_dist
from pyg_dist.nn import DistCorrectAndSmooth, DistLabelPropagation, to_distributed

WORLD_SIZES = [1, 2, 4]
CUTS = {"awkward-metis": "metis", "awkward-random": "random", "cora-metis": "metis",
        "cora-random": "random"}
#: (num_correction_layers, correction_alpha, num_smoothing_layers, smoothing_alpha,
#: autoscale, scale), as PyG takes them.
CS_CASES = {"cs-autoscale": (10, 0.9, 10, 0.8, True, 1.0),
            "cs-fixed-scale": (8, 1.0, 6, 0.7, False, 20.0)}


def soft_predictions(data, classes):
    g = torch.Generator().manual_seed(data.num_nodes)
    return torch.randn(data.num_nodes, classes, generator=g).softmax(dim=-1)


def lp_cases(data, y_soft):
    """name -> (layers, alpha, label argument, mask, weighted): propagations of
    integer labels under the training mask, of soft rows without one, and of
    rows over the graph's edge weights."""
    return {"lp-labels-masked": (3, 0.9, "y", "train_mask", False),
            "lp-soft": (5, 0.5, "soft", None, False),
            "lp-weighted": (4, 0.8, "soft", "train_mask", True)}


def run_lp(module, case, data, y, y_soft):
    layers, alpha, labels, mask, weighted = case
    return module(y if labels == "y" else y_soft, data.edge_index,
                  mask=None if mask is None else getattr(data, mask),
                  edge_weight=data.edge_weight if weighted else None)


def run_cs(module, data, y_soft):
    mask = data.train_mask
    y_true = data.y[mask]
    corrected = module.correct(y_soft, y_true, mask, data.edge_index)
    return {"corrected": corrected, "smoothed": module.smooth(corrected, y_true, mask,
                                                              data.edge_index)}


def battery(dirs, soft):
    """Every case on every cut, on this rank: its rows and their global ids."""
    out = {}
    for key, path in dirs.items():
        data = pyg_dist.DistData.load(path)
        y_soft = soft[key.split("-")[0]][data.global_id]
        res = {"global_id": data.global_id}
        for name, case in lp_cases(data, y_soft).items():
            res[name] = run_lp(DistLabelPropagation(case[0], case[1]), case, data, data.y,
                               y_soft)
        for name, args in CS_CASES.items():
            res[name] = run_cs(DistCorrectAndSmooth(*args), data, y_soft)
        # to_distributed converts PyG's own module (and books under its names)
        data = pyg_dist.DistData.load(path)
        res["converted"] = run_cs(to_distributed(CorrectAndSmooth(*CS_CASES["cs-autoscale"])),
                                  data, y_soft)
        res["converted_bytes"] = data.ledger.totals()["bytes_eval"]
        res["converted_layers"] = sorted({e["layer"] for e in data.ledger.rows()})
        res["num_send"] = data.edge_index.plan.num_send
        out[key] = res
    return out


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    data = cora(tmp_path_factory.mktemp("cora"))
    g = torch.Generator().manual_seed(data.num_edges)
    data.edge_weight = torch.rand(data.num_edges, generator=g) + 0.1
    return {"awkward": awkward_graph(), "cora": data}


@pytest.fixture(scope="module")
def soft(graphs):
    return {name: soft_predictions(data, int(data.y.max()) + 1) for name, data in graphs.items()}


@pytest.fixture(scope="module")
def references(graphs, soft):
    refs = {}
    for name, data in graphs.items():
        for case_name, case in lp_cases(data, soft[name]).items():
            refs[name, case_name] = run_lp(LabelPropagation(case[0], case[1]), case, data,
                                           data.y, soft[name])
        for case_name, args in CS_CASES.items():
            refs[name, case_name] = run_cs(CorrectAndSmooth(*args), data, soft[name])
    return refs


@pytest.fixture(scope="module")
def runs(graphs, soft, tmp_path_factory):
    cache = {}

    def get(world_size):
        if world_size not in cache:
            root = tmp_path_factory.mktemp(f"lp{world_size}")
            dirs = {}
            for key, method in CUTS.items():
                dirs[key] = str(root / key)
                pyg_dist.partition(graphs[key.split("-")[0]], world_size, dirs[key],
                                   method=method, seed=5)
            cache[world_size] = pyg_dist.launch(battery, world_size, args=(dirs, soft),
                                                timeout=600)
        return cache[world_size]

    return get


def gathered(per_rank, key, case, field, num_nodes):
    """The rows of ``case`` (its ``field`` if a dict) in whole-graph order."""
    first = per_rank[0][key][case]
    first = first[field] if field else first
    full = first.new_full((num_nodes, *first.shape[1:]), float("nan"))
    for res in per_rank:
        rows = res[key][case]
        full[res[key]["global_id"]] = rows[field] if field else rows
    return full


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("key", list(CUTS))
def test_label_propagation_equals_pyg(runs, references, graphs, world_size, key):
    per_rank = runs(world_size)
    graph = key.split("-")[0]
    for case in lp_cases(None, None):
        assert_close(gathered(per_rank, key, case, None, graphs[graph].num_nodes),
                     references[graph, case], what=f"{case} on {key}, {world_size} ranks")


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("key", list(CUTS))
def test_correct_and_smooth_equals_pyg(runs, references, graphs, world_size, key):
    per_rank = runs(world_size)
    graph = key.split("-")[0]
    num_nodes = graphs[graph].num_nodes
    for case in CS_CASES:
        for field in ("corrected", "smoothed"):
            assert_close(gathered(per_rank, key, case, field, num_nodes),
                         references[graph, case][field],
                         what=f"{case} ({field}) on {key}, {world_size} ranks")
    ref = references[graph, "cs-autoscale"]["smoothed"]
    assert_close(gathered(per_rank, key, "converted", "smoothed", num_nodes), ref,
                 what=f"to_distributed(CorrectAndSmooth) on {key}, {world_size} ranks")


@pytest.mark.parametrize("world_size", [2, 4])
def test_each_step_exchanges_the_halo_once(runs, graphs, world_size):
    """The converted C&S books its propagations under prop1 and prop2, one
    exchange of every halo row (``C`` float32 columns) a step: 10 + 10 steps
    of the autoscale case."""
    per_rank = runs(world_size)
    classes = int(graphs["cora"].y.max()) + 1
    for key in ("cora-metis", "cora-random"):
        for res in per_rank:
            assert res[key]["converted_layers"] == ["prop1", "prop2"], key
        sent = sum(res[key]["converted_bytes"] for res in per_rank)
        rows = sum(res[key]["num_send"] for res in per_rank)
        assert rows > 0 and sent == 20 * rows * classes * 4, (key, sent, rows)


def test_halo_policy_other_than_exact_is_refused(one_part):
    from pyg_dist.halo import Stale

    prop = DistLabelPropagation(2, 0.5, halo=Stale(every=2))
    y = torch.rand(one_part.num_nodes, 3)
    with pytest.raises(ValueError, match=r"^'DistLabelPropagation' exchanges exactly \(got "
                                         r"halo=Stale\(every=2"):
        prop(y, one_part.edge_index)
