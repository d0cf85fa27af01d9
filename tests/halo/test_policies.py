"""Halo policies pinned to their semantics on 4 gloo ranks: each against an
exact reference built from the same layer fed the halo the policy promises,
or against PyG on the graph the policy leaves (rank side: policy_cases.py)."""
import math

import pytest
import torch
from policy_cases import (
    ADAPTIVE_SCHEDULES,
    ADAPTIVE_STEPS,
    EVAL_POLICIES,
    F_IN,
    F_OUT,
    F_WIDE,
    STEPS,
    inputs,
)
from tolerances import SAME, TOL, assert_close
from torch_geometric.nn import GCNConv, SAGEConv

from pyg_dist.halo.sampled import node_uniform


@pytest.mark.parametrize("grads", ["accumulate", "drop"])
def test_stale_refreshes_exactly_every_k_steps(policy_results, grads):
    """Forward uses the halo of the last refresh; backward sends gradients on
    refresh steps only: those of the step, plus (accumulate) the ones of the
    steps that reused the rows since the previous refresh."""
    with_halo = 0
    for res in policy_results:
        for kind in ("gcn", "sage"):
            for every in (1, 3):
                r = res["stale"][(kind, every, grads)]
                assert r["fwd_err"] <= TOL[torch.float32], (kind, every)
                assert r["bwd_err"] <= TOL[torch.float32], (kind, every)
                refreshes = [t for t in range(STEPS) if t % every == 0]
                if r["exchanged"] != [0] * STEPS:  # ranks with a halo at all
                    with_halo += 1
                    assert [t for t, e in enumerate(r["exchanged"]) if e] == refreshes
                    assert r["staleness"] == [t % every for t in range(STEPS)]
                    assert r["bwd_steps"] == refreshes
            assert res["stale"][(kind, "k1")] <= SAME
    assert with_halo > 0, "no rank exchanged: the schedule was never checked"


@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_cached_reuses_the_first_halo_without_bytes_or_gradients(policy_results, kind):
    sent = False
    for res in policy_results:
        r = res["cached"][kind]
        assert r["fwd_err"] <= TOL[torch.float32] and r["bwd_err"] <= TOL[torch.float32]
        assert r["fwd_bytes"] == [r["num_send"] * F_IN * 4] + [0] * (STEPS - 1)
        assert r["bwd_bytes"] == [0] * STEPS
        sent |= r["num_send"] > 0
    assert sent


@pytest.mark.parametrize("kind,smoothing", [("gcn", None), ("sage", None), ("gcn", 0.5),
                                            ("sage", 0.25)])
def test_pipelined_uses_last_steps_halo_and_gradients(policy_results, kind, smoothing):
    """Outputs and input gradients at every step from 0 on, smoothed by
    h~_t = g h~_(t-1) + (1 - g) h_(t-1); transfers overlap compute."""
    moved = 0
    for res in policy_results:
        r = res["pipelined"][(kind, smoothing)]
        assert r["fwd_err"] <= TOL[torch.float32]
        assert r["bwd_err"] <= TOL[torch.float32]
        if r["moves"]:  # background transfers travelled while the rank computed
            moved += 1
            assert r["overlapped"] > 0
    assert moved > 0, "no rank moved halo rows: the overlap was never checked"


@pytest.mark.parametrize("schedule", sorted(ADAPTIVE_SCHEDULES))
@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_adaptive_resends_exactly_when_drift_or_age_demand(policy_results, schedule, kind):
    """x_t = x_0 (1 + d t): a block is re-sent exactly when its drift from the
    rows last sent exceeds tol, or at max_staleness; outputs and gradients
    (accumulated for GCN, dropped for SAGE) equal the layer fed the rows the
    policy holds, and each held row is its owner's row of the step it arrived."""
    *_, expected_steps = ADAPTIVE_SCHEDULES[schedule]
    any_halo = any_send = False
    for res in policy_results:
        r = res["adaptive"][(schedule, kind)]
        assert r["fwd_err"] <= TOL[torch.float32] and r["bwd_err"] <= TOL[torch.float32]
        assert r["rows_err"] == 0.0
        if r["num_send"]:
            any_send = True
            block = r["num_send"] * F_IN * 4
            assert r["bytes"] == [block if t in expected_steps else 0
                                  for t in range(ADAPTIVE_STEPS)]
            assert r["flag_bytes"] == [r["peers"]] * ADAPTIVE_STEPS  # one byte per peer
        if r["num_halo"]:
            any_halo = True
            grad_rows = r["num_halo"] * F_IN * 4
            assert r["bwd_bytes"] == [grad_rows if t in expected_steps else 0
                                      for t in range(ADAPTIVE_STEPS)]
            last = [max(s for s in expected_steps if s <= t) for t in range(ADAPTIVE_STEPS)]
            assert r["staleness"] == [t - s for t, s in zip(range(ADAPTIVE_STEPS), last)]
    assert any_halo and any_send


