"""Partitioning large graphs: the contracted METIS path, and parts made one at a time."""
import weakref

import pytest
import torch
from graphs import awkward_graph

import pyg_dist
from pyg_dist.datasets import community_graph
from pyg_dist.partitioning import PartPlan, read_part
from pyg_dist.partitioning.coarsen import contract, label_propagation
from pyg_dist.partitioning.cut import _symmetric_csr


@pytest.fixture(scope="module")
def graph():
    return community_graph(num_nodes=20_000, avg_degree=12.0, num_features=4, num_classes=4,
                           mixing=0.1, seed=0)


@pytest.mark.parametrize("num_parts", [4, 8])
def test_coarse_metis_cuts_about_as_well_as_metis(tmp_path, graph, num_parts):
    metis = pyg_dist.partition(graph, num_parts, tmp_path / "m", method="metis")
    coarse = pyg_dist.partition(graph, num_parts, tmp_path / "c", method="metis-coarse")
    rand = pyg_dist.partition(graph, num_parts, tmp_path / "r", method="random")
    assert coarse.edge_cut <= 1.25 * metis.edge_cut
    assert coarse.edge_cut <= 0.35 * rand.edge_cut
    assert max(coarse.part_sizes) <= 1.05 * graph.num_nodes / num_parts
    assert sum(coarse.part_sizes) == graph.num_nodes


def test_coarse_metis_on_an_awkward_graph(tmp_path):
    data = awkward_graph(num_nodes=400, num_edges=3000, num_features=3)
    meta = pyg_dist.partition(data, 3, tmp_path / "p", method="metis-coarse")
    parts = [read_part(tmp_path / "p", p, meta) for p in range(3)]
    owned = torch.cat([p["graph"]["global_id"] for p in parts])
    assert torch.equal(torch.sort(owned).values, torch.arange(data.num_nodes))
    edge_ids = torch.cat([p["graph"]["edge_id"] for p in parts])
    assert torch.equal(torch.sort(edge_ids).values, torch.arange(data.num_edges))


def test_label_propagation_respects_the_size_cap_and_contraction_keeps_every_edge(graph):
    xadj, adjncy = _symmetric_csr(graph.edge_index, graph.num_nodes)
    cluster = label_propagation(xadj, adjncy, max_size=300, rounds=8, seed=0)
    sizes = torch.bincount(torch.from_numpy(cluster))
    assert int(sizes.max()) <= 300 and int(sizes.min()) >= 1
    cxadj, cadjncy, weight = contract(xadj, adjncy, cluster)
    row = torch.from_numpy(cluster).repeat_interleave(torch.from_numpy(xadj).diff())
    col = torch.from_numpy(cluster[adjncy])
    between = row != col
    # Cluster edge (a, b) stands for exactly the node edges from a to b.
    expected = torch.unique(row[between] * sizes.numel() + col[between], return_counts=True)
    crow = torch.arange(cxadj.size - 1).repeat_interleave(torch.from_numpy(cxadj).diff())
    assert torch.equal(crow * sizes.numel() + torch.from_numpy(cadjncy), expected[0])
    assert torch.equal(torch.from_numpy(weight), expected[1])
    assert int(between.sum()) < 0.4 * adjncy.size  # most edges fall inside clusters


def test_parts_are_made_and_written_one_at_a_time(tmp_path, monkeypatch):
    data = awkward_graph(num_nodes=300, num_edges=2000, num_features=4)
    alive = []
    real_build = PartPlan.build

    def build(self, p):
        # Every earlier part's arrays are gone when the next one is made.
        assert all(ref() is None for ref in alive), f"part {p - 1} still alive at part {p}"
        part = real_build(self, p)
        alive[:] = [weakref.ref(t) for t in vars(part).values()]
        return part

    monkeypatch.setattr(PartPlan, "build", build)
    meta = pyg_dist.partition(data, 4, tmp_path / "p")
    assert len(meta.part_sha256) == 4
