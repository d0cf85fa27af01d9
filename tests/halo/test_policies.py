"""Halo policies pinned to their semantics on 4 gloo ranks, each against an
exact reference built from the same layer fed the halo the policy promises."""
import pytest
import torch
import torch.distributed as dist
from graphs import awkward_graph
from tolerances import assert_close
from torch_geometric.nn import GCNConv, SAGEConv

import pyg_dist
from pyg_dist.halo import (
    Adaptive,
    Exact,
    HaloPolicy,
    HaloRows,
    Isolated,
    Pipelined,
    Sampled,
    Stale,
)
from pyg_dist.nn import DistGCNConv, DistSAGEConv

WORLD = 4
STEPS = 7
F_IN, F_OUT = 4, 8  # in < out: layers aggregate raw inputs, so halo rows are input rows


class Given(HaloPolicy):
    """Test policy: hands the layer prescribed halo rows (optionally tracking their grad)."""

    def __init__(self, rows):
        super().__init__(cache_inputs=False)
        self.rows = rows

    def fetch(self, x, ctx):
        return HaloRows(self.rows)


def inputs(num_nodes, step, requires_grad=True):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(num_nodes, F_IN, generator=g), torch.randn(num_nodes, F_OUT, generator=g)


def make_layer(kind, policy):
    torch.manual_seed(0)
    if kind == "gcn":
        return DistGCNConv(F_IN, F_OUT, halo=policy)
    return DistSAGEConv(F_IN, F_OUT, aggr="mean", halo=policy)


def run_steps(data, layer, steps, xs=None, remote_grads=False):
    """Runs the layer for ``steps`` steps on seeded inputs; returns per-step
    outputs, input gradients and the ledger rows of the layer."""
    n = data.meta.num_nodes
    outs, grads = [], []
    for t in range(steps):
        x_all, up = inputs(n, t) if xs is None else xs(t)
        x = x_all[data.global_id].clone().requires_grad_()
        out = layer(x, data.edge_index)
        (out * up[data.global_id]).sum().backward()
        outs.append(out.detach())
        grads.append(x.grad.clone())
        data.ledger.next_step()
    return outs, grads


def reference_with_halo(data, kind, t, halo_step, want_halo_grad=False):
    """The layer at step t fed halo rows of the input of step ``halo_step``."""
    n = data.meta.num_nodes
    x_all, up = inputs(n, t)
    halo_src = inputs(n, halo_step)[0][data.edge_index.plan.halo_global_id].clone()
    halo_src.requires_grad_(want_halo_grad)
    layer = make_layer(kind, Given(halo_src))
    x = x_all[data.global_id].clone().requires_grad_()
    out = layer(x, data.edge_index)
    (out * up[data.global_id]).sum().backward()
    return out.detach(), x.grad, halo_src.grad


def ledger_rows(data, layer_name, direction="fwd"):
    return {r["step"]: r for r in data.ledger.rows()
            if r["layer"] == layer_name and r["direction"] == direction}


def fresh(dirs, **kwargs):
    return pyg_dist.DistData.load(dirs["main"], **kwargs)


def routed_halo_grad(data, halo_grad):
    """Every rank's gradient of its halo rows, summed onto the owners' rows."""
    n = data.meta.num_nodes
    routed = torch.zeros(n, F_IN).index_add_(0, data.edge_index.plan.halo_global_id, halo_grad)
    dist.all_reduce(routed)
    return routed[data.global_id]


