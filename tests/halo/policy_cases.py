"""Rank-side checks of the halo policies, run as one battery of 4 gloo ranks
(see conftest.py). Each check runs a Dist layer under a policy for a few steps
and computes, on the same rank, the reference the policy promises: the same
layer fed prescribed halo rows (:class:`Given`), with halo gradients routed to
their owners by hand. The test modules compare the two."""
import torch
import torch.distributed as dist

import pyg_dist
from pyg_dist.halo import (
    Adaptive,
    Cached,
    Exact,
    HaloPolicy,
    HaloRows,
    Isolated,
    Pipelined,
    Sampled,
    Stale,
)
from pyg_dist.halo.compress import CODECS
from pyg_dist.nn import DistGCNConv, DistSAGEConv

WORLD = 4
STEPS = 7
F_IN, F_OUT = 4, 8  # in < out: layers aggregate raw inputs, so halo rows are input rows
F_WIDE = 12  # wider than the hidden layer: without caching, layer 0 transforms first
ADAPTIVE_STEPS = 8
# (input drift per step, tol, max_staleness) and the steps that must re-send:
# x_t = x_0 (1 + d t) drifts by d (t - s) / (1 + d s) from the x_s last sent.
ADAPTIVE_SCHEDULES = {
    "drift": (0.01, 0.025, 5, [0, 3, 6]),  # crosses tol after 3 steps, before max_staleness
    "age": (0.001, 0.025, 5, [0, 5]),  # never crosses tol: re-sent when 5 steps old
}
EVAL_POLICIES = {
    "stale": Stale(every=3),
    "sampled": Sampled(0.5, seed=1),
    "isolated": Isolated(),
    "cached": Cached(),
    "pipelined": Pipelined(),
    "int8": Exact(compress="int8"),
}


class Received(Exact):
    """Test policy: :class:`Exact` with compression that keeps the halo rows
    that arrived, to hold them against the rows their owners sent."""

    def fetch(self, x, ctx):
        fetched = super().fetch(x, ctx)
        self.received = fetched.rows.detach().clone()
        return fetched


class Given(HaloPolicy):
    """Test policy: hands the layer prescribed halo rows (optionally tracking their grad)."""

    def __init__(self, rows):
        super().__init__(cache_inputs=False)
        self.rows = rows

    def fetch(self, x, ctx):
        return HaloRows(self.rows)


def inputs(num_nodes, step, width=F_IN):
    """Input features and upstream gradient of the whole graph at ``step``."""
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(num_nodes, width, generator=g), torch.randn(num_nodes, F_OUT, generator=g)


def make_layer(kind, policy):
    torch.manual_seed(0)
    if kind == "gcn":
        return DistGCNConv(F_IN, F_OUT, halo=policy)
    return DistSAGEConv(F_IN, F_OUT, aggr="mean", halo=policy)


def fresh(dirs, **kwargs):
    return pyg_dist.DistData.load(dirs["main"], **kwargs)


def halo_ids(data):
    return data.edge_index.plan.halo_global_id


def layer_state(data, layer, mode="train"):
    registry = data.edge_index.registry
    return registry.layers[(registry.name(layer), mode)]


def run_steps(data, layer, steps, xs=None, after=None):
    """Runs ``layer`` for ``steps`` steps on the inputs ``xs(t)`` (default:
    :func:`inputs`), calling ``after(t)`` after each; returns per-step outputs
    and input gradients."""
    n = data.meta.num_nodes
    outs, grads = [], []
    for t in range(steps):
        x_all, up = inputs(n, t) if xs is None else xs(t)
        x = x_all[data.global_id].clone().requires_grad_()
        out = layer(x, data.edge_index)
        (out * up[data.global_id]).sum().backward()
        outs.append(out.detach())
        grads.append(x.grad.clone())
        if after is not None:
            after(t)
        data.ledger.next_step()
    return outs, grads


