"""The planner: its byte predictions equal what the ledger books for every
strategy it ranks, its probe leaves training untouched, and its choice obeys
the accepted risk."""
import math

import pytest
import torch
from graphs import awkward_graph

from pyg_dist.config import Evaluation, GradSync, Planned
from pyg_dist.models import GNN
from pyg_dist.strategies import GradientOnly, GraphParallel, planner
from pyg_dist.strategies.cost import Candidate, Probe, Traffic
from pyg_dist.strategies.graph_parallel import MIN_COVER_SAVING
from pyg_dist.train import train

EPOCHS = 6
#: Strategies trained against their predictions (labels of planner.predict).
CHECKED = ["graph-parallel exact", "graph-parallel exact, grad fp16",
           "graph-parallel exact,compress=int8", "graph-parallel exact,compress=int4",
           "graph-parallel stale:4,compress=int8", "graph-parallel stale:2",
           "graph-parallel pipelined,compress=int8", "graph-parallel isolated",
           "gradient-only", "graph-parallel exact pre-aggregated",
           "graph-parallel stale:4,compress=int8 pre-aggregated, grad fp16"]


def _model(data, hidden=8):
    torch.manual_seed(0)
    return GNN("gcn", data.x.size(1), hidden, data.meta.num_classes, dropout=0.5)


def _trained_bytes(result):
    return sum(e.halo_bytes_fwd + e.halo_bytes_bwd + e.grad_bytes for e in result.history)


def plan_and_train(parts):
    import pyg_dist

    data = pyg_dist.DistData.load(parts)
    model = _model(data)
    before = [p.detach().clone() for p in model.parameters()]
    rng = torch.get_rng_state()
    plan = planner.plan(model, data, EPOCHS, accept="approximate")
    untouched = (all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
                 and torch.equal(rng, torch.get_rng_state()) and not data.ledger.entries)
    measured = {}
    by_label = {c.label: c for c in plan.candidates}
    for label in CHECKED:
        candidate = by_label[label]
        data = pyg_dist.DistData.load(parts)
        result = train(_model(data), data, EPOCHS, strategy=candidate.strategy,
                       grad_sync=candidate.grad_sync, evaluation=Evaluation(every=EPOCHS),
                       progress=False)
        measured[label] = (candidate.bytes, _trained_bytes(result))
    # a layer at least as wide as its input exchanges the input itself at the
    # first step, with no gradient back
    data = pyg_dist.DistData.load(parts)
    wide = planner.predict(planner.probe(_model(data, 16), data), EPOCHS)
    exact = next(c for c in wide if c.label == "graph-parallel exact")
    data = pyg_dist.DistData.load(parts)
    result = train(_model(data, 16), data, EPOCHS, evaluation=Evaluation(every=EPOCHS),
                   progress=False)
    measured["wide exact"] = (exact.bytes, _trained_bytes(result))
    # "auto" trains exactly as the strategy it chose, given by hand
    runs = {}
    for name in ("auto", "chosen"):
        data = pyg_dist.DistData.load(parts)
        model = _model(data)
        torch.manual_seed(1 + data.rank)
        chosen = plan.choice if name == "chosen" else None
        result = train(model, data, EPOCHS, progress=False,
                       strategy=Planned(accept="compressed") if chosen is None
                       else runs["auto"]["strategy"],
                       grad_sync=None if chosen is None else runs["auto"]["grad_sync"],
                       evaluation=Evaluation(every=EPOCHS))
        runs[name] = {"weights": [p.detach().clone() for p in model.parameters()],
                      "plan": result.plan, "loss": [e.loss for e in result.history]}
        if name == "auto":
            again = planner.predict(plan.probe, EPOCHS)
            label = result.plan["choice"]
            match = next(c for c in again if c.label == label)
            runs["auto"].update(strategy=match.strategy, grad_sync=match.grad_sync)
    return {"untouched": untouched, "measured": measured, "probe": plan.probe,
            "choice": plan.choice.label, "table": plan.table(), "summary": plan.summary(),
            "runs": runs}