def check_stale(dirs):
    out = {}
    for kind in ("gcn", "sage"):
        for every in (1, 3):
            for grads in ("accumulate", "drop"):
                data = fresh(dirs)
                layer = make_layer(kind, Stale(every=every, stale_grads=grads))
                outs, x_grads = run_steps(data, layer, STEPS)
                fwd_err = bwd_err = 0.0
                pending = 0.0  # remote gradients accumulated since the last refresh
                for t in range(STEPS):
                    refresh = t - t % every
                    ref, local, halo_grad = reference_with_halo(data, kind, t, refresh, True)
                    remote = routed_halo_grad(data, halo_grad)
                    if t == refresh:
                        expected = local + remote + (pending if grads == "accumulate" else 0.0)
                        pending = 0.0
                    else:
                        expected = local
                        pending = pending + remote
                    fwd_err = max(fwd_err, (outs[t] - ref).abs().max().item())
                    bwd_err = max(bwd_err, (x_grads[t] - expected).abs().max().item())
                rows = ledger_rows(data, data.edge_index.registry.name(layer))
                bwd = ledger_rows(data, data.edge_index.registry.name(layer), "bwd")
                out[(kind, every, grads)] = {
                    "fwd_err": fwd_err, "bwd_err": bwd_err,
                    "exchanged": [rows[t]["exchanges"] if t in rows else 0 for t in range(STEPS)],
                    "staleness": [rows[t]["staleness"] if t in rows else 0 for t in range(STEPS)],
                    "bwd_steps": sorted(t for t, r in bwd.items() if r["exchanges"]),
                }
        # Stale(every=1) is Exact, gradients included.
        a, b = fresh(dirs), fresh(dirs)
        sa, ga = run_steps(a, make_layer(kind, Stale(every=1)), 3)
        sb, gb = run_steps(b, make_layer(kind, Exact(cache_inputs=False)), 3)
        out[(kind, "k1")] = max(max((x - y).abs().max().item() for x, y in zip(p, q))
                                for p, q in ((sa, sb), (ga, gb)))
    return out


def check_pipelined(dirs):
    out = {}
    for kind in ("gcn", "sage"):
        data = fresh(dirs)
        layer = make_layer(kind, Pipelined())
        outs, grads = run_steps(data, layer, STEPS)
        fwd_err, bwd_err = 0.0, 0.0
        remote = {}
        for t in range(STEPS):
            ref_out, local_grad, halo_grad = reference_with_halo(
                data, kind, t, max(t - 1, 0), want_halo_grad=True)
            remote[t] = routed_halo_grad(data, halo_grad)
            fwd_err = max(fwd_err, (outs[t] - ref_out).abs().max().item())
            if t >= 2:  # step t applies the halo gradients of step t-1
                expected = local_grad + remote[t - 1]
                bwd_err = max(bwd_err, (grads[t] - expected).abs().max().item())
        data.edge_index.flush()
        rows = ledger_rows(data, data.edge_index.registry.name(layer))
        out[kind] = {"fwd_err": fwd_err, "bwd_err": bwd_err,
                     "overlapped": sum(r["overlapped"] for r in rows.values())}
    return out


def check_adaptive(dirs):
    out = {}
    n = None
    # Unchanged inputs and no forced refresh: nothing after the first step.
    data = fresh(dirs)
    n = data.meta.num_nodes
    layer = make_layer("gcn", Adaptive(tol=1e-3, max_staleness=None))
    run_steps(data, layer, 5, xs=lambda t: inputs(n, 0))
    rows = ledger_rows(data, data.edge_index.registry.name(layer))
    out["constant_bytes"] = [rows[t]["bytes_sent"] if t in rows else 0 for t in range(5)]
    # Slowly drifting inputs: never older than max_staleness.
    data = fresh(dirs)
    layer = make_layer("gcn", Adaptive(tol=0.05, max_staleness=3))

    def drifting(t):
        x0, up = inputs(n, 0)
        return x0 * (1 + 0.01 * t), up

    run_steps(data, layer, 9, xs=drifting)
    rows = ledger_rows(data, data.edge_index.registry.name(layer))
    out["staleness"] = [rows[t]["staleness"] for t in sorted(rows)]
    out["skipped"] = sum(r["skipped"] for r in rows.values())
    # tol=0 with inputs that change every step is Exact.
    a, b = fresh(dirs), fresh(dirs)
    sa, ga = run_steps(a, make_layer("sage", Adaptive(tol=0.0)), 3)
    sb, gb = run_steps(b, make_layer("sage", Exact()), 3)
    out["tol0"] = max(max((x - y).abs().max().item() for x, y in zip(p, q))
                      for p, q in ((sa, sb), (ga, gb)))
    return out


