"""One launch per world size for every link test module: the rank-side
checks of tests/link run as one battery (link_cases.rank_body)."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

import link_cases  # noqa: E402

import pyg_dist  # noqa: E402
from pyg_dist.datasets import synthetic_recommendation  # noqa: E402

CASES = [  # (model, cut, undirected)
    ("gcn-dot", "metis", True),
    ("sage-mlp", "random", False),
    ("lightgcn", "metis", True),  # a user-item graph, BPR
]


def _prepare(root, world):
    cases, refs = [], []
    gen = torch.Generator().manual_seed(world)
    for i, (kind, method, undirected) in enumerate(CASES):
        if kind == "lightgcn":
            split = synthetic_recommendation(60, 200, avg_degree=3, seed=i)
            data = split[0]
        else:
            data = link_cases.graph(undirected=undirected, seed=i)
            split = link_cases.link_split(data, undirected, seed=i)
        parts = root / f"{kind}-{world}"
        pyg_dist.partition(split, world, parts, method=method, seed=i)
        num = data.num_nodes
        index = [torch.cat([torch.randint(0, num, (9,), generator=gen),
                            torch.tensor([num - 1, num - 1, 0])]) for _ in range(world)]
        weight = [torch.randn(12, 3, generator=gen) for _ in range(world)]
        feats = data.num_nodes if kind == "lightgcn" else data.x.size(1)
        state = link_cases.model(kind, feats).state_dict()
        cases.append({"parts": str(parts), "emb": str(root / f"emb-{kind}"), "kind": kind,
                      "index": index, "weight": weight, "state": state})
        refs.append((data, split, link_cases.reference(kind, split)))
    return cases, refs


@pytest.fixture(scope="session", params=[2, 3, 4])
def world(request, tmp_path_factory):
    size = request.param
    cases, refs = _prepare(tmp_path_factory.mktemp(f"link{size}"), size)
    results = pyg_dist.launch(link_cases.rank_body, world_size=size, args=(cases,))
    return size, cases, refs, results


