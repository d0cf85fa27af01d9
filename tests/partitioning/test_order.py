"""Each part keeps every node's in-edges in the input's order (what sequence
aggregations such as LSTM read), for any cut."""
import pytest
import torch
from graphs import awkward_graph

import pyg_dist
from pyg_dist.partitioning import read_meta, read_part


@pytest.mark.parametrize("method", ["metis", "random"])
@pytest.mark.parametrize("num_parts", [1, 2, 3, 4])
def test_in_edges_keep_the_input_order(tmp_path, method, num_parts):
    data = awkward_graph()
    g = torch.Generator().manual_seed(num_parts)
    data.edge_index = data.edge_index[:, torch.randperm(data.num_edges, generator=g)]
    src, dst = data.edge_index
    pyg_dist.partition(data, num_parts, tmp_path / "parts", method=method, seed=2)
    meta = read_meta(tmp_path / "parts")
    for p in range(num_parts):
        graph = read_part(tmp_path / "parts", p, meta)["graph"]
        owned = graph["global_id"]
        row = torch.repeat_interleave(torch.arange(owned.numel()), graph["rowptr"].diff())
        local = torch.full((data.num_nodes,), -1)
        local[owned] = torch.arange(owned.numel())
        mine = torch.nonzero(local[dst] >= 0).view(-1)  # ascending input position
        expected = mine[torch.sort(local[dst[mine]], stable=True).indices]
        assert torch.equal(graph["edge_id"], expected), f"part {p}: in-edges out of input order"
        sources = torch.cat([owned, graph["halo_global_id"]])[graph["col"]]
        assert torch.equal(sources, src[expected]), f"part {p}: wrong sources"
        assert torch.equal(owned[row], dst[expected]), f"part {p}: wrong targets"
