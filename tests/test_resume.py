"""One resume battery over every strategy: a run stopped after a checkpoint
and resumed in new processes ends with the weights of the uninterrupted run,
bit for bit, with dropout on; from a ``DistData`` and from the strategy's
own ``load``; ``"auto"`` continues the checkpoint's choice without probing
again; a resume with another strategy than the checkpoint's is refused,
naming both, unless asked for."""
import os

import pytest
import torch
from graphs import awkward_graph

import pyg_dist
from pyg_dist.config import (
    Checkpoint,
    Evaluation,
    FeatureParallel,
    GradientOnly,
    GradSync,
    GraphParallel,
    Grid3D,
    LayerPipeline,
)
from pyg_dist.models import GNN, DeepGNN
from pyg_dist.train import train

EPOCHS, EVERY, FAIL_AT = 6, 2, 5  # resumed from epoch 4
F_IN = 6

#: name -> (strategy, grad_sync, loaded by the strategy's own load).
CASES = {
    "graph-parallel exact": (GraphParallel(halo="exact"), None, False),
    "graph-parallel stale:2": (GraphParallel(halo="stale:2"), None, False),
    "graph-parallel pipelined": (GraphParallel(halo="pipelined"), None, False),
    "graph-parallel sampled:0.5": (GraphParallel(halo="sampled:0.5"), None, False),
    "graph-parallel pre-aggregated": (GraphParallel(pre_aggregate=True), None, False),
    "gradient-only": (GradientOnly(regroup_every=2), None, False),
    "covap": (GraphParallel(), GradSync("covap:2"), False),
    "powersgd": (GraphParallel(), GradSync("powersgd:1"), False),
    "feature-parallel 2x1 (DistData)": (FeatureParallel(slices=1), None, False),
    "feature-parallel 1x2 (DistData)": (FeatureParallel(slices=2), None, False),
    "feature-parallel 1x2 (load)": (FeatureParallel(slices=2), None, True),
    "grid-3d 1x1x2 (DistData)": (Grid3D(x=1, y=1, z=2), None, False),
    "grid-3d 2x1x1 (load)": (Grid3D(x=2, y=1, z=1), None, True),
    "auto": ("auto", None, False),
    "layer pipeline 1x2": (LayerPipeline(stages=2), None, True),
    "layer pipeline 2x1, 2 chunks": (LayerPipeline(stages=1, chunks=2), None, True),
}


class Interrupted(Exception):
    pass


class _Results(tuple):
    """(first launch, second launch), and where the checkpoints are."""

    def __new__(cls, first, second, checkpoints):
        out = super().__new__(cls, (first, second))
        out.checkpoints = checkpoints
        return out


def one_run(parts, name, ckpt=None, fail_at=None, resume=False, init_seed=0):
    strategy, grads, own_load = CASES[name]
    loader = strategy if own_load else pyg_dist.DistData
    deep = isinstance(strategy, LayerPipeline)
    if deep and strategy.stages == 2:  # one part in 2 stages
        parts = os.path.join(os.path.dirname(parts), "one")
    data = loader.load(parts)
    torch.manual_seed(init_seed)
    model = (DeepGNN("gcn2", F_IN, 8, 3, layers=4, dropout=0.5) if deep
             else GNN("gcn", F_IN, 8, 3, dropout=0.5))
    torch.manual_seed(1000 + pyg_dist.runtime.distributed.rank())

    at_fail = {}

    def stop(stats):
        if stats.epoch == FAIL_AT:
            at_fail.update({k: v.clone() for k, v in model.state_dict().items()})
        if stats.epoch == fail_at:
            raise Interrupted(f"stopped at epoch {stats.epoch}")

    folder = f"{ckpt}/{name.replace(' ', '_')}" if ckpt else None
    try:
        result = train(model, data, EPOCHS, strategy=strategy, grad_sync=grads,
                       progress=False, callback=stop, evaluation=Evaluation(every=2),
                       checkpoint=Checkpoint(folder, every=EVERY, resume=resume) if ckpt
                       else None)
    except Interrupted:
        return {"at_fail": at_fail}
    return {"state": {k: v.clone() for k, v in model.state_dict().items()}, "at_fail": at_fail,
            "losses": [e.loss for e in result.history], "plan": result.plan,
            "setup": result.setup}


def straight_and_interrupted(parts, ckpt):
    return {name: {"straight": one_run(parts, name),
                   "interrupted": one_run(parts, name, ckpt, fail_at=FAIL_AT)}
            for name in CASES}


