"""The typed training options: each checks its own fields with an error that
names the fix and round-trips through plain dictionaries."""
import inspect

import pytest
from graphs import awkward_graph

import pyg_dist
from pyg_dist.config import (
    STRATEGIES,
    Adam,
    Checkpoint,
    Evaluation,
    GradientOnly,
    GradSync,
    GraphParallel,
    LayerPipeline,
    Planned,
    strategy_from_dict,
)
from pyg_dist.halo import Exact, Stale
from pyg_dist.train import train

EXAMPLES = [
    GraphParallel(),
    GraphParallel(halo="stale:4,compress=int8"),
    GraphParallel(halo="sampled:0.5", phases=((50, "stale:2,compress=int8"), (150, "exact"))),
    GradientOnly(clusters_per_rank=3, regroup_every=5, regroup="random", correction="batch",
                 shrinkage=0.25, regroup_from="peers"),
    LayerPipeline(stages=4, chunks=2, initial_rows="recompute", halo="exact,compress=fp16"),
    Planned(accept="stale", probe_steps=2),
    GradSync("covap:auto"),
    Adam(lr=0.005, weight_decay=0.0),
    Adam(lr=0.05, schedule="cosine,warmup=10,min_lr=0.001"),
    Evaluation(every=10, halo="exact,compress=int8"),
    Evaluation(target_acc=0.75, patience=20, time_budget=60.0),
    Checkpoint("ckpt", every=5, resume=True),
]


@pytest.mark.parametrize("options", EXAMPLES, ids=lambda o: type(o).__name__)
def test_options_round_trip_through_plain_dictionaries(options):
    values = options.to_dict()
    assert all(isinstance(v, (str, int, float, bool, type(None))) for v in values.values())
    assert type(options).from_dict(values) == options


def test_a_policy_object_is_written_as_its_spec():
    options = GraphParallel(halo=Stale(every=3, compress="int8"))
    assert options.to_dict() == {"halo": "stale:3,compress=int8", "phases": "",
                                 "pre_aggregate": None}
    assert GraphParallel.from_dict(options.to_dict()).halo == "stale:3,compress=int8"


def test_strategies_are_read_back_by_name():
    for strategy in EXAMPLES[:6]:
        assert strategy_from_dict({"name": strategy.name, **strategy.to_dict()}) == strategy
    assert set(STRATEGIES) == {"graph-parallel", "gradient-only", "layer-pipeline", "auto",
                               "feature-parallel", "grid-3d"}
    with pytest.raises(ValueError, match="use one of graph-parallel, gradient-only"):
        strategy_from_dict({"name": "model-parallel"})