def check_sampled(dirs):
    out = {}
    for kind in ("gcn", "sage"):
        a, b = fresh(dirs), fresh(dirs)
        sa, ga = run_steps(a, make_layer(kind, Sampled(1.0)), 3)
        sb, gb = run_steps(b, make_layer(kind, Exact()), 3)
        out[(kind, "p1")] = max(max((x - y).abs().max().item() for x, y in zip(p, q))
                                for p, q in ((sa, sb), (ga, gb)))
        data = fresh(dirs)
        layer = make_layer(kind, Sampled(0.5, seed=3))
        run_steps(data, layer, 4)
        sent = sum(r["bytes_sent"] for r in ledger_rows(data, data.edge_index.registry.name(layer))
                   .values())
        full = 4 * data.edge_index.plan.num_send * F_IN * 4
        out[(kind, "fraction")] = sent / max(full, 1)
    # p=0.5 on one layer, against the layer on the graph restricted to the sample.
    data = fresh(dirs)
    policy = Sampled(0.5, seed=3)
    layer = make_layer("sage", policy)
    x_all, _ = inputs(data.meta.num_nodes, 0)
    x = x_all[data.global_id]
    got = layer(x, data.edge_index)
    keep = pyg_dist.halo.sampled.node_uniform(data.edge_index.plan.halo_global_id, 3, 0) < 0.5
    halo = x_all[data.edge_index.plan.halo_global_id] * keep.view(-1, 1)
    restricted, _ = data.edge_index.restrict(keep)
    expected = make_layer("sage", Given(halo))(x, restricted)
    out["restricted_err"] = (got - expected).abs().max().item()
    return out


def check_isolated(dirs):
    out = {}
    for kind in ("gcn", "sage"):
        data = fresh(dirs)
        layer = make_layer(kind, Isolated())
        x_all, up = inputs(data.meta.num_nodes, 0)
        x = x_all[data.global_id].clone().requires_grad_()
        y = layer(x, data.edge_index)
        (y * up[data.global_id]).sum().backward()
        out[kind] = {"out": y.detach(), "x_grad": x.grad, "global_id": data.global_id,
                     "bytes": data.ledger.totals()["bytes_fwd"] + data.ledger.totals()["bytes_bwd"],
                     "state": layer.state_dict()}
    return out


def check_input_caching(dirs):
    """A two-layer model fed static features: layer 0's halo crosses once."""
    from pyg_dist.models import GNN

    res = {}
    for cache in (True, False):
        data = fresh(dirs, halo=Exact(cache_inputs=cache))
        torch.manual_seed(0)
        model = GNN("gcn", F_IN, 6, 3, dropout=0.0)
        x = inputs(data.meta.num_nodes, 0)[0][data.global_id]
        outs = []
        for _ in range(4):
            outs.append(model(x, data.edge_index).detach())
            outs[-1].sum()
            data.ledger.next_step()
        rows = data.ledger.rows()
        res[cache] = {
            "outs": outs,
            "layer0": [r["bytes_sent"] for r in rows if r["layer"] == "convs.0"],
            "total": sum(r["bytes_sent"] for r in rows),
        }
    return res


F_WIDE = 12  # wider than the hidden layer: without caching, layer 0 transforms first


def wide_inputs(num_nodes):
    return torch.randn(num_nodes, F_WIDE, generator=torch.Generator().manual_seed(7))


def check_shared_dropout(dirs):
    """A two-layer GCN with dropout 0.5 trained for a few steps on static
    features: per step, outputs, parameter gradients and layer 0's bytes."""
    from pyg_dist.models import GNN
    from pyg_dist.train import all_reduce_gradients

    res = {}
    for cache in (True, False):
        data = fresh(dirs, halo=Exact(cache_inputs=cache))
        torch.manual_seed(0)
        model = GNN("gcn", F_WIDE, 6, 3, dropout=0.5)
        x = wide_inputs(data.meta.num_nodes)[data.global_id]
        steps = []
        for _ in range(4):
            model.zero_grad()
            out = model(x, data.edge_index)
            (out * out.detach().sin()).sum().backward()
            all_reduce_gradients(model)
            steps.append({"out": out.detach(),
                          "grads": {k: p.grad.clone() for k, p in model.named_parameters()}})
            data.ledger.next_step()
        res[cache] = {
            "steps": steps,
            "layer0": [sum(r["bytes_sent"] for r in data.ledger.rows()
                           if r["layer"] == "convs.0" and r["step"] == t) for t in range(4)],
            "seed": data.edge_index.registry.dropout.seed,
            "state": model.state_dict(),
            "global_id": data.global_id,
        }
    return res


