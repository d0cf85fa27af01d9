"""``Auto``: its cost model on given measurements, and its decisions on real
gloo ranks (one decision for all ranks, applied as chosen, kept across a
checkpoint)."""
import pytest
import torch
from graphs import awkward_graph
from hetero.hetero_graphs import two_community_hetero
from tolerances import assert_close
from torch_geometric.data import Data
from worlds import Battery

import pyg_dist
from pyg_dist.config import Checkpoint
from pyg_dist.halo import Auto, Isolated, Stale, parse_policy
from pyg_dist.halo.auto import probes
from pyg_dist.halo.auto.cost import tau

#: Rows one exchange moves (busiest rank), forward, and the sums over ranks.
ROWS = {"moved": 2000.0, "fwd": 1000.0, "sent_fwd": 1500.0, "sent_bwd": 1500.0}
GBIT = {"latency": 1e-4, "bandwidth": 125e6, "compute": 0.5}


def test_spec_round_trip_and_bad_arguments():
    assert parse_policy("auto") == Auto() and Auto().spec() == "auto"
    for policy in (Auto(max_staleness=2), Auto(compress=None), Auto(epochs=50, warmup=4),
                   Auto(cache_inputs=False), Auto(isolate_below=0)):
        assert parse_policy(policy.spec()) == policy
    assert parse_policy("auto", compress="fp16").codec.name == "fp16"
    with pytest.raises(ValueError, match="warmup >= 2"):
        Auto(warmup=1)
    with pytest.raises(ValueError, match="max_staleness >= 1"):
        parse_policy("auto,max_staleness=0")
    with pytest.raises(ValueError, match="0 <= isolate_below < 1"):
        Auto(isolate_below=1.0)


def test_negligible_exchange_stays_exact():
    # 2 x 1e-4 s + 2000 rows x 64 B / 125 MB/s = 1.2 ms < 1% of 500 ms
    assert Auto().cost.exchange_plan(16, ROWS, GBIT) == (None, 1)
    assert Auto(negligible=0.001).cost.exchange_plan(16, ROWS, GBIT) == ("int8", 2)


def test_costly_exchange_gets_int8_then_the_least_staleness_that_hides_it():
    slow = {**GBIT, "compute": 0.25}
    # fp32 rows of 256: 2 x 1e-4 + 2000 x 1024 / 125e6 = 16.6 ms > 2.5 ms budget;
    # int8: 2000 x 260 / 125e6 + 2e-4 = 4.4 ms -> 1.8 budgets -> every 2
    assert Auto().cost.exchange_plan(256, ROWS, slow) == ("int8", 2)
    assert Auto().cost.exchange_plan(256, ROWS, {**slow, "bandwidth": 12.5e6}) == ("int8", 4)
    assert Auto(max_staleness=2).cost.exchange_plan(256, ROWS, {**slow, "bandwidth": 12.5e6}) \
        == ("int8", 2)
    # without compression the staleness alone must hide 16.6 ms: 6.6 budgets -> 4 (cap)
    assert Auto(compress=None).cost.exchange_plan(256, ROWS, slow) == (None, 4)


def test_caching_a_wide_input_pays_only_over_many_steps_or_slow_aggregation():
    auto = Auto(compress=None)
    busy = {**GBIT, "compute": 0.02}  # 1% of a step: 0.2 ms
    cheap = {16: 1e-4, 1433: 1e-4}  # aggregation costs the same at any width
    costly = {16: 1e-4, 1433: 5e-3}  # aggregating 1433 columns: 50x the time
    # once: 1000 rows x 5732 B / 125 MB/s = 46 ms; exchanging 16 columns: ~0.5 ms a step
    assert auto.cost.cache_pays(1433, 16, ROWS, busy, None, 1, 200, cheap)
    assert not auto.cost.cache_pays(1433, 16, ROWS, busy, None, 1, 20, cheap)
    assert not auto.cost.cache_pays(1433, 16, ROWS, busy, None, 1, 200, costly)
    assert auto.cost.cache_pays(64, 128, ROWS, busy, None, 1, 1, costly)  # narrower: always