def given_halo(data, kind, x_all, up, halo):
    """The layer fed ``halo`` (``[H, F_IN]``, a leaf tracking its gradient):
    output, gradient of the owned inputs, gradient of the halo rows."""
    halo = halo.detach().clone().requires_grad_()
    layer = make_layer(kind, Given(halo))
    x = x_all[data.global_id].clone().requires_grad_()
    out = layer(x, data.edge_index)
    (out * up[data.global_id]).sum().backward()
    return out.detach(), x.grad, halo.grad


def route(data, halo_values):
    """Every rank's per-halo-row values (``[H, F]``) summed onto the rows of
    their owners: what the owners receive back (``[num_owned, F]``)."""
    n = data.meta.num_nodes
    routed = torch.zeros(n, halo_values.size(1)).index_add_(0, halo_ids(data), halo_values)
    dist.all_reduce(routed)
    return routed[data.global_id]


def ledger_rows(data, name, direction="fwd"):
    return {r["step"]: r for r in data.ledger.rows()
            if r["layer"] == name and r["direction"] == direction}


def per_step(rows, key, steps):
    return [rows[t][key] if t in rows else 0 for t in range(steps)]


def max_err(a, b):
    return (a - b).abs().max().item() if a.numel() else 0.0


def check_stale(dirs):
    out = {}
    n = fresh(dirs).meta.num_nodes
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
                    x_all, up = inputs(n, t)
                    ref, local, halo_grad = given_halo(data, kind, x_all, up,
                                                       inputs(n, refresh)[0][halo_ids(data)])
                    remote = route(data, halo_grad)
                    if t == refresh:
                        expected = local + remote + (pending if grads == "accumulate" else 0.0)
                        pending = 0.0
                    else:
                        expected = local
                        pending = pending + remote
                    fwd_err = max(fwd_err, max_err(outs[t], ref))
                    bwd_err = max(bwd_err, max_err(x_grads[t], expected))
                name = data.edge_index.registry.name(layer)
                rows, bwd = ledger_rows(data, name), ledger_rows(data, name, "bwd")
                out[(kind, every, grads)] = {
                    "fwd_err": fwd_err, "bwd_err": bwd_err,
                    "exchanged": per_step(rows, "exchanges", STEPS),
                    "staleness": per_step(rows, "staleness", STEPS),
                    "bwd_steps": sorted(t for t, r in bwd.items() if r["exchanges"]),
                }
        # Stale(every=1) is Exact, gradients included.
        a, b = fresh(dirs), fresh(dirs)
        sa, ga = run_steps(a, make_layer(kind, Stale(every=1)), 3)
        sb, gb = run_steps(b, make_layer(kind, Exact(cache_inputs=False)), 3)
        out[(kind, "k1")] = max(max(max_err(x, y) for x, y in zip(p, q))
                                for p, q in ((sa, sb), (ga, gb)))
    return out


def check_cached(dirs):
    """Cached: the first call's halo forever, no halo gradients, no bytes after step 0."""
    out = {}
    for kind in ("gcn", "sage"):
        data = fresh(dirs)
        n = data.meta.num_nodes
        layer = make_layer(kind, Cached())
        outs, x_grads = run_steps(data, layer, STEPS)
        first = inputs(n, 0)[0][halo_ids(data)]
        fwd_err = bwd_err = 0.0
        for t in range(STEPS):
            ref, local, _ = given_halo(data, kind, *inputs(n, t), first)
            fwd_err = max(fwd_err, max_err(outs[t], ref))
            bwd_err = max(bwd_err, max_err(x_grads[t], local))
        name = data.edge_index.registry.name(layer)
        out[kind] = {
            "fwd_err": fwd_err, "bwd_err": bwd_err,
            "fwd_bytes": per_step(ledger_rows(data, name), "bytes_sent", STEPS),
            "bwd_bytes": per_step(ledger_rows(data, name, "bwd"), "bytes_sent", STEPS),
            "num_send": data.edge_index.plan.num_send,
        }
    return out


