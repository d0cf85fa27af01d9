"""The coverage corrections: the node-level weighted aggregation is unbiased
over random groupings (Monte Carlo), the batch weight is its closed form,
shrinkage's extremes; the group's subgraph is the induced one."""
import pytest
import torch
from graphs import awkward_graph
from tolerances import assert_close
from torch_geometric.data import Data

import pyg_dist
from pyg_dist.partitioning.io import read_meta
from pyg_dist.strategies.gradient_only import (
    ClusterGroup,
    batch_weight,
    edge_weights,
    groups,
    inclusion,
    node_weights,
)
from pyg_dist.strategies.gradient_only.correction import shrink


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    graph = awkward_graph(num_nodes=120, num_edges=700, num_features=3)
    out = tmp_path_factory.mktemp("clusters") / "parts"
    pyg_dist.partition(graph, 2, out, method="random", clusters_per_part=4)
    return graph, out / "clusters", read_meta(out / "clusters")


def test_a_group_is_the_induced_subgraph_of_its_clusters(folder):
    graph, path, meta = folder
    group = ClusterGroup.load(path, meta, [1, 3, 6])
    gid = group.data.global_id
    inside = torch.zeros(graph.num_nodes, dtype=torch.bool)
    inside[gid] = True
    src, dst = graph.edge_index
    expected = sorted(zip(src[inside[src] & inside[dst]].tolist(),
                          dst[inside[src] & inside[dst]].tolist()))
    ours = gid[group.data.edge_index]
    assert sorted(zip(ours[0].tolist(), ours[1].tolist())) == expected
    assert torch.equal(group.data.x, graph.x[gid])
    assert torch.equal(group.in_degree, torch.bincount(dst, minlength=graph.num_nodes)[gid])
    kept = torch.bincount(group.data.edge_index[1], minlength=gid.numel())
    assert_close(group.coverage[group.in_degree > 0],
                 (kept / group.in_degree)[group.in_degree > 0], what="coverage")


def test_node_correction_averages_to_the_full_graph_aggregation(folder):
    """Horvitz-Thompson: over random groupings, each node's weighted sum of
    its retained in-neighbours' features averages to the sum over all of
    them (within four standard errors)."""
    graph, path, meta = folder
    pi = inclusion(meta.num_parts, 2, "random")
    full = torch.zeros(graph.num_nodes, 3, dtype=torch.float64).index_add_(
        0, graph.edge_index[1], graph.x[graph.edge_index[0]].double())
    trials, total, squares = 200, torch.zeros_like(full), torch.zeros_like(full)
    aggregated = {}  # 400 draws of 70 distinct groups: each group loaded and summed once
    for period in range(trials):
        for clusters in groups(meta.num_parts, 2, period, "random"):
            if tuple(clusters) not in aggregated:
                group = ClusterGroup.load(path, meta, clusters)
                src, dst = group.data.edge_index
                weights = edge_weights(group, pi).double()[:, None]
                aggregated[tuple(clusters)] = group.data.global_id, torch.zeros(
                    group.data.num_nodes, 3, dtype=torch.float64).index_add_(
                    0, dst, group.data.x[src].double() * weights)
            global_id, agg = aggregated[tuple(clusters)]
            total[global_id] += agg
            squares[global_id] += agg ** 2
    mean = total / trials
    error = ((squares / trials - mean ** 2).clamp(min=0) / trials).sqrt()
    assert ((mean - full).abs() <= 4 * error + 1e-9).float().mean() > 0.99
    uncorrected_gap = 0.0
    for clusters in groups(meta.num_parts, 2, 0, "random"):  # without weights: biased low
        group = ClusterGroup.load(path, meta, clusters)
        uncorrected_gap += float(group.coverage.mean())
    assert uncorrected_gap / 2 < 0.7


def hand_group(train_mask):
    """Four nodes in clusters 0, 0, 1, 2 (node 3 in cluster 2) and the edges
    1->0 (inside cluster 0), 2->0, 3->0 and 2->1 (crossing), 0->2, 0->3."""
    edge_index = torch.tensor([[1, 2, 3, 2, 0, 0], [0, 0, 0, 1, 2, 3]])
    cluster = torch.tensor([0, 0, 1, 2])
    data = Data(edge_index=edge_index, num_nodes=4, global_id=torch.arange(4),
                train_mask=train_mask)
    return ClusterGroup([0, 1, 2], data, cluster, cluster[edge_index],
                        torch.tensor([3, 1, 1, 1]), 0)


