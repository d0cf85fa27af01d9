"""One launch of 4 gloo ranks runs every rank-side policy check
(policy_cases.body); the test modules of this folder share its results."""
import pytest
from graphs import awkward_graph
from policy_cases import F_IN, WORLD, body

import pyg_dist


@pytest.fixture(scope="session")
def policy_graph():
    return awkward_graph(num_nodes=200, num_edges=1000, seed=4, num_features=F_IN)


@pytest.fixture(scope="session")
def policy_results(policy_graph, tmp_path_factory):
    root = tmp_path_factory.mktemp("policies")
    dirs = {"main": str(root / "main")}
    pyg_dist.partition(policy_graph, WORLD, dirs["main"], method="metis", seed=1)
    return pyg_dist.launch(body, WORLD, args=(dirs,), timeout=900)