def check_pipelined(dirs):
    """Step t uses the (smoothed) halo of step t-1 and applies the (smoothed)
    halo gradients of step t-1, from step 1 on."""
    out = {}
    for kind, smoothing in (("gcn", None), ("sage", None), ("gcn", 0.5), ("sage", 0.25)):
        data = fresh(dirs)
        n = data.meta.num_nodes
        layer = make_layer(kind, Pipelined(smoothing))
        outs, x_grads = run_steps(data, layer, STEPS)
        gamma = smoothing or 0.0
        fwd_err = bwd_err = 0.0
        used, remote, applied = None, {}, None
        for t in range(STEPS):
            x_all, up = inputs(n, t)
            last = inputs(n, max(t - 1, 0))[0][halo_ids(data)]
            used = last if t <= 1 else gamma * used + (1 - gamma) * last
            ref, local, halo_grad = given_halo(data, kind, x_all, up, used)
            remote[t] = route(data, halo_grad)
            if t == 0:
                expected = local + remote[0]  # step 0 is exact, forward and backward
            elif t == 1:
                expected = local  # step 0's gradients were delivered at step 0
            else:
                applied = remote[1] if t == 2 else gamma * applied + (1 - gamma) * remote[t - 1]
                expected = local + applied
            fwd_err = max(fwd_err, max_err(outs[t], ref))
            bwd_err = max(bwd_err, max_err(x_grads[t], expected))
        data.edge_index.flush()
        name = data.edge_index.registry.name(layer)
        rows = [*ledger_rows(data, name).values(), *ledger_rows(data, name, "bwd").values()]
        out[(kind, smoothing)] = {
            "fwd_err": fwd_err, "bwd_err": bwd_err,
            "overlapped": sum(r["overlapped"] for r in rows),
            "moves": data.edge_index.plan.num_halo + data.edge_index.plan.num_send,
        }
    return out


def check_adaptive(dirs):
    """Re-sends exactly when a block drifted past tol or got max_staleness old;
    while reusing, outputs and gradients equal the layer fed the rows the
    policy holds, and those rows are the owners' rows of the step they arrived."""
    out = {}
    for label, (drift, tol, max_staleness, _) in ADAPTIVE_SCHEDULES.items():
        for kind, grads in (("gcn", "accumulate"), ("sage", "drop")):
            data = fresh(dirs)
            n = data.meta.num_nodes
            layer = make_layer(kind, Adaptive(tol, max_staleness, stale_grads=grads))

            def xs(t, n=n, drift=drift):
                return inputs(n, 0)[0] * (1 + drift * t), inputs(n, t)[1]

            held = []

            def remember(t, data=data, layer=layer, held=held):
                cache = layer_state(data, layer).state.halo
                held.append((cache.pull().clone(), cache.steps.clone()))

            outs, x_grads = run_steps(data, layer, ADAPTIVE_STEPS, xs=xs, after=remember)
            fwd_err = bwd_err = rows_err = 0.0
            pending = torch.zeros(data.edge_index.plan.num_halo, F_IN)
            snapshots = torch.stack([xs(t)[0] for t in range(ADAPTIVE_STEPS)])  # [T, N, F]
            for t in range(ADAPTIVE_STEPS):
                rows, arrived = held[t]
                owners = snapshots[arrived, halo_ids(data)]  # each row as its owner had it
                rows_err = max(rows_err, max_err(rows, owners))
                ref, local, halo_grad = given_halo(data, kind, *xs(t), rows)
                fresh_rows = (arrived == t).view(-1, 1)
                sent = torch.where(fresh_rows, halo_grad + pending, 0.0)
                if grads == "accumulate":
                    pending = torch.where(fresh_rows, 0.0, pending + halo_grad)
                expected = local + route(data, sent)
                fwd_err = max(fwd_err, max_err(outs[t], ref))
                bwd_err = max(bwd_err, max_err(x_grads[t], expected))
            name = data.edge_index.registry.name(layer)
            plan = data.edge_index.plan
            out[(label, kind)] = {
                "fwd_err": fwd_err, "bwd_err": bwd_err, "rows_err": rows_err,
                "bytes": per_step(ledger_rows(data, name), "bytes_sent", ADAPTIVE_STEPS),
                "bwd_bytes": per_step(ledger_rows(data, name, "bwd"), "bytes_sent",
                                      ADAPTIVE_STEPS),
                "flag_bytes": per_step(ledger_rows(data, f"{name}/flags"), "bytes_sent",
                                       ADAPTIVE_STEPS),
                "staleness": per_step(ledger_rows(data, name), "staleness", ADAPTIVE_STEPS),
                "num_send": plan.num_send, "num_halo": plan.num_halo,
                "peers": sum(1 for c in plan.send_counts if c),
            }
    # tol=0 with inputs that change every step is Exact.
    a, b = fresh(dirs), fresh(dirs)
    sa, ga = run_steps(a, make_layer("sage", Adaptive(tol=0.0)), 3)
    sb, gb = run_steps(b, make_layer("sage", Exact()), 3)
    out["tol0"] = max(max(max_err(x, y) for x, y in zip(p, q)) for p, q in ((sa, sb), (ga, gb)))
    return out


