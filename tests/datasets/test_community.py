"""The large-graph generator: seeded, simple and symmetric, heavy-tailed,
cuttable, and with features that need the graph."""
import pytest
import torch

import pyg_dist
from pyg_dist.datasets import PRESETS, community_graph, load_dataset, preset

SMALL = dict(num_nodes=3000, avg_degree=12.0, num_features=32, num_classes=8, mixing=0.1)


@pytest.fixture(scope="module")
def graph():
    return community_graph(**SMALL, seed=1)


def test_same_seed_same_graph_other_seed_other_graph(graph):
    again = community_graph(**SMALL, seed=1)
    other = community_graph(**SMALL, seed=2)
    for key in ("edge_index", "x", "y", "community", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(graph[key], again[key]), key
    assert not torch.equal(graph.edge_index, other.edge_index)
    assert not torch.equal(graph.x, other.x)


def test_simple_symmetric_sorted_and_of_the_asked_size(graph):
    row, col = graph.edge_index
    n = graph.num_nodes
    assert graph.edge_index.dtype == torch.long
    assert bool((row != col).all()), "self-loops"
    key = row * n + col
    assert bool((key[1:] > key[:-1]).all()), "not sorted by (source, target) or duplicated"
    reverse = torch.sort(col * n + row).values
    assert torch.equal(reverse, key), "not symmetric"
    assert graph.num_edges == round(n * SMALL["avg_degree"] / 2) * 2
    assert graph.x.shape == (n, SMALL["num_features"]) and graph.x.dtype == torch.float32
    assert int(graph.y.max()) < SMALL["num_classes"]
    masks = graph.train_mask.int() + graph.val_mask.int() + graph.test_mask.int()
    assert bool((masks == 1).all()), "every node in exactly one split"


def test_degrees_are_heavy_tailed(graph):
    deg = torch.bincount(graph.edge_index[1], minlength=graph.num_nodes).double()
    top = torch.sort(deg, descending=True).values[: graph.num_nodes // 100]
    # The 1% best-connected nodes hold >= 8% of the edge ends (about 2.5% in an
    # Erdos-Renyi graph of this size and mean degree), the busiest >= 10x the median.
    assert top.sum() / deg.sum() >= 0.08
    assert deg.max() >= 10 * deg.median()


@pytest.mark.parametrize("num_parts", [4, 8])
def test_metis_finds_the_communities(tmp_path, graph, num_parts):
    metis = pyg_dist.partition(graph, num_parts, tmp_path / "m", method="metis")
    rand = pyg_dist.partition(graph, num_parts, tmp_path / "r", method="random")
    cut = metis.edge_cut / metis.num_edges
    row, col = graph.edge_index
    between = float((graph.community[row] != graph.community[col]).float().mean())
    assert 0.05 <= cut <= 0.25, cut
    assert cut <= between + 0.02, (cut, between)  # METIS finds the communities
    assert metis.edge_cut <= 0.3 * rand.edge_cut


def _nearest_centroid_accuracy(x, data):
    """Test accuracy of classifying by the nearest training-class mean."""
    classes = int(data.y.max()) + 1
    train = data.train_mask
    sums = torch.zeros(classes, x.size(1)).index_add_(0, data.y[train], x[train])
    counts = torch.bincount(data.y[train], minlength=classes).clamp(min=1)
    pred = torch.cdist(x[data.test_mask], sums / counts[:, None]).argmin(dim=1)
    return float((pred == data.y[data.test_mask]).float().mean())


def test_features_alone_are_weak_and_neighbours_help(graph):
    n = graph.num_nodes
    row, col = graph.edge_index
    deg = torch.bincount(col, minlength=n).float() + 1
    smoothed = (graph.x + torch.zeros_like(graph.x).index_add_(0, col, graph.x[row])) / deg[:, None]
    alone = _nearest_centroid_accuracy(graph.x, graph)
    with_graph = _nearest_centroid_accuracy(smoothed, graph)
    chance = float(torch.bincount(graph.y[graph.test_mask]).max()) / int(graph.test_mask.sum())
    assert chance + 0.05 < alone < 0.75, (chance, alone)
    assert with_graph >= alone + 0.15, (alone, with_graph)


def test_presets_have_the_shapes_of_their_namesakes():
    arxiv, products = PRESETS["synthetic-arxiv"], PRESETS["synthetic-products"]
    assert (arxiv.num_nodes, arxiv.num_features, arxiv.num_classes) == (169_343, 128, 40)
    assert (products.num_nodes, products.num_features, products.num_classes) == (2_449_029, 100, 47)
    data = load_dataset("synthetic-arxiv", num_nodes=2000, avg_degree=None)
    assert data.num_nodes == 2000 and data.num_features == 128
    assert data.num_edges == round(2000 * 13.7 / 2) * 2
    assert abs(float(data.train_mask.float().mean()) - 0.54) < 0.01
    collab = PRESETS["synthetic-collab"]
    assert (collab.num_nodes, collab.num_features, collab.max_degree) == (235_868, 128, 671)
    data = load_dataset("synthetic-collab", num_nodes=3000)
    assert data.num_edges == round(3000 * 8.2 / 2) * 2


def test_bad_parameters_name_the_fix():
    with pytest.raises(ValueError, match="unknown preset 'synthetic-papers'; use one of"):
        preset("synthetic-papers")
    with pytest.raises(TypeError, match="has no parameter num_edges; set one of"):
        preset("synthetic-arxiv", num_edges=5)
    with pytest.raises(ValueError, match=r"mixing=1.5 \(needs 0 <= mixing <= 1\)"):
        community_graph(num_nodes=100, avg_degree=4, mixing=1.5)
    with pytest.raises(ValueError, match="avg_degree=200"):
        community_graph(num_nodes=100, avg_degree=200)
    with pytest.raises(ValueError, match="unknown dataset 'arxiv'; use one of synthetic, "
                                         "synthetic-arxiv"):
        load_dataset("arxiv")