def test_batch_weight_is_the_mean_node_weight_of_the_training_nodes(folder):
    """By hand, with pi(0, 1) = 1/4, pi(0, 2) = 1/2 and pi(1, 2) = 1/5:
    node 0 keeps its self-loop (1), 1->0 (1), 2->0 (4) and 3->0 (2) of
    4 entries: omega = 8/4 = 2; node 1: (1 + 4)/2 = 2.5; node 2: (1 + 4)/2;
    node 3: (1 + 2)/2 = 1.5."""
    pi = torch.tensor([[1.0, 0.25, 0.5], [0.25, 1.0, 0.2], [0.5, 0.2, 1.0]],
                      dtype=torch.float64)
    group = hand_group(torch.tensor([True, True, False, False]))
    assert_close(edge_weights(group, pi), torch.tensor([1.0, 4.0, 2.0, 4.0, 4.0, 2.0]),
                 what="edge weights")
    assert_close(node_weights(group, pi), torch.tensor([2.0, 2.5, 2.5, 1.5]), what="omega")
    others = hand_group(torch.tensor([False, True, True, True]))
    assert_close(torch.tensor([batch_weight(group, pi), batch_weight(others, pi)]),
                 torch.tensor([(2.0 + 2.5) / 2, (2.5 + 2.5 + 1.5) / 3]), what="batch weights")
    assert batch_weight(hand_group(torch.zeros(4, dtype=torch.bool)), pi) == 1.0
    _, path, meta = folder
    group = ClusterGroup.load(path, meta, [0, 2, 5, 7])
    assert batch_weight(group, inclusion(meta.num_parts, 2, "random")) > 1.0  # up-weighting


def test_shrinkage_extremes():
    weights = torch.tensor([1.0, 2.0, 6.0])
    assert torch.equal(shrink(weights, 0.0), weights)
    assert torch.equal(shrink(weights, 1.0), torch.full((3,), 3.0))
    assert_close(shrink(weights, 0.5), torch.tensor([2.0, 2.5, 4.5]), what="shrinkage 0.5")


@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_group_graph_runs_the_dist_layers_as_pyg_runs_the_subgraph(folder, kind):
    """Gradient-only training aggregates over the group as a graph without
    halo: a Dist layer on it equals PyG's layer on the group's edge_index,
    values and gradients; with edge weights GCN's weighted normalisation and,
    for SAGE, the weighted mean of the neighbours (by hand)."""
    from torch_geometric.nn import GCNConv, SAGEConv
    from torch_geometric.utils import scatter

    from pyg_dist.halo import Ledger
    from pyg_dist.nn import DistGCNConv, DistSAGEConv

    graph, path, meta = folder
    group = ClusterGroup.load(path, meta, [0, 2, 5])
    ours, order = group.graph(Ledger())
    assert ours.num_halo == 0 and ours.num_owned == group.data.num_nodes
    torch.manual_seed(0)
    reference = GCNConv(3, 5) if kind == "gcn" else SAGEConv(3, 5)
    layer = (DistGCNConv if kind == "gcn" else DistSAGEConv)(3, 5)
    layer.load_state_dict(reference.state_dict())
    src, dst = group.data.edge_index
    weight = torch.rand(src.numel()) + 0.5
    for weighted in (False, True):
        x = group.data.x.clone().requires_grad_()
        x_ours = group.data.x.clone().requires_grad_()
        if not weighted:
            expected = reference(x, group.data.edge_index)
        elif kind == "gcn":
            expected = reference(x, group.data.edge_index, weight)
        else:
            n = group.data.num_nodes
            mean = (scatter(weight.view(-1, 1) * x[src], dst, 0, dim_size=n, reduce="sum")
                    / scatter(weight, dst, 0, dim_size=n, reduce="sum").clamp(min=1e-12)
                    .view(-1, 1))
            expected = reference.lin_l(mean) + reference.lin_r(x)
        got = (layer(x_ours, ours) if not weighted
               else layer(x_ours, ours, edge_weight=weight[order]))
        assert_close(got, expected, what=f"{kind} weighted={weighted} output")
        expected.square().sum().backward()
        got.square().sum().backward()
        assert_close(x_ours.grad, x.grad, what=f"{kind} weighted={weighted} input gradient")
        for (name, a), b in zip(reference.named_parameters(), layer.parameters()):
            assert_close(b.grad, a.grad, what=f"{kind} weighted={weighted} {name}")
            a.grad, b.grad = None, None
    assert not ours.ledger.rows()  # nothing was exchanged
