"""The planner on the link task: the gather's bytes it predicts for each
epoch equal what the ledger books training that epoch, on 2, 3 and 4 ranks,
with uniform and per-source negatives (and BPR's second look-up of the
pairs' nodes); strategy="auto" trains edges, its plan's bytes the run's."""
import pytest
from link_cases import graph, link_split, model

import pyg_dist
from pyg_dist.config import Evaluation, Planned
from pyg_dist.datasets import synthetic_recommendation
from pyg_dist.nn import to_distributed
from pyg_dist.strategies import planner
from pyg_dist.strategies.link_task import LinkTask
from pyg_dist.train import train

EPOCHS = 4
CASES = [  # (model, negatives, loss)
    ("gcn-dot", "uniform", "bce"),
    ("gcn-dot", "structured", "bce"),
    ("lightgcn", "structured", "bpr"),
]


def _task(data, kind, negatives, loss):
    return LinkTask(data, negatives=negatives, loss=loss, features=kind != "lightgcn")


def _net(data, kind):
    feats = data.meta.num_nodes if kind == "lightgcn" else data.x.size(1)
    return to_distributed(model(kind, feats))


def plan_and_train(cases):
    out = []
    for parts, kind, negatives, loss in cases:
        data = pyg_dist.DistData.load(parts)
        net = _net(data, kind)
        plan = planner.plan(net, _task(data, kind, negatives, loss), EPOCHS)
        data = pyg_dist.DistData.load(parts)
        net = _net(data, kind)
        result = train(net, _task(data, kind, negatives, loss), EPOCHS,
                       evaluation=Evaluation(every=2), progress=False)
        data = pyg_dist.DistData.load(parts)
        auto = train(_net(data, kind), _task(data, kind, negatives, loss), EPOCHS,
                     strategy=Planned(), evaluation=Evaluation(every=2), progress=False)
        out.append({"predicted": plan.probe.gather_bytes,
                    "booked": [e.gather_bytes for e in result.history],
                    "labels": [c.label for c in plan.candidates],
                    "auto": auto.plan})
    return out


@pytest.fixture(scope="module", params=[2, 3, 4])
def planned(request, tmp_path_factory):
    world = request.param
    root = tmp_path_factory.mktemp(f"plan{world}")
    cases = []
    for i, (kind, negatives, loss) in enumerate(CASES):
        if kind == "lightgcn":
            split = synthetic_recommendation(40, 120, avg_degree=3, seed=i)
        else:
            split = link_split(graph(num_nodes=60, num_edges=200, seed=i), True, seed=i)
        parts = root / f"{kind}-{negatives}"
        pyg_dist.partition(split, world, parts, method="metis" if i % 2 else "random", seed=i)
        cases.append((str(parts), kind, negatives, loss))
    return pyg_dist.launch(plan_and_train, world_size=world, args=(cases,), timeout=600)


def test_predicted_gather_bytes_are_the_ledgers(planned):
    for case, got in zip(CASES, planned[0]):
        assert len(got["booked"]) == EPOCHS
        assert min(got["booked"]) > 0, case
        # the pairs differ from epoch to epoch, and so do the bytes
        assert len(set(got["booked"][1:])) > 1, case
        assert got["predicted"] == got["booked"], case


def test_auto_ranks_strategies_that_train_edges(planned):
    for case, got in zip(CASES, planned[0]):
        assert got["labels"] and all(lb.startswith("graph-parallel") for lb in got["labels"])
        auto = got["auto"]
        assert auto["choice"].startswith("graph-parallel"), case
        assert auto["measured_bytes_per_epoch"] == auto["predicted_bytes_per_epoch"], case
