"""One battery of 4 gloo ranks runs every rank-side policy check
(policy_cases.body); the test modules of this folder share its results."""
import pytest
from graphs import awkward_graph
from policy_cases import F_IN, WORLD, body
from worlds import Battery

import pyg_dist


def policy_graph_of():
    return awkward_graph(num_nodes=200, num_edges=1000, seed=4, num_features=F_IN)


def prepare(root):
    dirs = {"main": str(root / "main")}
    pyg_dist.partition(policy_graph_of(), WORLD, dirs["main"], method="metis", seed=1)
    return (dirs,), None


POLICIES = Battery(WORLD, body, prepare, timeout=900, name="halo policies",
                   users=("test_compress.py", "test_ledger.py", "test_policies.py"))


@pytest.fixture(scope="session")
def policy_graph():
    return policy_graph_of()


@pytest.fixture(scope="session")
def policy_results(tmp_path_factory):
    return POLICIES.results(tmp_path_factory)[1]