@pytest.mark.parametrize("make, message", [
    (lambda: GraphParallel(halo="stale"), r"GraphParallel\(halo='stale'\).*stale:K"),
    (lambda: GraphParallel(halo=4), "give a halo policy or its spec"),
    (lambda: GradientOnly(regroup_every=0), r"regroup_every must be an integer >= 1"),
    (lambda: GradientOnly(regroup="sorted"), "use one of sweep, random, home"),
    (lambda: GradientOnly(correction="edge"), "use one of node, batch, none"),
    (lambda: GradientOnly(shrinkage=1.5), r"use a value in \[0, 1\]"),
    (lambda: GradientOnly(regroup_from="disk"), "use one of folder, peers"),
    (lambda: GradientOnly(clusters_per_rank=0), "clusters_per_rank must be an integer >= 1"),
    (lambda: LayerPipeline(stages=0), "stages must be an integer >= 1"),
    (lambda: LayerPipeline(chunks=True), r"LayerPipeline\(chunks=True\): chunks must be an "
                                         r"integer, not bool"),
    (lambda: LayerPipeline(initial_rows="copy"), "use one of send, recompute"),
    (lambda: GradSync("covap:0"), "shard count K >= 1"),
    (lambda: Adam(lr=-1.0), r"Adam\(lr=-1.0\): use a number >= 0"),
    (lambda: Evaluation(every=0), "1 evaluates after every epoch"),
    (lambda: Evaluation(target_acc=72), r"a fraction in \(0, 1\], e.g. 0.72"),
    (lambda: Evaluation(target_acc=1.01), r"a fraction in \(0, 1\]"),
    (lambda: Evaluation(time_budget=-5.0), "give seconds > 0, or None"),
    (lambda: Evaluation(patience=0), "patience must be an integer >= 1"),
    (lambda: Adam(schedule="linear"), "use one of constant, cosine, plateau"),
    (lambda: Adam(schedule="cosine,warmpu=3"), "KEY one of warmup, min_lr"),
    (lambda: Adam(schedule="plateau,warmup=5"), "takes no warm-up"),
    (lambda: Adam(schedule="plateau,factor=2"), r"factor in \(0, 1\)"),
    (lambda: GraphParallel(phases="exact@150"), "is not EPOCH=POLICY"),
    (lambda: GraphParallel(phases=((0, "exact"),)), "starts at an epoch >= 1"),
    (lambda: GraphParallel(phases="150=exact;50=stale:2"), "increasing, distinct epochs"),
    (lambda: GraphParallel(phases="150=stael:2"), "unknown halo policy"),
    (lambda: Checkpoint(), "name the folder for checkpoints"),
    (lambda: Checkpoint("ckpt", every=-1), "0 writes none"),
    (lambda: GradSync.from_dict({"compres": "fp16"}), "has no field 'compres'"),
    (lambda: GradSync.from_dict({"name": "fp16"}), "GradSync has no field 'name'"),
    (lambda: GradSync.from_dict("fp16"), "GradSync is read from a JSON object of its fields"),
    (lambda: Adam(lr="0.1"), r"Adam\(lr='0.1'\): lr must be a number, not str"),
    (lambda: Evaluation(patience=2.0), r"Evaluation\(patience=2.0\): patience must be an "
                                       r"integer or None, not float"),
    (lambda: Adam(schedule={"kind": "cosine", "warmpu": 3}), "LRSchedule has no field 'warmpu'"),
])
def test_each_option_checks_its_fields_and_names_the_fix(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_train_takes_at_most_ten_parameters():
    assert len(inspect.signature(train).parameters) <= 10
    assert list(inspect.signature(train).parameters)[:3] == ["model", "data", "epochs"]


def test_a_wrong_type_names_the_option_object(tmp_path):
    pyg_dist.partition(awkward_graph(num_features=4), 1, tmp_path / "parts")
    from pyg_dist.models import GNN

    data = pyg_dist.DistData.load(tmp_path / "parts")
    model = GNN("gcn", 4, 8, 3)
    with pytest.raises(TypeError, match=r"pass GraphParallel\(...\), GradientOnly"):
        train(model, data, 1, strategy="gradient-only", progress=False)
    with pytest.raises(TypeError, match=r"Evaluation\(every=..., halo=...\)"):
        train(model, data, 1, evaluation=5, progress=False)


def test_graph_parallel_halo_sets_the_policy_of_layers_that_set_none_for_the_run(tmp_path):
    """The strategy's policy trains every layer that sets none, and the graph
    has its own default back after the run (a later run with halo=None trains
    under what the graph was loaded with)."""
    pyg_dist.partition(awkward_graph(num_features=4), 1, tmp_path / "parts")
    from pyg_dist.models import GNN

    data = pyg_dist.DistData.load(tmp_path / "parts")
    registry = data.edge_index.registry
    seen = []
    result = train(GNN("gcn", 4, 8, 3), data, 2, strategy=GraphParallel(halo="stale:3"),
                   progress=False, callback=lambda _: seen.append(registry.policy(None)))
    assert seen == [Stale(every=3)] * 2 and result.setup["halo"] == "stale:3"
    assert {state.policy for (_, mode), state in registry.layers.items()
            if mode == "train"} == {Stale(every=3)}
    assert registry.policy(None) == Exact() and registry.eval_default is None
    again = train(GNN("gcn", 4, 8, 3), data, 1, progress=False)
    assert again.setup["halo"] == "exact"


def test_resume_without_a_checkpoint_starts_at_epoch_one(tmp_path, capsys):
    pyg_dist.partition(awkward_graph(num_features=4), 1, tmp_path / "parts")
    from pyg_dist.models import GNN

    data = pyg_dist.DistData.load(tmp_path / "parts")
    result = train(GNN("gcn", 4, 8, 3), data, 2, progress=False,
                   checkpoint=Checkpoint(tmp_path / "none", resume=True))
    assert result.epochs == 2 and [e.epoch for e in result.history] == [1, 2]
    assert "no checkpoint in" in capsys.readouterr().err