def test_adaptive_tol0_is_exact(policy_results):
    for res in policy_results:
        assert res["adaptive"]["tol0"] <= SAME


def test_sampled_p1_is_exact(policy_results):
    for res in policy_results:
        for kind in ("gcn", "sage"):
            assert res["sampled"][(kind, "p1")] <= SAME


def sampled_reference(kind, graph, part, kept, state, x, up):
    """PyG on the graph Sampled leaves at one step, built here: a cut edge
    survives when its source was sampled. GCN normalises with the sampled
    in-degree of each target and of same-part sources, and the whole-graph
    degree of remote sources (their owner's view); SAGE means over the used
    neighbours."""
    src, dst = graph.edge_index
    kept_edge = (part[src] == part[dst]) | kept[src]
    x = x.clone().requires_grad_()
    if kind == "sage":
        conv = SAGEConv(F_IN, F_OUT)
        conv.load_state_dict(state)
        out = conv(x, graph.edge_index[:, kept_edge])
    else:
        n = graph.num_nodes
        loop = src == dst
        s, d = src[kept_edge & ~loop], dst[kept_edge & ~loop]
        deg = torch.bincount(d, minlength=n).float() + 1  # one self-loop per node
        deg_whole = torch.bincount(dst[~loop], minlength=n).float() + 1
        deg_src = torch.where(part[s] == part[d], deg[s], deg_whole[s])
        nodes = torch.arange(n)
        edge_index = torch.cat([torch.stack([s, d]), torch.stack([nodes, nodes])], dim=1)
        weight = torch.cat([deg[d].rsqrt() * deg_src.rsqrt(), 1 / deg])
        conv = GCNConv(F_IN, F_OUT, normalize=False)
        conv.load_state_dict(state)
        out = conv(x, edge_index, weight)
    (out * up).sum().backward()
    return out.detach(), x.grad


@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_sampled_equals_pyg_on_the_sampled_graph(policy_results, policy_graph, kind):
    graph, n = policy_graph, policy_graph.num_nodes
    part = torch.empty(n, dtype=torch.long)
    for rank, res in enumerate(policy_results):
        part[res["sampled"][(kind, "half")]["global_id"]] = rank
    first = policy_results[0]["sampled"][(kind, "half")]
    for t in range(4):
        kept = node_uniform(torch.arange(n), 3, t) < 0.5
        x, up = inputs(n, t)
        out, x_grad = sampled_reference(kind, graph, part, kept, first["state"], x, up)
        for rank, res in enumerate(policy_results):
            r = res["sampled"][(kind, "half")]
            gid = r["global_id"]
            what = f"sampled {kind}, step {t}, rank {rank}"
            assert_close(r["outs"][t], out[gid], what=f"{what}: output")
            assert_close(r["x_grads"][t], x_grad[gid], what=f"{what}: input gradient")


@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_sampled_sends_the_sampled_fraction_of_boundary_rows(policy_results, kind):
    """Per rank and step, the rows sent are exactly the boundary rows whose
    node was sampled; over the steps, about p of them (binomial bound)."""
    checked = 0
    for res in policy_results:
        r = res["sampled"][(kind, "half")]
        num_send = r["send_global_id"].numel()
        for t in range(4):
            sampled = int((node_uniform(r["send_global_id"], 3, t) < 0.5).sum())
            assert r["sent_rows"][t] == sampled
        if num_send:
            fraction = sum(r["sent_rows"]) / (4 * num_send)
            sigma = math.sqrt(0.25 / (4 * num_send))
            assert abs(fraction - 0.5) < 5 * sigma, fraction
            checked += 1
    assert checked


@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_isolated_is_pyg_on_each_part_alone(policy_results, policy_graph, kind):
    graph = policy_graph
    for res in policy_results:
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


@pytest.mark.parametrize("policy", sorted(EVAL_POLICIES))
def test_evaluation_exchanges_exactly_under_any_policy(policy_results, policy):
    for res in policy_results:
        r = res["eval"][policy]
        assert r["err"] <= SAME
        assert r["eval_bytes"] == [0, 0, r["num_send"] * F_IN * 4]