def check_compression(dirs):
    res = {}
    data = fresh(dirs)
    x_all, _ = inputs(data.meta.num_nodes, 0)
    x = x_all[data.global_id]
    exact = make_layer("sage", Exact())(x, data.edge_index)
    for codec in ("fp16", "bf16", "int8"):
        data = fresh(dirs)
        layer = make_layer("sage", Exact(compress=codec))
        y = layer(x, data.edge_index)
        rows = ledger_rows(data, data.edge_index.registry.name(layer))
        res[codec] = {"err": (y - exact).abs().max().item(),
                      "bytes": rows[0]["bytes_sent"] if rows else 0,
                      "num_send": data.edge_index.plan.num_send}
    return res


def body(dirs):
    return {
        "stale": check_stale(dirs),
        "pipelined": check_pipelined(dirs),
        "adaptive": check_adaptive(dirs),
        "sampled": check_sampled(dirs),
        "isolated": check_isolated(dirs),
        "caching": check_input_caching(dirs),
        "compression": check_compression(dirs),
        "dropout": check_shared_dropout(dirs),
    }


@pytest.fixture(scope="module")
def graph():
    return awkward_graph(num_nodes=200, num_edges=1000, seed=4)


@pytest.fixture(scope="module")
def results(graph, tmp_path_factory):
    root = tmp_path_factory.mktemp("policies")
    dirs = {"main": str(root / "main")}
    pyg_dist.partition(graph, WORLD, dirs["main"], method="metis", seed=1)
    return pyg_dist.launch(body, WORLD, args=(dirs,), timeout=900)


@pytest.mark.parametrize("grads", ["accumulate", "drop"])
def test_stale_refreshes_exactly_every_k_steps(results, grads):
    """Forward uses the halo of the last refresh; backward sends gradients on
    refresh steps only: those of the step, plus (accumulate) the ones of the
    steps that reused the rows since the previous refresh."""
    for res in results:
        for kind in ("gcn", "sage"):
            for every in (1, 3):
                r = res["stale"][(kind, every, grads)]
                assert r["fwd_err"] < 1e-5, (kind, every)
                assert r["bwd_err"] < 1e-5, (kind, every)
                refreshes = [t for t in range(STEPS) if t % every == 0]
                if r["exchanged"] != [0] * STEPS:  # ranks with a halo at all
                    assert [t for t, e in enumerate(r["exchanged"]) if e] == refreshes
                    assert r["staleness"] == [t % every for t in range(STEPS)]
                    assert r["bwd_steps"] == refreshes
            assert res["stale"][(kind, "k1")] < 1e-6


def test_pipelined_uses_last_steps_halo_and_gradients(results):
    for res in results:
        for kind in ("gcn", "sage"):
            r = res["pipelined"][kind]
            assert r["fwd_err"] < 1e-5, kind
            assert r["bwd_err"] < 1e-5, kind


def test_adaptive_skips_unchanged_blocks_and_bounds_staleness(results):
    any_halo = False
    for res in results:
        r = res["adaptive"]
        assert r["constant_bytes"][1:] == [0, 0, 0, 0]
        any_halo |= r["constant_bytes"][0] > 0
        assert max(r["staleness"], default=0) <= 3
        assert r["tol0"] < 1e-6
    assert any_halo
    assert sum(res["adaptive"]["skipped"] for res in results) > 0


def test_sampled_p1_is_exact_and_p_halves_traffic(results):
    for res in results:
        for kind in ("gcn", "sage"):
            assert res["sampled"][(kind, "p1")] < 1e-6
        assert res["sampled"]["restricted_err"] < 1e-6
    fractions = [res["sampled"][("gcn", "fraction")] for res in results]
    assert 0.3 < sum(fractions) / len(fractions) < 0.7


