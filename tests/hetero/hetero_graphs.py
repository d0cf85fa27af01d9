"""A small random heterogeneous graph with the awkward cases: a
self-relation (paper-cites-paper, with self-loops and duplicates),
relations with no edges on some ranks, a node type no relation reads (no
halo), isolated nodes, and reverse relations as ``ToUndirected`` adds them."""
import torch
from torch_geometric.data import HeteroData
from torch_geometric.transforms import ToUndirected


def small_hetero(seed=0, num_papers=48, num_authors=36, num_fields=10, num_inst=5,
                 num_classes=4):
    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data["paper"].x = torch.randn(num_papers, 6, generator=g)
    data["paper"].y = torch.randint(0, num_classes, (num_papers,), generator=g)
    data["paper"].train_mask = torch.rand(num_papers, generator=g) < 0.5
    data["author"].x = torch.randn(num_authors, 5, generator=g)
    data["field"].x = torch.randn(num_fields, 3, generator=g)
    data["institution"].x = torch.randn(num_inst, 4, generator=g)
    # papers 40.. and authors 30.. touch no edge (isolated)
    cites = torch.randint(0, 40, (2, 120), generator=g)
    cites = torch.cat([cites, torch.tensor([[3, 3, 5], [3, 3, 7]])], dim=1)  # loops, duplicates
    data["paper", "cites", "paper"].edge_index = cites
    data["author", "writes", "paper"].edge_index = torch.stack(
        [torch.randint(0, 30, (90,), generator=g), torch.randint(0, 40, (90,), generator=g)])
    data["paper", "has_topic", "field"].edge_index = torch.stack(
        [torch.randint(0, 40, (50,), generator=g), torch.randint(0, num_fields, (50,),
                                                                 generator=g)])
    # two edges only: most ranks have none of them
    data["author", "affiliated_with", "institution"].edge_index = torch.tensor([[0, 29], [1, 4]])
    # institution and field get reverse relations, so every type is a target
    # (author <- writes, paper <- cites/writes, field <- has_topic, institution <- affiliated_with)
    data = ToUndirected(merge=False)(data)
    # keep institution unread: drop the reverse relation whose source it is
    del data["institution", "rev_affiliated_with", "author"]
    return data