def check_sampled(dirs):
    """Sampled(1) is Exact; Sampled(0.5): outputs, input gradients and the
    rows sent, per step, for the test to compare with PyG on the sampled graph."""
    out = {}
    for kind in ("gcn", "sage"):
        a, b = fresh(dirs), fresh(dirs)
        sa, ga = run_steps(a, make_layer(kind, Sampled(1.0)), 3)
        sb, gb = run_steps(b, make_layer(kind, Exact()), 3)
        out[(kind, "p1")] = max(max(max_err(x, y) for x, y in zip(p, q))
                                for p, q in ((sa, sb), (ga, gb)))
        data = fresh(dirs)
        layer = make_layer(kind, Sampled(0.5, seed=3))
        outs, x_grads = run_steps(data, layer, 4)
        name = data.edge_index.registry.name(layer)
        out[(kind, "half")] = {
            "outs": outs, "x_grads": x_grads, "global_id": data.global_id,
            "state": layer.state_dict(),
            "sent_rows": [b // (F_IN * 4) for b in per_step(ledger_rows(data, name),
                                                             "bytes_sent", 4)],
            "send_global_id": data.edge_index.plan.send_global_id,
        }
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
        totals = data.ledger.totals()
        out[kind] = {"out": y.detach(), "x_grad": x.grad, "global_id": data.global_id,
                     "bytes": totals["bytes_fwd"] + totals["bytes_bwd"],
                     "state": layer.state_dict()}
    return out