def test_input_caching_keeps_results_and_drops_bytes(policy_results):
    sent = 0
    for res in policy_results:
        cached, uncached = res["caching"][True], res["caching"][False]
        for a, b in zip(cached["outs"], uncached["outs"]):
            assert_close(a, b, what="cached vs uncached layer-0 halo")
        if any(uncached["layer0"]):
            sent += 1
            # Step 0 does not know yet that the input is static; step 1 fetches
            # it once for the cache; later steps send nothing for layer 0.
            assert all(b > 0 for b in uncached["layer0"])
            assert cached["layer0"][:2] == uncached["layer0"][:2]
            assert cached["layer0"][2:] == [0, 0]
            assert cached["total"] < uncached["total"]
    assert sent > 0, "no rank sent layer-0 rows: the caching was never checked"


def test_shared_dropout_keeps_layer0_cached_and_exact(policy_results, policy_graph):
    """Dropout masks drawn alike on every rank: layer 0 (12 -> 6 features)
    stops exchanging after its cache is filled, and every step equals
    single-process PyG fed the same global masks."""
    from pyg_dist.utils.dropout import _keep

    graph = policy_graph
    first = policy_results[0]["dropout"]
    assert all(res["dropout"][True]["seed"] == first[True]["seed"] for res in policy_results)
    n = graph.num_nodes
    x_all = inputs(n, 7, F_WIDE)[0]
    conv0, conv1 = GCNConv(F_WIDE, 6), GCNConv(6, 3)
    state = first[True]["state"]
    conv0.load_state_dict({k[len("convs.0."):]: v for k, v in state.items() if "convs.0" in k})
    conv1.load_state_dict({k[len("convs.1."):]: v for k, v in state.items() if "convs.1" in k})
    nodes = torch.arange(n)
    for cache in (True, False):
        for t in range(4):
            seed = policy_results[0]["dropout"][cache]["seed"]
            drop0 = _keep(nodes, F_WIDE, seed, 2 * t, 0.5).float() * 2.0
            drop1 = _keep(nodes, 6, seed, 2 * t + 1, 0.5).float() * 2.0
            conv0.zero_grad()
            conv1.zero_grad()
            out = conv1(conv0(x_all * drop0, graph.edge_index).relu() * drop1, graph.edge_index)
            (out * out.detach().sin()).sum().backward()
            for res in policy_results:
                r = res["dropout"][cache]
                step = r["steps"][t]
                assert_close(step["out"], out[r["global_id"]], what=f"dropout step {t} output")
                for name, ref in [*(("convs.0." + k, p) for k, p in conv0.named_parameters()),
                                  *(("convs.1." + k, p) for k, p in conv1.named_parameters())]:
                    assert_close(step["grads"][name], ref.grad, what=f"step {t} grad {name}")
    sent = False
    for res in policy_results:
        cached, uncached = res["dropout"][True]["layer0"], res["dropout"][False]["layer0"]
        if any(uncached):
            sent = True
            assert all(b > 0 for b in uncached)
            assert cached[2:] == [0, 0]  # filled at step 1, free from then on
    assert sent


def test_fixed_edge_weights_exchange_halo_degrees_once(policy_results, policy_graph):
    """Weighted GCN: the halo degrees of fixed weights cross once per graph
    (one float32 per sent row, booked as 'degree'); weights that need grad
    exchange them every call and get through them the gradient PyG's GCNConv
    gives every edge weight of the whole graph."""
    graph = policy_graph
    conv = GCNConv(F_IN, F_OUT)
    conv.load_state_dict(policy_results[0]["degrees"][True]["state"])
    weight = graph.edge_weight.clone().requires_grad_()
    for t in range(3):
        conv(inputs(graph.num_nodes, t)[0], graph.edge_index, weight).sum().backward()
    gathered = torch.full_like(weight, float("nan"))
    for res in policy_results:
        learnable = res["degrees"][True]
        gathered[learnable["edge_id"]] = learnable["weight_grad"]
    assert not gathered.isnan().any(), "every edge belongs to one rank"
    assert_close(gathered, weight.grad, what="edge-weight gradient")
    assert (weight.grad != 0).float().mean() > 0.5  # a gradient worth comparing
    for res in policy_results:
        fixed, learnable = res["degrees"][False], res["degrees"][True]
        row = fixed["num_send"] * 4
        assert fixed["fwd"] == [row, 0, 0] and fixed["bwd"] == [0, 0, 0]
        assert fixed["weight_grad"] is None
        assert learnable["fwd"] == [row] * 3
        assert learnable["bwd"] == [learnable["num_halo"] * 4] * 3  # degree gradients