def test_predicted_bytes_equal_the_ledger_and_auto_trains_its_choice(tmp_path):
    import pyg_dist
    from pyg_dist.datasets import community_graph, preset

    graph = community_graph(preset("synthetic-arxiv", num_nodes=600, num_features=12,
                                   num_classes=4), seed=0)
    pyg_dist.partition(graph, 2, tmp_path / "parts", clusters_per_part=2)
    ranks = pyg_dist.launch(plan_and_train, 2, args=(str(tmp_path / "parts"),), timeout=600)
    out = ranks[0]
    assert all(r["untouched"] for r in ranks)
    probe = out["probe"]
    assert probe.world_size == 2 and probe.clusters and probe.grad_bytes > 0
    # layer 0 aggregates its static input (12 wide) once fetched, after
    # exchanging its transformed rows (8) at the first step; layer 1
    # exchanges the narrower of 8 and 4
    first, second = probe.layers
    assert (first.width, first.static_width, first.first_width) == (0, 12, 8)
    assert (second.width, second.static_width) == (4, 0)
    assert 2 * second.rows == first.first_rows == 2 * first.fill_rows > 0  # fwd and bwd
    # on a minimum vertex cover layer 1 sends fewer rows (partial sums
    # included); layer 0's input, dropped out, keeps its cached rows
    assert probe.cover is not None and probe.cover_setup > 0
    assert probe.cover[1].rows < second.rows and probe.cover_saving > MIN_COVER_SAVING
    for label, (predicted, booked) in out["measured"].items():
        assert predicted == booked, label
    auto, chosen = out["runs"]["auto"], out["runs"]["chosen"]
    assert auto["loss"] == chosen["loss"]
    for ours, ref in zip(auto["weights"], chosen["weights"]):
        assert torch.equal(ours, ref)
    plan = auto["plan"]
    assert plan["accept"] == "compressed" and plan["risk"] in ("exact", "compressed")
    # one meaning per key: the epoch is the step and the evaluations' share
    # (an evaluation every epoch here), in the plan's rows as in its summary
    for row in out["table"]:
        assert row["predicted_epoch_s"] == pytest.approx(
            row["predicted_step_s"] + probe.eval_seconds, abs=2e-6)
    chosen_row = next(r for r in out["table"] if r["chosen"])
    assert chosen_row["strategy"] == out["choice"] == out["summary"]["choice"]
    for key in ("predicted_step_s", "predicted_epoch_s", "predicted_bytes_per_epoch"):
        assert out["summary"][key] == chosen_row[key], key
    assert plan["measured_epoch_s"] >= plan["measured_step_s"] > 0
    assert plan["measured_bytes_per_epoch"] == plan["predicted_bytes_per_epoch"]


def _probe(**overrides):
    values = {"world_size": 4, "latency": 1e-4, "bandwidth": 1e8, "compute": 0.1,
              "layers": [Traffic("convs.0", static_width=128, fill_rows=6e4,
                                 fill_fwd=2e4, first_width=128, first_rows=6e4,
                                 moved=4e4),
                         Traffic("convs.1", 40, 6e4, 4e4)],
              "grad_bytes": 1e5, "clusters": True}
    return Probe(**{**values, **overrides})


