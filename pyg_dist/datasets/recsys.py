"""A synthetic recommendation graph: users and items, heavy-tailed on both
sides, as the link split :func:`pyg_dist.partition` cuts."""
from __future__ import annotations

import torch
from torch_geometric.data import Data

__all__ = ["synthetic_recommendation"]


def synthetic_recommendation(num_users: int = 200, num_items: int = 100,
                             avg_degree: float = 6.0, seed: int = 0, held_out: float = 0.2,
                             skew: float = 1.1) -> tuple[Data, Data, Data]:
    r"""A bipartite user-item graph with heavy-tailed degrees, split as PyG's
    ``RandomLinkSplit`` splits (``(train_data, val_data, test_data)``).

    Nodes :math:`0, \dots, U - 1` are users and :math:`U, \dots, U + I - 1`
    items. Item :math:`i`'s popularity is :math:`\propto (i + 1)^{-s}` (a
    Zipf law of skew ``skew``); user :math:`u` interacts with
    :math:`1 + \lfloor X_u \rfloor` distinct items, :math:`X_u` log-normal
    with mean ``avg_degree - 1``. A share ``held_out`` of the interactions
    is held out, half for validation, half for testing. Messages pass along
    the training interactions in both directions; each split's
    ``edge_label_index`` holds its interactions as (user, item) pairs.

    Args:
        num_users (int, optional): Users. (default: :obj:`200`)
        num_items (int, optional): Items. (default: :obj:`100`)
        avg_degree (float, optional): Interactions per user on average.
            (default: :obj:`6.0`)
        seed (int, optional): The seed. (default: :obj:`0`)
        held_out (float, optional): Share of interactions held out.
            (default: :obj:`0.2`)
        skew (float, optional): The items' Zipf skew. (default: :obj:`1.1`)
    """
    if num_users < 1 or num_items < 1 or not avg_degree >= 1:
        raise ValueError(f"'synthetic_recommendation' needs users and items (got "
                         f"{num_users}, {num_items}) and avg_degree >= 1 (got {avg_degree})")
    gen = torch.Generator().manual_seed(seed)
    popularity = torch.arange(1, num_items + 1, dtype=torch.float64).pow(-skew)
    sigma = 1.0
    mu = torch.log(torch.tensor(max(avg_degree - 1.0, 1e-3))) - sigma ** 2 / 2
    degree = (1 + torch.exp(mu + sigma * torch.randn(num_users, generator=gen,
                                                     dtype=torch.float64)).floor()).long()
    degree = degree.clamp(max=num_items)
    users, items = [], []
    for u in range(num_users):
        chosen = torch.multinomial(popularity, int(degree[u]), replacement=False, generator=gen)
        users.append(torch.full((chosen.numel(),), u))
        items.append(chosen + num_users)
    pairs = torch.stack([torch.cat(users), torch.cat(items)])
    order = torch.rand(pairs.size(1), generator=gen)
    val = order < held_out / 2
    test = (order >= held_out / 2) & (order < held_out)
    train = ~(val | test)
    num_nodes = num_users + num_items
    message = torch.cat([pairs[:, train], pairs[:, train].flip(0)], 1)

    def graph(keep: torch.Tensor) -> Data:
        return Data(edge_index=message, edge_label_index=pairs[:, keep],
                    edge_label=torch.ones(int(keep.sum())), num_nodes=num_nodes)

    return graph(train), graph(val), graph(test)
