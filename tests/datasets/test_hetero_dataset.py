"""synthetic-mag: ogbn-mag's types and relations (reverses added as
ToUndirected adds them) at its proportions, seeded, labels on papers only,
and targets that follow the source's community."""
import torch
from torch_geometric.transforms import ToUndirected

from pyg_dist.datasets import load_dataset
from pyg_dist.datasets.hetero import MAG_EDGES, MAG_NODES, synthetic_mag


def test_synthetic_mag_is_shaped_like_ogbn_mag():
    data = load_dataset("synthetic-mag", num_nodes=6000, seed=1)
    scale = 6000 / sum(MAG_NODES.values())
    for t, n in MAG_NODES.items():
        assert data[t].num_nodes == max(1, round(n * scale))
        assert data[t].x.shape == (data[t].num_nodes, 128)
    for (src, rel, dst), n in MAG_EDGES.items():
        if src != dst:
            assert data[src, rel, dst].num_edges == round(n * scale)
            assert torch.equal(data[dst, f"rev_{rel}", src].edge_index,
                               data[src, rel, dst].edge_index.flip(0))
    cites = data["paper", "cites", "paper"].edge_index
    assert torch.equal(ToUndirected()(data.clone())["paper", "cites", "paper"].edge_index, cites)
    assert set(data.node_types) == set(MAG_NODES)
    assert [t for t in data.node_types if "y" in data[t]] == ["paper"]
    assert int(data["paper"].y.max()) < 349
    masks = torch.stack([data["paper"][m] for m in ("train_mask", "val_mask", "test_mask")])
    assert torch.equal(masks.sum(0), torch.ones(data["paper"].num_nodes, dtype=torch.long))


def test_synthetic_mag_is_seeded_and_homophilous():
    a, b = synthetic_mag(num_nodes=4000, seed=3), synthetic_mag(num_nodes=4000, seed=3)
    c = synthetic_mag(num_nodes=4000, seed=4)
    e = ("author", "writes", "paper")
    assert torch.equal(a[e].edge_index, b[e].edge_index)
    assert not torch.equal(a[e].edge_index, c[e].edge_index)
    src, dst = a["paper", "cites", "paper"].edge_index
    y = a["paper"].y
    same = float((y[src] == y[dst]).float().mean())
    chance = float((torch.bincount(y).float() / y.numel()).pow(2).sum())
    # (small graphs: ToUndirected drops the duplicates that tiny communities draw)
    assert same > 50 * chance, f"{same:.3f} of citations within a class, chance {chance:.3f}"
