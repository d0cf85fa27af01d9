"""Fixtures shared by the layer tests of this folder."""
import pytest
from graphs import awkward_graph

import pyg_dist


@pytest.fixture(scope="module")
def one_part(tmp_path_factory):
    """A one-rank partition of the awkward graph, loaded without a process group."""
    out = tmp_path_factory.mktemp("one_part") / "parts"
    pyg_dist.partition(awkward_graph(num_features=4), 1, out)
    return pyg_dist.DistData.load(out, rank=0)
