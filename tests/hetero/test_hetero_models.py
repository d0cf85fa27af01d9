"""Heterogeneous models distributed: to_hetero of Dist layers, to_distributed
of a to_hetero PyG model, HeteroConv with Dist convs; outputs, input and
parameter gradients equal single-process PyG on the whole HeteroData, each
relation reading a source type shares one exchange of its union halo, and
training steps give PyG's weights."""
import functools

import torch
from hetero_cases import reference, run_all, train_reference
from hetero_graphs import small_hetero
from tolerances import assert_close
from worlds import Battery

import pyg_dist

CASES = [
    dict(kind="sage", hidden=8, out=3, seed=1),
    dict(kind="sage", hidden=8, out=3, seed=2, dist_layers=True),
    dict(kind="gat", hidden=6, out=3, seed=3),
    dict(kind="gat", hidden=6, out=3, seed=4, dist_layers=True),
    dict(kind="heteroconv", hidden=6, out=4, seed=5),
    dict(kind="heteroconv", hidden=6, out=4, seed=6, dist_layers=True),
]
TRAIN = dict(kind="sage", hidden=8, out=4, seed=7)
STEPS, LR = 3, 0.5


def gather(per_rank, key, t, num_nodes):
    first = per_rank[0][key][t]
    full = first.new_full((num_nodes, *first.shape[1:]), float("nan"))
    for res in per_rank:
        full[res["global_id"][t]] = res[key][t]
    return full


def union_halo_rows(data, owner, rank, src_type):
    """Hand count: remote sources of the in-edges of ``rank``'s nodes over
    every relation reading ``src_type``."""
    rows = set()
    for e in data.edge_types:
        if e[0] != src_type:
            continue
        src, dst = data[e].edge_index
        mine = (owner[e[2]][dst] == rank) & (owner[src_type][src] != rank)
        rows |= set(src[mine].tolist())
    return len(rows)


@functools.cache
def references():
    """The graph, PyG's results of every case and the trained model's start."""
    data = small_hetero()
    return data, [reference(case, data) for case in CASES], reference(TRAIN, data)["state"]


def prepare(world_size, method, root):
    data, refs, train_state = references()
    folder = root / "parts"
    pyg_dist.partition(data, world_size, folder, method=method, seed=world_size)
    num_nodes = {t: data[t].num_nodes for t in data.node_types}
    return (str(folder), CASES, [r["state"] for r in refs], num_nodes, TRAIN, train_state,
            STEPS, LR), None


#: Every case on 3 ranks of a METIS cut (this module) and 4 of a random one
#: (test_hetero_models_random), one battery each.
CUTS = {(3, "metis"): "test_hetero_models.py", (4, "random"): "test_hetero_models_random.py"}
BATTERIES = {(world_size, method): Battery(world_size, run_all,
                                           functools.partial(prepare, world_size, method),
                                           timeout=240, users=(user,))
             for (world_size, method), user in CUTS.items()}


def check_models(tmp_path_factory, world_size, method):
    """Every case on ``world_size`` ranks of a ``method`` cut, from its battery."""
    data, refs, train_state = references()
    num_nodes = {t: data[t].num_nodes for t in data.node_types}
    _, results = BATTERIES[world_size, method].results(tmp_path_factory)
    per_case = list(zip(*[r[0] for r in results]))
    for case, ref, per_rank in zip(CASES, refs, per_case):
        name = f"{case['kind']}{'-dist-layers' if case.get('dist_layers') else ''}"
        for t, out in ref["out"].items():
            assert_close(gather(per_rank, "out", t, num_nodes[t]), out, what=f"{name} out {t}")
        for t, grad in ref["x_grad"].items():
            assert_close(gather(per_rank, "x_grad", t, num_nodes[t]), grad,
                         what=f"{name} x.grad {t}")
        for n, grad in ref["grads"].items():
            assert_close(per_rank[0]["grads"][n], grad, what=f"{name} grad {n}")
    # one exchange per source type and layer, of exactly its union halo
    owner = {t: torch.empty(num_nodes[t], dtype=torch.long) for t in data.node_types}
    for rank, res in enumerate(per_case[0]):
        for t, gid in res["global_id"].items():
            owner[t][gid] = rank
    widths = {"conv1": {t: data[t].x.size(1) for t in data.node_types},
              "conv2": {t: CASES[0]["hidden"] for t in data.node_types}}
    readers = {e[0] for e in data.edge_types}
    for rank, res in enumerate(per_case[0]):
        for layer, width in widths.items():
            fwd = {k[0]: v for k, v in res["traffic"].items()
                   if k[1] == "fwd" and k[0].startswith(layer)}
            expected = {f"{layer}[{t}]": union_halo_rows(data, owner, rank, t) * width[t] * 4
                        for t in readers}
            expected = {k: v for k, v in expected.items() if v}
            assert {k: v[0] for k, v in fwd.items()} == expected, f"rank {rank} {layer}"
            assert all(v[1] == 1 for v in fwd.values()), "one exchange per source type"
    weights = train_reference(data, TRAIN, train_state, STEPS, LR)
    for n, w in weights.items():
        for rank_weights, _ in (r[1] for r in results):
            assert_close(rank_weights[n], w, what=f"trained {n}")
    for rank, (_, exchanges) in enumerate(r[1] for r in results):
        # layer 0's input is static: fetched at step 0, cached at step 1 (both
        # shared by the relations), served from the cache at step 2; layer 1
        # exchanges once per source type and step
        for name, count in exchanges.items():
            assert name.endswith("]"), f"rank {rank}: {name} exchanged for one relation alone"
            assert count == (2 if name.startswith("conv1") else STEPS), (rank, name, count)


def test_hetero_models_equal_pyg_on_a_metis_cut(tmp_path_factory):
    check_models(tmp_path_factory, 3, "metis")
