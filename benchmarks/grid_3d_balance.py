"""The 3D grid's balance: the largest over the mean of the edges a rank's
adjacency block holds (worst of the three block layouts), in the graph's
own order, after the random permutation alone, and after the double
permutation (random, then dealt by degree), on a seeded power-law graph.

    python benchmarks/grid_3d_balance.py [--num-nodes 50000] [--avg-degree 16]
                                         [--exponent 2.1] [--grids 2x2x2 4x4x4 8x8x8]
                                         [--json out.json]

The graph's own order is given two ways: as generated (nodes grouped by
community) and sorted by degree, hubs first (the order of many crawled or
preprocessed datasets); each is what the rows and columns of a naive cut
would hold.
"""
import argparse
import json

import torch

from pyg_dist.datasets.community import CommunityGraphConfig, community_graph
from pyg_dist.strategies.grid_3d import balance, parse_grid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-nodes", type=int, default=50_000)
    parser.add_argument("--avg-degree", type=float, default=16.0)
    parser.add_argument("--exponent", type=float, default=2.1, help="degree power law")
    parser.add_argument("--grids", nargs="+", default=["2x2x2", "4x4x4", "8x8x8", "4x2x1"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    data = community_graph(CommunityGraphConfig(num_nodes=args.num_nodes,
                                                avg_degree=args.avg_degree, num_features=1,
                                                degree_exponent=args.exponent), seed=args.seed)
    n, edges = data.num_nodes, data.edge_index
    # grouped by community: the generator's communities, one after the other
    by_community = torch.argsort(data.y, stable=True)
    degree = torch.bincount(edges.reshape(-1), minlength=n)
    by_degree = torch.argsort(degree, descending=True, stable=True)
    orders = {"community order": by_community, "degree order": by_degree}
    print(f"# {n} nodes, {edges.size(1)} edges, largest degree {int(degree.max())}, "
          f"mean {float(degree.float().mean()):.1f}")
    rows = []
    for text in args.grids:
        shape = parse_grid(text)
        for name, order in orders.items():
            position = torch.empty_like(order)
            position[order] = torch.arange(n)
            relabelled = position[edges]  # the graph stored in that order
            row = {"grid": text, "stored in": name}
            for permute in ("none", "random", "double"):
                row[permute] = round(balance(relabelled, n, shape, args.seed, permute), 3)
            print(json.dumps(row))
            rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