def test_caching_or_exchanging_in_the_same_time_sends_fewer_bytes():
    # a 0.5 s step: 0.9 s over 200 steps is under 1% of the run's compute
    costly = {16: 1e-4, 1433: 5e-3}
    # cached: 1500 rows x 1433 x 4 B = 8.6 MB; exchanged: 200 x 3000 rows x 64 B = 38 MB
    assert Auto(compress=None).cost.cache_pays(1433, 16, ROWS, GBIT, None, 1, 200, costly)
    # int8: the one fetch is 1500 x 1437 B = 2.2 MB; the exchange 200 x 3000 x 20 B = 12 MB
    assert Auto().cost.cache_pays(1433, 16, ROWS, GBIT, "int8", 1, 200, costly)
    assert not Auto().cost.cache_pays(1433, 16, ROWS, GBIT, "int8", 4, 20, costly)


def test_prediction_counts_every_refresh_and_both_directions():
    auto = Auto()
    predicted = auto.cost.predict(ROWS, 16, "int8", 4, 10, GBIT, once=False)
    assert predicted["predicted_bytes"] == 3 * (1500 + 1500) * 20  # ceil(10 / 4) refreshes
    assert predicted["predicted_seconds"] == pytest.approx(3 * tau(2000, 20, GBIT))
    once = auto.cost.predict(ROWS, 1433, None, 1, 10, GBIT, once=True)
    assert once["predicted_bytes"] == 1500 * 4 * 1433
    once = auto.cost.predict(ROWS, 1433, "int8", 1, 10, GBIT, once=True)
    assert once["predicted_bytes"] == 1500 * (1433 + 4)


class Interrupted(Exception):
    pass


def _run(parts, link, epochs, ckpt=None, fail_at=None, resume=False, planned=None, hidden=8,
         halo=None, spmm=None, complete=False):
    """Trains a 2-layer GCN (input 48 columns) with Auto(warmup=2) (or
    ``halo``) on a link the probe is told to see (and, given ``spmm``, the
    seconds of one aggregation per width the timing is told to see); with
    ``complete``, its layers declare that they need every halo row."""
    from pyg_dist.models import GNN
    from pyg_dist.train import train

    probes.probe_link = lambda ctx, width: link
    if spmm is not None:
        probes.time_spmm = lambda ctx, widths: {w: spmm[w] for w in widths}
    data = pyg_dist.DistData.load(parts, halo=halo or Auto(warmup=2, epochs=planned))
    torch.manual_seed(0)
    model = GNN("gcn", data.x.size(1), hidden, 3, dropout=0.5)
    for conv in model.convs if complete else ():
        conv.complete_halo = True
    torch.manual_seed(1000 + data.rank)

    def stop(stats):
        if stats.epoch == fail_at:
            raise Interrupted(f"stopped at epoch {stats.epoch}")

    try:
        result = train(model, data, epochs, progress=False, callback=stop,
                       checkpoint=Checkpoint(ckpt, every=2, resume=resume) if ckpt else None)
    except Interrupted:
        return None
    return {
        "choices": result.halo_choices,
        "skipped": data.ledger.totals()["skipped"],
        "bytes": {layer: data.ledger.layer_totals(layer, 0)["bytes_sent"]
                  for layer in ("convs.0", "convs.1")},
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "refreshes": sorted(step for (step, layer, direction), e in data.ledger.entries.items()
                            if layer == "convs.1" and direction == "fwd" and e.exchanges),
        "starts": dict(data.ledger.choices.starts),
    }


def two_communities(num_nodes=240, num_edges=1400, crossing=12, num_features=48, seed=0):
    """Two halves, densely wired inside, joined by ``crossing`` edges: cut in
    two, each node has ~1% of its in-neighbours on the other rank."""
    g = torch.Generator().manual_seed(seed)
    half = num_nodes // 2
    side = torch.randint(0, 2, (num_edges,), generator=g) * half
    src = torch.cat([torch.randint(0, half, (num_edges,), generator=g) + side,
                     torch.randint(0, half, (crossing,), generator=g)])
    dst = torch.cat([torch.randint(0, half, (num_edges,), generator=g) + side,
                     torch.randint(half, num_nodes, (crossing,), generator=g)])
    train = torch.rand(num_nodes, generator=g) < 0.5
    return Data(edge_index=torch.stack([src, dst]), num_nodes=num_nodes,
                x=torch.randn(num_nodes, num_features, generator=g),
                y=torch.randint(0, 3, (num_nodes,), generator=g),
                train_mask=train, val_mask=~train, test_mask=~train)