@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_isolated_is_pyg_on_each_part_alone(results, graph, kind):
    for res in results:
        r = res["isolated"][kind]
        assert r["bytes"] == 0
        owned = r["global_id"]
        local = torch.full((graph.num_nodes,), -1, dtype=torch.long)
        local[owned] = torch.arange(owned.numel())
        src, dst = graph.edge_index
        keep = (local[src] >= 0) & (local[dst] >= 0)
        sub = torch.stack([local[src[keep]], local[dst[keep]]])
        ref = (GCNConv if kind == "gcn" else SAGEConv)(F_IN, F_OUT)
        ref.load_state_dict(r["state"])
        x_all, up = inputs(graph.num_nodes, 0)
        x = x_all[owned].clone().requires_grad_()
        y = ref(x, sub)
        (y * up[owned]).sum().backward()
        assert_close(r["out"], y, what=f"isolated {kind} output")
        assert_close(r["x_grad"], x.grad, what=f"isolated {kind} input gradient")


def test_input_caching_keeps_results_and_drops_bytes(results):
    for res in results:
        cached, uncached = res["caching"][True], res["caching"][False]
        for a, b in zip(cached["outs"], uncached["outs"]):
            assert_close(a, b, what="cached vs uncached layer-0 halo")
        if any(uncached["layer0"]):
            # Step 0 does not know yet that the input is static; step 1 fetches
            # it once for the cache; later steps send nothing for layer 0.
            assert all(b > 0 for b in uncached["layer0"])
            assert cached["layer0"][:2] == uncached["layer0"][:2]
            assert cached["layer0"][2:] == [0, 0]
            assert cached["total"] < uncached["total"]


def test_compression_shrinks_messages_within_bounds(results):
    for res in results:
        r = res["compression"]
        n = r["fp16"]["num_send"]
        if n:
            assert r["fp16"]["bytes"] == r["bf16"]["bytes"] == n * F_IN * 2
            assert r["int8"]["bytes"] == n * (F_IN + 4)
        assert r["fp16"]["err"] < 5e-3
        assert r["bf16"]["err"] < 4e-2
        assert r["int8"]["err"] < 5e-2


def test_shared_dropout_keeps_layer0_cached_and_exact(results, graph):
    """Dropout masks drawn alike on every rank: layer 0 (12 -> 6 features)
    stops exchanging after its cache is filled, and every step equals
    single-process PyG fed the same global masks."""
    from pyg_dist.halo.dropout import _keep

    first = results[0]["dropout"]
    assert all(res["dropout"][True]["seed"] == first[True]["seed"] for res in results)
    n = graph.num_nodes
    x_all = wide_inputs(n)
    conv0, conv1 = GCNConv(F_WIDE, 6), GCNConv(6, 3)
    state = first[True]["state"]
    conv0.load_state_dict({k[len("convs.0."):]: v for k, v in state.items() if "convs.0" in k})
    conv1.load_state_dict({k[len("convs.1."):]: v for k, v in state.items() if "convs.1" in k})
    nodes = torch.arange(n)
    for cache in (True, False):
        for t in range(4):
            seed = results[0]["dropout"][cache]["seed"]
            drop0 = _keep(nodes, F_WIDE, seed, 2 * t, 0.5).float() * 2.0
            drop1 = _keep(nodes, 6, seed, 2 * t + 1, 0.5).float() * 2.0
            conv0.zero_grad()
            conv1.zero_grad()
            out = conv1(conv0(x_all * drop0, graph.edge_index).relu() * drop1, graph.edge_index)
            (out * out.detach().sin()).sum().backward()
            for res in results:
                r = res["dropout"][cache]
                step = r["steps"][t]
                assert_close(step["out"], out[r["global_id"]], what=f"dropout step {t} output")
                for name, ref in [*(("convs.0." + k, p) for k, p in conv0.named_parameters()),
                                  *(("convs.1." + k, p) for k, p in conv1.named_parameters())]:
                    assert_close(step["grads"][name], ref.grad, what=f"step {t} grad {name}")
    sent = False
    for res in results:
        cached, uncached = res["dropout"][True]["layer0"], res["dropout"][False]["layer0"]
        if any(uncached):
            sent = True
            assert all(b > 0 for b in uncached)
            assert cached[2:] == [0, 0]  # filled at step 1, free from then on
    assert sent
