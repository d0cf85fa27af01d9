"""A small random heterogeneous graph with the awkward cases: a
self-relation (paper-cites-paper, with self-loops and duplicates),
relations with no edges on some ranks, a node type no relation reads (no
halo), isolated nodes, and reverse relations as ``ToUndirected`` adds them;
and a graph of two communities that a cut in two leaves with a small halo."""
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


def two_community_hetero(papers=200, authors=120, num_edges=1500, crossing=6, seed=0):
    """Papers and authors in two halves, each relation wired inside a half
    but for ``crossing`` citations: cut in two, well under 5% of each
    relation's in-neighbours live on the other rank."""
    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data["paper"].x = torch.randn(papers, 8, generator=g)
    data["paper"].y = torch.randint(0, 3, (papers,), generator=g)
    data["paper"].train_mask = torch.rand(papers, generator=g) < 0.5
    data["paper"].val_mask = data["paper"].test_mask = ~data["paper"].train_mask
    data["author"].x = torch.randn(authors, 8, generator=g)

    def within(num_src, num_dst):
        side = torch.randint(0, 2, (num_edges,), generator=g)
        return torch.stack([torch.randint(0, num_src // 2, (num_edges,), generator=g)
                            + side * (num_src // 2),
                            torch.randint(0, num_dst // 2, (num_edges,), generator=g)
                            + side * (num_dst // 2)])

    cross = torch.stack([torch.randint(0, papers // 2, (crossing,), generator=g),
                         torch.randint(papers // 2, papers, (crossing,), generator=g)])
    data["paper", "cites", "paper"].edge_index = torch.cat([within(papers, papers), cross], 1)
    data["author", "writes", "paper"].edge_index = within(authors, papers)
    return ToUndirected(merge=False)(data)
