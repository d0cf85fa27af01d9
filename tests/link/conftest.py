"""One battery per world size for every link test module that checks ranks:
the rank-side checks of tests/link run as one battery (link_cases.rank_body),
launched once for the modules of :data:`USERS` (tests/conftest.py keeps them
in one worker)."""
import functools
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

import link_cases  # noqa: E402
from worlds import Battery  # noqa: E402

import pyg_dist  # noqa: E402
from pyg_dist.datasets import synthetic_recommendation  # noqa: E402

CASES = [  # (model, cut, undirected)
    ("gcn-dot", "metis", True),
    ("sage-mlp", "random", False),
    ("lightgcn", "metis", True),  # a user-item graph, BPR
]


def _prepare(world, root):
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
    return (cases,), (cases, refs)


#: The test modules that read the ranks' results.
USERS = ("test_link_embeddings.py", "test_link_metrics.py", "test_link_train.py")
WORLDS = {size: Battery(size, link_cases.rank_body, functools.partial(_prepare, size),
                        name=f"link cases on {size} ranks", users=USERS)
          for size in (2, 3, 4)}


@pytest.fixture(scope="session", params=sorted(WORLDS))
def world(request, tmp_path_factory):
    """``(world size, cases, references, per-rank results)``; each world
    launches once, whichever module asks first."""
    size = request.param
    (cases, refs), results = WORLDS[size].results(tmp_path_factory)
    return size, cases, refs, results