def _run_hgt(parts, link, epochs):
    """Trains HGT on a heterogeneous folder under Auto(warmup=2) on a link the
    probe is told to see; its choices."""
    from pyg_dist.models.hetero import hetero_model
    from pyg_dist.nn import to_distributed
    from pyg_dist.train import train

    probes.probe_link = lambda ctx, width: link
    data = pyg_dist.DistHeteroData.load(parts, halo=Auto(warmup=2))
    model = to_distributed(hetero_model("hgt", data.metadata(), 8, 8, 3, "paper", seed=0))
    result = train(model, data, epochs, progress=False)
    return {"choices": result.halo_choices,
            "bytes": sum(r["bytes_sent"] for r in data.ledger.rows() if r["direction"] == "fwd")}


def body(parts, light, ckpt, light_hetero):
    slow = (0.0, 1e4)  # 10 kB/s: every exchange is expensive
    fast = (0.0, 1e12)
    real_probe, real_spmm = probes.probe_link, probes.time_spmm
    try:
        # on a free link: aggregating the 48 input columns is slow (cache loses) or free (wins)
        out = {"fast": _run(parts, fast, 6, spmm={8: 1e-6, 48: 1.0}),
               "fast_cheap_input": _run(parts, fast, 6, spmm={8: 1.0, 48: 1e-6})}
        probes.time_spmm = real_spmm
        out |= {"slow": _run(parts, slow, 8),
                "narrow": _run(parts, slow, 4, hidden=64),
                "hand": _run(parts, slow, 8, halo=Stale(4, compress="int8", cache_inputs=False)),
                "light": _run(light, slow, 6),
                "light_isolated": _run(light, slow, 6, halo=Isolated()),
                "light_never": _run(light, slow, 6, halo=Auto(warmup=2, isolate_below=0)),
                "light_stale": _run(light, slow, 6, halo=Stale(2)),
                "light_complete": _run(light, slow, 6, complete=True),
                "light_hgt": _run_hgt(light_hetero, slow, 4)}
        _run(parts, slow, 8, ckpt=ckpt, fail_at=5)
        out["resumed"] = _run(parts, (0.0, 1e12), 8, ckpt=ckpt, resume=True)  # the link changed
    finally:  # the ranks run other modules' batteries next (tests/worlds.py)
        probes.probe_link, probes.time_spmm = real_probe, real_spmm
    return out


def prepare(root):
    pyg_dist.partition(awkward_graph(num_nodes=240, num_edges=1400, num_features=48), 2,
                       root / "parts")
    pyg_dist.partition(two_communities(), 2, root / "light")
    pyg_dist.partition(two_community_hetero(), 2, root / "light_hetero")
    return (str(root / "parts"), str(root / "light"), str(root / "ckpt"),
            str(root / "light_hetero")), None


AUTO = Battery(2, body, prepare)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return AUTO.results(tmp_path_factory)[1]


def test_every_rank_makes_the_same_choice(results):
    for run in ("slow", "fast"):
        mine, theirs = results[0][run]["choices"], results[1][run]["choices"]
        assert {k: v for k, v in mine.items() if k != "epoch"} == \
            {k: v for k, v in theirs.items() if k != "epoch"}  # epoch times are each rank's


def test_fast_link_stays_exact_slow_link_compresses_and_skips(results):
    fast, slow = results[0]["fast"]["choices"], results[0]["slow"]["choices"]
    # on a free link only aggregation time decides whether layer 0 caches its input:
    # 6 x 1 s aggregating 48 columns against 6 x 2 us for the 8 transformed ones
    assert fast["convs.0"]["choice"] == "exact,cache_inputs=false"
    assert not fast["convs.0"]["cache_input"]
    cheap = results[0]["fast_cheap_input"]["choices"]["convs.0"]  # 6 us against 12 s
    assert cheap["choice"] == "exact" and cheap["cache_input"]
    assert fast["convs.1"]["choice"] == "exact"
    # 48 input columns against 8 transformed ones over 6 remaining steps of a slow link
    assert not slow["convs.0"]["cache_input"]
    assert slow["convs.0"]["choice"] == Stale(4, compress="int8", cache_inputs=False).spec()
    assert slow["convs.1"]["choice"] == Stale(4, compress="int8").spec()
    assert results[0]["slow"]["skipped"] > results[0]["fast"]["skipped"]
    for layer in ("convs.0", "convs.1"):  # bytes follow from the plan: predicted exactly
        assert slow[layer]["measured_bytes"] == slow[layer]["predicted_bytes"] > 0
    for layer in ("convs.0", "convs.1"):
        assert fast[layer]["measured_bytes"] == fast[layer]["predicted_bytes"] > 0
    # compute: the slowest rank's wall time of warm-up step 1 (step 2 decides), less
    # what its exchanges take on the link (nothing on a free one)
    wall = max(res["fast"]["starts"][2] - res["fast"]["starts"][1] for res in results)
    assert fast["epoch"]["compute"] == pytest.approx(wall, rel=1e-6, abs=1e-6)


