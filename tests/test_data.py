"""What a rank holds: loading one part, and training on it, costs memory in
proportion to the part, not to the whole graph."""
import torch

import pyg_dist
from pyg_dist.datasets import community_graph
from pyg_dist.halo import exchange as exchange_module
from pyg_dist.halo.comm import PendingRows
from pyg_dist.models import GNN
from pyg_dist.partitioning import read_meta
from pyg_dist.train import evaluate, train_step

NODES_PER_PART = 500


def _graph_in_parts(tmp_path, scale):
    """Parts of NODES_PER_PART nodes from a graph of ``2 * scale`` parts."""
    parts = 2 * scale
    data = community_graph(num_nodes=NODES_PER_PART * parts, avg_degree=8.0, num_features=16,
                           num_classes=4, mixing=0.1, seed=0)
    out = tmp_path / f"x{scale}"
    pyg_dist.partition(data, parts, out, method="metis")
    return out


def _fake_exchange(send, send_counts, recv_counts, group=None, transport=None, async_op=False,
                   tag=0):
    """The network of a rank whose peers send zeros (no process group needed)."""
    recv = send.new_zeros((sum(recv_counts), *send.shape[1:]))
    return PendingRows(recv, []) if async_op else recv


def _peak_allocated(fn):
    """Largest number of bytes the CPU allocator held at once while ``fn`` ran
    (allocations minus frees, in time order, from the profiler's memory events)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as prof:
        fn()
    running = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        running += event.self_cpu_memory_usage
        peak = max(peak, running)
    return peak


def _load_and_train(out):
    """Loads part 0 (memory-mapped), then one training step and one
    evaluation of a 2-layer GCN on it."""
    def run():
        data = pyg_dist.DistData.load(out, rank=0)
        torch.manual_seed(0)
        model = GNN("gcn", data.x.size(1), 16, data.meta.num_classes)
        train_step(model, data, torch.optim.Adam(model.parameters(), lr=0.01))
        evaluate(model, data)
        run.sizes = (data.num_nodes, data.edge_index.num_edges, data.edge_index.num_halo)
    return run


def test_a_part_costs_memory_by_its_size_not_the_graphs(tmp_path, monkeypatch):
    """Parts of the same size from a graph 16x larger: the same memory per
    owned node (an int64 vector over the large graph's nodes would add ~25%,
    a copy of its features 16x)."""
    monkeypatch.setattr(exchange_module, "exchange_rows", _fake_exchange)
    scale = 16
    small, large = _graph_in_parts(tmp_path, 1), _graph_in_parts(tmp_path, scale)
    assert read_meta(large).num_nodes == scale * read_meta(small).num_nodes
    _load_and_train(small)()  # one-time allocations (kernel builds, caches) out of the way
    per_node = []
    for out in (small, large):
        run = _load_and_train(out)
        peak = _peak_allocated(run)
        owned = run.sizes[0]
        assert abs(owned - NODES_PER_PART) <= 0.05 * NODES_PER_PART, run.sizes
        per_node.append(peak / owned)
    assert per_node[1] <= 1.15 * per_node[0], per_node