def check_eval_is_exact(dirs):
    """After training steps under a policy, evaluation equals the exact layer
    and crosses the network exactly, booked as evaluation traffic."""
    out = {}
    n = fresh(dirs).meta.num_nodes
    x = inputs(n, 5)[0]
    for label, policy in EVAL_POLICIES.items():
        data = fresh(dirs)
        layer = make_layer("gcn", policy)
        run_steps(data, layer, 2)
        layer.eval()
        with torch.no_grad():
            got = layer(x[data.global_id], data.edge_index)
        exact = make_layer("gcn", Exact()).eval()
        with torch.no_grad():
            want = exact(x[data.global_id], fresh(dirs).edge_index)
        name = data.edge_index.registry.name(layer)
        out[label] = {"err": max_err(got, want),
                      "eval_bytes": per_step(ledger_rows(data, name, "eval"), "bytes_sent", 3),
                      "num_send": data.edge_index.plan.num_send}
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
            data.ledger.next_step()
        rows = data.ledger.rows()
        res[cache] = {
            "outs": outs,
            "layer0": [r["bytes_sent"] for r in rows if r["layer"] == "convs.0"],
            "total": sum(r["bytes_sent"] for r in rows),
        }
    return res


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
        x = inputs(data.meta.num_nodes, 7, F_WIDE)[0][data.global_id]
        steps = []
        for _ in range(4):
            model.zero_grad()
            y = model(x, data.edge_index)
            (y * y.detach().sin()).sum().backward()
            all_reduce_gradients(model)
            steps.append({"out": y.detach(),
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
    """Exact exchange with compressed messages: forward error, backward error
    against the bound of what crossed the network, and the bytes booked."""
    out = {}
    for kind in ("gcn", "sage"):
        data = fresh(dirs)
        n = data.meta.num_nodes
        x_all, up = inputs(n, 0)
        exact_out, local, halo_grad = given_halo(data, kind, x_all, up, x_all[halo_ids(data)])
        for name, codec in CODECS.items():
            data = fresh(dirs)
            received = Received(compress=name)
            layer = make_layer(kind, received)
            x = x_all[data.global_id].clone().requires_grad_()
            y = layer(x, data.edge_index)
            (y * up[data.global_id]).sum().backward()
            expected = local + route(data, halo_grad)
            # Halo gradients cross the network once, from the rank holding the
            # halo row to its owner: each within the codec's bound.
            bound = route(data, codec.error_bound(halo_grad))
            layer_name = data.edge_index.registry.name(layer)
            plan = data.edge_index.plan
            out[(kind, name)] = {
                "fwd_err": max_err(y.detach(), exact_out),
                "bwd_excess": ((x.grad - expected).abs() - bound).max().item() if n else 0.0,
                "bwd_scale": expected.abs().max().item(),
                "fwd_bytes": per_step(ledger_rows(data, layer_name), "bytes_sent", 1)[0],
                "bwd_bytes": per_step(ledger_rows(data, layer_name, "bwd"), "bytes_sent", 1)[0],
                "num_send": plan.num_send, "num_halo": plan.num_halo,
                "halo_sent": x_all[halo_ids(data)], "halo_received": received.received,
            }
    return out


def check_degrees(dirs):
    """A weighted GCN: fixed weights' halo degrees cross once per graph, as
    'degree'; weights that need grad exchange them every call, differentiably
    (the gradient of every edge weight, in the order of ``edge_id``, summed
    over the 3 steps of outputs summed)."""
    out = {}
    for learnable in (False, True):
        data = fresh(dirs)
        layer = make_layer("gcn", Exact())
        weight = data.edge_weight.clone().requires_grad_(learnable)
        n = data.meta.num_nodes
        for t in range(3):
            x = inputs(n, t)[0][data.global_id]
            layer(x, data.edge_index, weight).sum().backward()
            data.ledger.next_step()
        name = data.edge_index.registry.name(layer)
        label = f"{name}/degree" if learnable else "degree"
        out[learnable] = {
            "fwd": per_step(ledger_rows(data, label), "bytes_sent", 3),
            "bwd": per_step(ledger_rows(data, label, "bwd"), "bytes_sent", 3),
            "weight_grad": None if weight.grad is None else weight.grad.clone(),
            "edge_id": data.edge_index.edge_id.clone(),
            "state": layer.state_dict(),
            "num_send": data.edge_index.plan.num_send,
            "num_halo": data.edge_index.plan.num_halo,
        }
    return out


def check_trained_ledger(dirs):
    """pyg_dist.train with Adaptive(tol=inf, max_staleness=2): per-epoch bytes
    for a hand count (sends every other step; flags every step)."""
    from pyg_dist.models import GNN
    from pyg_dist.train import train

    data = fresh(dirs, halo=Adaptive(tol=1e30, max_staleness=2))
    torch.manual_seed(0)
    model = GNN("gcn", F_IN, 6, 3, dropout=0.0)
    result = train(model, data, epochs=5, progress=False)
    plan = data.edge_index.plan
    return {
        "fwd": [e.halo_bytes_fwd for e in result.history],
        "bwd": [e.halo_bytes_bwd for e in result.history],
        "eval": [e.halo_bytes_eval for e in result.history],
        "num_halo": plan.num_halo,
        "peers": sum(1 for c in plan.send_counts if c),
    }


def body(dirs):
    return {
        "stale": check_stale(dirs),
        "cached": check_cached(dirs),
        "pipelined": check_pipelined(dirs),
        "adaptive": check_adaptive(dirs),
        "sampled": check_sampled(dirs),
        "isolated": check_isolated(dirs),
        "eval": check_eval_is_exact(dirs),
        "caching": check_input_caching(dirs),
        "compression": check_compression(dirs),
        "dropout": check_shared_dropout(dirs),
        "degrees": check_degrees(dirs),
        "trained": check_trained_ledger(dirs),
    }