def resumed(parts, ckpt):
    """Resumed in new processes, from other initial weights (the checkpoint's win)."""
    from pyg_dist.strategies import planner

    plans, plan = [], planner.plan

    def counted(*args, **kwargs):
        plans.append(args)
        return plan(*args, **kwargs)

    planner.plan = counted
    try:
        out = {name: one_run(parts, name, ckpt, resume=True, init_seed=99) for name in CASES}
    finally:
        planner.plan = plan
    refusals = {}
    data = pyg_dist.DistData.load(parts)
    model = GNN("gcn", F_IN, 8, 3, dropout=0.5)
    for name, strategy in [("another halo", GraphParallel(halo="stale:4")),
                           ("another strategy", FeatureParallel(slices=2))]:
        try:
            train(model, data, EPOCHS, strategy=strategy, progress=False,
                  checkpoint=Checkpoint(f"{ckpt}/graph-parallel_exact", resume=True))
            refusals[name] = None
        except ValueError as exc:
            refusals[name] = str(exc)
    switched = train(model, data, EPOCHS + 1, strategy=GraphParallel(halo="stale:4"),
                     progress=False, evaluation=Evaluation(every=2),
                     checkpoint=Checkpoint(f"{ckpt}/graph-parallel_exact", resume=True,
                                           switch=True))
    staled = pyg_dist.DistData.load(parts, halo="stale:2")
    grid = train(GNN("gcn", F_IN, 8, 3), staled, 1, strategy=FeatureParallel(slices=1),
                 progress=False)
    return {"runs": out, "refusals": refusals, "switched_epochs": switched.epochs,
            "probes": len(plans), "grid_halo": grid.setup["halo"]}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    pyg_dist.partition(awkward_graph(num_nodes=200, num_edges=1200, num_features=F_IN), 2,
                       root / "parts", clusters_per_part=2)
    pyg_dist.partition(awkward_graph(num_nodes=200, num_edges=1200, num_features=F_IN), 1,
                       root / "one")
    args = (str(root / "parts"), str(root / "ckpt"))
    saved = os.environ.get("PYTHONHASHSEED")
    try:
        os.environ["PYTHONHASHSEED"] = "1"
        first = pyg_dist.launch(straight_and_interrupted, 2, args=args, timeout=900)
        os.environ["PYTHONHASHSEED"] = "2"
        second = pyg_dist.launch(resumed, 2, args=args, timeout=900)
    finally:
        if saved is None:
            os.environ.pop("PYTHONHASHSEED", None)
        else:
            os.environ["PYTHONHASHSEED"] = saved
    return _Results(first, second, root / "ckpt")


@pytest.mark.parametrize("name", list(CASES))
def test_a_resumed_run_ends_with_the_uninterrupted_run_s_weights_bit_for_bit(results, name):
    """The interrupted run's weights at the epoch it stopped equal the
    resumed run's there; and, where the strategy is given (the planner may
    choose another one in another run), the uninterrupted run's at the end."""
    first, second = results
    for rank in range(2):
        runs, again = first[rank][name], second[rank]["runs"][name]
        for key, value in runs["interrupted"]["at_fail"].items():
            assert torch.equal(again["at_fail"][key], value), f"{name}, rank {rank}: {key}"
        if name == "auto":
            continue
        straight = runs["straight"]
        for key, value in straight["state"].items():
            assert torch.equal(again["state"][key], value), f"{name}, rank {rank}: {key}"
        assert again["losses"] == straight["losses"], name
        assert again["setup"] == straight["setup"]


def test_auto_continues_its_choice_without_a_new_probe(results):
    first, second = results
    again = second[0]["runs"]["auto"]
    saved = torch.load(results.checkpoints / "auto" / "rank_0.pt", weights_only=True)
    assert again["plan"]["choice"] == saved["extra"]["runner"]["plan"]["choice"]
    assert second[0]["probes"] == 0  # the resumed runs planned nothing
    assert again["plan"]["measured_step_s"] > 0  # the checkpoint's plan, beside what was measured


def test_a_resume_with_another_strategy_is_refused_naming_both_unless_asked(results):
    refusals = results[1][0]["refusals"]
    assert "was trained with strategy=GraphParallel(halo='exact'" in refusals["another halo"]
    assert "this run asks for strategy=GraphParallel(halo='stale:4'" in refusals["another halo"]
    assert "Checkpoint(..., switch=True)" in refusals["another halo"]
    assert "this run asks for strategy=FeatureParallel(slices=2" in refusals["another strategy"]
    assert results[1][0]["switched_epochs"] == EPOCHS + 1


def test_a_grid_loaded_for_a_dist_data_keeps_the_graph_s_halo_default(results):
    assert results[1][0]["grid_halo"] == "stale:2"