def test_a_stale_choice_continues_the_warmup_run_as_if_chosen_from_step_0(results):
    # warm-up: int8 rows at step 0, reused at step 1; the choice refreshes at step 4
    for rank in range(2):
        auto, hand = results[rank]["slow"], results[rank]["hand"]
        assert auto["bytes"] == hand["bytes"]
        for name, value in hand["state"].items():
            assert_close(auto["state"][name], value, what=f"rank {rank}: {name}")


def test_resume_keeps_the_choice_and_ends_with_the_uninterrupted_weights(results):
    for rank in range(2):
        resumed, straight = results[rank]["resumed"], results[rank]["slow"]
        assert resumed["choices"]["convs.1"]["choice"] == straight["choices"]["convs.1"]["choice"]
        for name, value in straight["state"].items():
            assert_close(resumed["state"][name], value, what=f"rank {rank}: {name}")


def test_an_input_no_wider_than_the_output_is_cached_from_the_start(results):
    layer = results[0]["narrow"]["choices"]["convs.0"]  # 48 columns in, 64 out
    assert layer["choice"] == "exact" and layer["cache_input"] and layer["from_step"] == 1
    assert layer["measured_bytes"] == layer["predicted_bytes"] > 0  # the one fetch


def test_a_graph_with_a_small_halo_trains_isolated_from_the_first_step(results):
    for rank in range(2):
        auto, hand = results[rank]["light"], results[rank]["light_isolated"]
        for layer in ("convs.0", "convs.1"):
            choice = auto["choices"][layer]
            assert choice["choice"] == "isolated" and choice["from_step"] == 0
            assert 0 < choice["halo_share"] < 0.05
            assert choice["measured_bytes"] == choice["predicted_bytes"] == 0
        assert auto["bytes"] == {"convs.0": 0, "convs.1": 0}
        for name, value in hand["state"].items():
            assert_close(auto["state"][name], value, what=f"rank {rank}: {name}")
        # the same graph with isolation turned off exchanges its halo
        never = results[rank]["light_never"]
        assert all(c["choice"] != "isolated" for k, c in never["choices"].items()
                   if k != "epoch")
        assert never["bytes"]["convs.1"] > 0
    # the well-mixed graph's halo is far above the threshold: nothing isolated there
    assert all(c["choice"] != "isolated" for k, c in results[0]["slow"]["choices"].items()
               if k != "epoch")


def test_a_layer_that_needs_every_halo_row_is_never_isolated(results):
    """The same GCN on the same small-halo graph as above, its layers
    declaring ``complete_halo``: they exchange their halo under a choice
    that keeps every row, while the plain GCN above is isolated."""
    for rank in range(2):
        choices = results[rank]["light_complete"]["choices"]
        for layer in ("convs.0", "convs.1"):
            assert parse_policy(choices[layer]["choice"]).name in ("exact", "stale"), choices
            assert "halo_share" not in choices[layer]
        assert results[rank]["light_complete"]["bytes"]["convs.1"] > 0
        assert results[rank]["light"]["choices"]["convs.1"]["choice"] == "isolated"


def test_hgt_on_a_small_halo_keeps_every_row_and_trains(results):
    """Each relation of the two-community graph has well under 5% of its
    in-neighbours on the other rank, which isolates a GCN; HGT needs every
    halo row (its softmax runs over all of a node's in-edges), so Auto keeps
    them, and training runs to the end."""
    for rank in range(2):
        run = results[rank]["light_hgt"]
        layers = {k: c for k, c in run["choices"].items() if k != "epoch"}
        assert len(layers) >= 4, layers  # two layers, each reading both source types
        for layer, choice in layers.items():
            assert parse_policy(choice["choice"]).name in ("exact", "stale"), (layer, choice)
        assert run["bytes"] > 0


def test_stale_refreshes_on_schedule_on_a_rank_without_halo_rows(results):
    # the cut edges point one way: one rank sends halo rows it never receives any of,
    # and must still join every refresh (it waited for rows it does not have, forever)
    for rank in range(2):
        assert results[rank]["light_stale"]["refreshes"] == [0, 2, 4]
