"""``Auto``'s own measurements, run for real on 2 gloo ranks over loopback (the
other tests hand it a link): the link probe, the aggregation timing and the
warm-up's compute come back positive, finite and within generous bounds, the
same on every rank, and the probe's traffic is booked."""
import math

import pytest
import torch
from graphs import awkward_graph
from worlds import Battery

import pyg_dist
from pyg_dist.halo import Auto
from pyg_dist.halo.auto import probes

EPOCHS = 4


def body(parts):
    from pyg_dist.models import GNN
    from pyg_dist.train import train

    seen = {"probe": [], "spmm": []}
    probe, time_spmm = probes.probe_link, probes.time_spmm

    def probe_spy(ctx, width):
        seen["probe"].append(probe(ctx, width))
        return seen["probe"][-1]

    def spmm_spy(ctx, widths):
        seen["spmm"].append(time_spmm(ctx, widths))
        return seen["spmm"][-1]

    probes.probe_link, probes.time_spmm = probe_spy, spmm_spy
    try:
        data = pyg_dist.DistData.load(parts, halo=Auto(warmup=2))
        torch.manual_seed(0)
        model = GNN("gcn", data.x.size(1), 8, 3, dropout=0.0)
        result = train(model, data, epochs=EPOCHS, progress=False)
    finally:
        probes.probe_link, probes.time_spmm = probe, time_spmm
    link = data.ledger.choices.link
    return {**seen, "note": {"latency": link.latency, "bandwidth": link.bandwidth,
                             "compute": link.compute},
            "epoch_seconds": [e.seconds for e in result.history],
            "probe_bytes": data.ledger.layer_totals("auto/probe", 0)["bytes_sent"],
            "num_send": data.edge_index.plan.num_send,
            "choices": result.halo_choices}


def prepare(root):
    pyg_dist.partition(awkward_graph(num_nodes=240, num_edges=1400, num_features=48), 2,
                       root / "parts")
    return (str(root / "parts"),), None


PROBES = Battery(2, body, prepare)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return PROBES.results(tmp_path_factory)[1]


def test_the_link_probe_measures_loopback_within_sane_bounds(results):
    for rank, res in enumerate(results):
        assert len(res["probe"]) == 1, "measured once per graph, by the first layer to decide"
        latency, bandwidth = res["probe"][0]
        assert math.isfinite(latency) and 0.0 <= latency < 0.5, (rank, latency)
        # loopback through gloo: well above 1 MB/s, well below 1 TB/s
        assert math.isfinite(bandwidth) and 1e6 < bandwidth < 1e12, (rank, bandwidth)
        assert res["note"]["latency"] == latency and res["note"]["bandwidth"] == bandwidth
        assert res["probe"] == results[0]["probe"], "every rank sees the slowest rank's link"
        if res["num_send"]:
            assert res["probe_bytes"] > 0  # the probe's rows are booked


def test_the_aggregation_timing_is_positive_and_below_a_second(results):
    for res in results:
        assert len(res["spmm"]) == 1  # layer 0: its 48 input columns against 8 transformed
        timing = res["spmm"][0]
        assert sorted(timing) == [8, 48]
        for width, seconds in timing.items():
            assert math.isfinite(seconds) and 0.0 < seconds < 1.0, (width, seconds)
        assert timing == results[0]["spmm"][0], "every rank sees the slowest rank's timing"


def test_the_warmup_compute_is_positive_and_within_the_epochs_it_spans(results):
    for res in results:
        compute = res["note"]["compute"]
        assert math.isfinite(compute) and 0.0 < compute < 30.0, compute
        assert compute == results[0]["note"]["compute"]  # the slowest rank's
    # warm-up step 1 runs from epoch 2's first fetch to epoch 3's: within those two epochs
    assert compute <= max(sum(res["epoch_seconds"][1:3]) for res in results)