def test_predictions_are_the_link_model_worked_by_hand():
    """Two ranks, no latency, 1 MB/s; one layer exchanging 10-wide float32
    rows (40 B): 1,500 rows an exchange over the ranks, 1,000 moved by the
    busiest rank. A step's halo takes 1,000 * 40 B / 1 MB/s = 0.04 s, the
    ring all-reduce of 100 kB 2 * (100 kB / 2) / 1 MB/s = 0.1 s (fp16: 0.05 s),
    on top of 0.1 s of compute. Bytes over 10 epochs: rows forward and
    gradients back, 10 * 2 * 1,500 * 40 = 1.2 MB, and 10 * 2 ranks * 100 kB."""
    probe = Probe(world_size=2, latency=0.0, bandwidth=1e6, compute=0.1,
                  layers=[Traffic("convs.0", width=10, rows=1500, moved=1000)],
                  grad_bytes=1e5, clusters=True)
    by_label = {c.label: c for c in planner.predict(probe, 10)}
    expected = {  # seconds, bytes
        "graph-parallel exact": (0.24, 3_200_000),
        "graph-parallel exact, grad fp16": (0.19, 2_200_000),
        "graph-parallel stale:2": (0.22, 2_600_000),  # half the exchanges
        "graph-parallel pipelined": (0.23, 3_200_000),  # a quarter hidden
        "graph-parallel isolated": (0.2, 2_000_000),
        "graph-parallel sampled:0.1": (0.204, 2_120_000),
        "gradient-only": (0.2, 2_000_000),
        "gradient-only, grad fp16": (0.15, 1_000_000),
    }
    for label, (seconds, nbytes) in expected.items():
        assert by_label[label].seconds == pytest.approx(seconds), label
        assert by_label[label].bytes == nbytes, label
    # int8 rows are 10 + 4 bytes: 0.1 + 1,000 * 14 / 1e6 + 0.1
    assert by_label["graph-parallel exact,compress=int8"].seconds == pytest.approx(0.214)
    # no clusters, no gradient-only candidate
    assert not [c for c in planner.predict(Probe(**{**vars(probe), "clusters": False}), 10)
                if c.label.startswith("gradient-only")]


def _candidate(label, risk, seconds, nbytes):
    return Candidate(label, GraphParallel(), GradSync(), risk, seconds, nbytes, 10)


#: Hand-made candidates: the fastest of each risk, and a near tie.
CANDIDATES = [_candidate("exact", "exact", 1.00, 900),
              _candidate("exact, fewer bytes", "exact", 1.005, 500),  # within 1%: a tie
              _candidate("exact, slower", "exact", 1.02, 100),  # not a tie
              _candidate("compressed", "compressed", 0.80, 800),
              _candidate("stale", "stale", 0.50, 700),
              _candidate("approximate", "approximate", 0.90, 10)]


@pytest.mark.parametrize("accept, expected", [
    ("exact", "exact, fewer bytes"),  # 1.005 s ties 1.00 s, and sends fewer bytes
    ("compressed", "compressed"),
    ("stale", "stale"),
    ("approximate", "stale"),  # approximate is allowed, but slower
])
def test_the_choice_is_the_fastest_at_the_accepted_risk(accept, expected):
    assert planner.choose(CANDIDATES, accept).label == expected


def test_predictions_follow_the_link():
    """A slow link makes the halo dominate: staleness and compression win;
    on a fast one they cost nothing and exact is as fast (within the tie)."""
    slow = planner.predict(_probe(bandwidth=1e6), 100)
    fast = planner.predict(_probe(bandwidth=1e11, latency=1e-6), 100)
    by_label = {c.label: c for c in slow}
    exact = by_label["graph-parallel exact"]
    stale = by_label["graph-parallel stale:4,compress=int8"]
    assert stale.seconds < 0.5 * exact.seconds and stale.bytes < exact.bytes / 10
    assert planner.choose(fast, "stale").seconds <= (
        {c.label: c for c in fast}["graph-parallel exact"].seconds)
    assert math.isclose(planner.choose(fast, "exact").seconds, 0.1, rel_tol=0.05)
    assert planner.choose(slow, "exact").label == "graph-parallel exact"


def test_every_registered_strategy_is_asked():
    """The planner ranks what each strategy's own hook predicts."""
    labels = {c.label.split(" ")[0].rstrip(",") for c in planner.predict(_probe(), 100)}
    assert labels == {GraphParallel.name, GradientOnly.name}


def test_bad_accept_is_named():
    with pytest.raises(ValueError, match="use one of exact, compressed, stale, approximate"):
        Planned(accept="fast")
    with pytest.raises(ValueError, match="probe_steps"):
        Planned(probe_steps=0)


def test_one_process_trains_graph_parallel():
    data = awkward_graph(num_features=4)
    result = train(GNN("gcn", 4, 8, 3), data, 2, strategy="auto", progress=False,
                   grad_sync=GradSync())
    assert result.plan is None and len(result.history) == 2
