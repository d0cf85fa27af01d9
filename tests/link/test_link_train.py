"""Link prediction across ranks against single-process PyG: the link split
in the partition folder, rows gathered by global id, the epoch's negatives,
and five steps of train() (losses, every gradient, the weights after),
on 2 and 3 ranks, METIS and random cuts, directed and undirected graphs with
isolated nodes. One launch per world size runs every case."""
import math

import pytest
import torch
from tolerances import SAME, TOL, assert_close

from pyg_dist.tasks.negatives import negatives


def _each(world):
    size, cases, refs, results = world
    for c, (case, ref) in enumerate(zip(cases, refs)):
        yield case, ref, [r[c + 1] for r in results]


def test_supervision_edges_on_the_source_owner(world):
    for _, (_, split, _), found in _each(world):
        for s, d in zip(("train", "val", "test"), split):
            ids = torch.cat([f["supervision"][s].id for f in found])
            assert sorted(ids.tolist()) == list(range(d.edge_label_index.size(1))), s
            for f in found:
                edges = f["supervision"][s]
                assert torch.equal(edges.index, d.edge_label_index[:, edges.id]), s
                assert torch.equal(edges.label, d.edge_label[edges.id].float()), s
                assert bool(torch.isin(edges.index[0], f["global_id"]).all()), \
                    f"{s} edges stored away from their source's owner"


def test_message_passing_edges_are_the_training_graph(world):
    for _, (data, split, _), found in _each(world):
        ours = torch.cat([f["edges"] for f in found], 1)
        key = ours[0] * data.num_nodes + ours[1]
        train_ei = split[0].edge_index
        ref = train_ei[0] * data.num_nodes + train_ei[1]
        assert sorted(key.tolist()) == sorted(ref.tolist())
        held = torch.cat([d.edge_label_index[:, d.edge_label > 0] for d in split[1:]], 1)
        held_key = held[0] * data.num_nodes + held[1]
        assert not bool(torch.isin(held_key, key).any()), "a held-out edge passes messages"


def test_gather_rows_and_gradients(world):
    size, cases, refs, results = world
    for case, (data, _, _), found in _each(world):
        h = (torch.arange(data.num_nodes).double().view(-1, 1)
             * torch.tensor([1.0, -2.0, 0.5])).float()
        grad = torch.zeros_like(h)
        for rank, f in enumerate(found):
            index = case["index"][rank]
            assert_close(f["gather"]["rows"], h[index], what=f"rows of rank {rank}")
            grad.index_add_(0, index, case["weight"][rank])
        for rank, f in enumerate(found):
            assert_close(f["gather"]["grad"], grad[f["global_id"]], tol=SAME,
                         what=f"gradient on owner {rank}")
        for rank, f in enumerate(found):
            own = f["global_id"]
            asked = torch.unique(case["index"][rank])
            remote = int((~torch.isin(asked, own)).sum())
            assert f["gather"]["rows_bytes"] == remote * 3 * 4, \
                f"rank {rank} booked {f['gather']['rows_bytes']} gather/rows bytes"
            assert f["gather"]["bytes_gather"] > 0


def test_negatives_equal_one_process(world):
    for case, (data, split, _), found in _each(world):
        pos = split[0].edge_label_index
        kind = "structured" if case["kind"] == "lightgcn" else "uniform"
        ref = negatives(pos, torch.arange(pos.size(1)), data.num_nodes, 0, 3, kind)
        for f in found:
            edges = f["negatives"]
            neg = edges.index[:, edges.label == 0]
            own_ids = f["supervision"]["train"].id
            assert torch.equal(neg, ref[:, own_ids]), "negatives differ from one process"


def _rows(case, name, ref, found):
    """LightGCN's embedding table holds the rank's own rows: the reference's of them."""
    return ref[found["global_id"]] if case["kind"] == "lightgcn" and name == TABLE else ref


#: LightGCN's embedding table.
TABLE = "embedding.weight"


def test_five_steps_equal_single_process(world):
    for case, (_, _, (losses, grads, state, aucs)), found in _each(world):
        what = case["kind"]
        for f in found:
            assert f["losses"] == pytest.approx(losses, rel=TOL[torch.float32]), what
            for name, g in grads.items():
                if name in ("embeddings", "decoder"):
                    continue
                assert_close(f["grads"][name], _rows(case, name, g, f),
                             what=f"{what} grad {name}")
            for name, w in state.items():
                assert_close(f["state"][name], _rows(case, name, w, f),
                             what=f"{what} weight {name}")
            for split in ("val", "test"):
                assert f["aucs"][split] == pytest.approx(aucs[split], abs=1e-6, nan_ok=True), \
                    f"{what} {split} AUC"


def test_lightgcn_ranks_hold_their_own_rows_alone(world):
    for case, (data, _, _), found in _each(world):
        if case["kind"] != "lightgcn":
            continue
        held = [f["state"][TABLE].size(0) for f in found]
        assert held == [f["global_id"].numel() for f in found], held
        assert sum(held) == data.num_nodes


def test_lightgcn_with_gradient_compression_sums_nothing(world):
    """fp16 compression of a model whose one parameter is the rank's own rows:
    the same losses and weights as without it, and no gradient bytes."""
    for case, _, found in _each(world):
        if case["kind"] != "lightgcn":
            continue
        for f in found:
            got = f["compressed"]
            assert got["losses"] == f["losses"] and got["grad_bytes"] == 0, got
            assert torch.equal(got["state"][TABLE], f["state"][TABLE])


def test_every_halo_policy_trains_edges(world):
    for case, (_, _, (losses, _, _, _)), found in _each(world):
        for f in found:
            for spec, got in f["policies"].items():
                assert len(got) == 2 and all(math.isfinite(v) for v in got), (case["kind"], spec)
                if spec in ("exact", "cached", "stale:2", "pipelined"):
                    # the first step reads fresh halos under each of them
                    assert got[0] == pytest.approx(losses[0], rel=TOL[torch.float32]), spec
