"""The exact halo exchange on 4 gloo ranks: rows reach the right ranks, gradients
come back to their owners, the ledger counts every byte, and loading refuses a
folder that does not fit the group."""
import pytest
import torch
from graphs import awkward_graph
from worlds import Battery

import pyg_dist
from pyg_dist.halo import HaloChannel
from pyg_dist.halo.exchange import exchange_halo

WORLD = 4


def ranks_body(dirs):
    out = {}
    data = pyg_dist.DistData.load(dirs["main"])
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(data.meta.num_nodes, 3, generator=g)  # same on every rank
    for transport in ("p2p", "all_to_all"):
        channel = HaloChannel(data.edge_index.plan, pyg_dist.halo.Ledger(), None, transport)
        x = (data.global_id.view(-1, 1).float() * torch.tensor([1.0, 10.0, 100.0]))
        x.requires_grad_()
        halo = exchange_halo(x, channel, "probe")
        (halo * weight[data.edge_index.plan.halo_global_id]).sum().backward()
        low = exchange_halo(x.detach().to(torch.bfloat16), channel, "probe-bf16")
        out[transport] = {
            "halo": halo.detach(), "x_grad": x.grad, "low": low,
            "ledger": channel.ledger.rows(),
        }
    out["global_id"] = data.global_id
    out["halo_global_id"] = data.edge_index.plan.halo_global_id
    out["num_send"] = data.edge_index.plan.num_send
    out["errors"] = {}
    for key in ("three", "mixed"):
        path = dirs[key] if key == "three" else dirs["main" if data.rank < 2 else "other"]
        try:
            pyg_dist.DistData.load(path)
            out["errors"][key] = None
        except ValueError as exc:
            out["errors"][key] = str(exc)
    return out


def prepare(root):
    data = awkward_graph(num_nodes=300, num_edges=1500)
    dirs = {k: str(root / k) for k in ("main", "other", "three")}
    pyg_dist.partition(data, WORLD, dirs["main"], method="random", seed=1)
    pyg_dist.partition(data, WORLD, dirs["other"], method="random", seed=2)
    pyg_dist.partition(data, 3, dirs["three"], method="random", seed=1)
    return (dirs,), data


EXCHANGE = Battery(WORLD, ranks_body, prepare)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return EXCHANGE.results(tmp_path_factory)


@pytest.mark.parametrize("transport", ["p2p", "all_to_all"])
def test_halo_rows_are_the_owners_rows(results, transport):
    _, per_rank = results
    for res in per_rank:
        expected = res["halo_global_id"].view(-1, 1).float() * torch.tensor([1.0, 10.0, 100.0])
        assert torch.equal(res[transport]["halo"], expected)
        assert torch.equal(res[transport]["low"], expected.to(torch.bfloat16))  # bit for bit


@pytest.mark.parametrize("transport", ["p2p", "all_to_all"])
def test_halo_gradients_return_to_owners(results, transport):
    data, per_rank = results
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(data.num_nodes, 3, generator=g)
    expected = torch.zeros(data.num_nodes, 3)
    for res in per_rank:  # every rank that holds node v as halo sends weight[v] back
        expected.index_add_(0, res["halo_global_id"], weight[res["halo_global_id"]])
    for res in per_rank:
        assert torch.allclose(res[transport]["x_grad"], expected[res["global_id"]], atol=1e-6)


@pytest.mark.parametrize("transport", ["p2p", "all_to_all"])
def test_ledger_counts_payload_bytes(results, transport):
    _, per_rank = results
    for res in per_rank:
        rows = {(r["layer"], r["direction"]): r for r in res[transport]["ledger"]}
        fwd, bwd = rows[("probe", "fwd")], rows[("probe", "bwd")]
        halo, send = res["halo_global_id"].numel(), res["num_send"]
        assert (fwd["bytes_sent"], fwd["bytes_recv"]) == (send * 12, halo * 12)
        assert (bwd["bytes_sent"], bwd["bytes_recv"]) == (halo * 12, send * 12)
        assert fwd["exchanges"] == bwd["exchanges"] == 1
        assert rows[("probe-bf16", "fwd")]["bytes_sent"] == send * 6
    assert sum(r["num_send"] for r in per_rank) == sum(r["halo_global_id"].numel()
                                                       for r in per_rank)


def test_world_size_must_match_part_count(results):
    _, per_rank = results
    for res in per_rank:
        assert "found 3 partitions" in res["errors"]["three"]
        assert "re-partition with num_parts=4 or launch 3 ranks" in res["errors"]["three"]


def test_parts_of_different_partitionings_are_refused(results):
    _, per_rank = results
    for res in per_rank:
        assert "different partitioning" in res["errors"]["mixed"]
        assert "same partition folder" in res["errors"]["mixed"]
