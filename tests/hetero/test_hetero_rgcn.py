"""RGCNConv (basis and block decomposition), FastRGCNConv and GCNConv on the
homogeneous view of a DistHeteroData equal PyG on HeteroData.to_homogeneous():
outputs, input and parameter gradients."""
import pytest
import torch
import torch.distributed as dist
from hetero_graphs import small_hetero
from tolerances import assert_close
from torch_geometric.nn import FastRGCNConv, GCNConv, RGCNConv
from worlds import Battery

import pyg_dist
from pyg_dist.nn import to_distributed

WIDTH = 6


def build(kind, num_relations):
    torch.manual_seed(0)
    if kind == "rgcn-bases":
        return torch.nn.ModuleList([RGCNConv(WIDTH, 8, num_relations, num_bases=3),
                                    RGCNConv(8, 4, num_relations, num_bases=2, aggr="add")])
    if kind == "rgcn-blocks":
        return torch.nn.ModuleList([RGCNConv(WIDTH, 8, num_relations, num_blocks=2),
                                    RGCNConv(8, 4, num_relations, num_blocks=4)])
    if kind == "fast-rgcn":
        return torch.nn.ModuleList([FastRGCNConv(WIDTH, 8, num_relations, num_bases=2),
                                    FastRGCNConv(8, 4, num_relations)])
    return torch.nn.ModuleList([GCNConv(WIDTH, 8), GCNConv(8, 4)])


def forward(model, x, edge_index, edge_type):
    for i, conv in enumerate(model):
        x = conv(x, edge_index) if isinstance(conv, GCNConv) else conv(x, edge_index, edge_type)
        x = x.relu() if i == 0 else x
    return x


KINDS = ["rgcn-bases", "rgcn-blocks", "fast-rgcn", "gcn"]


def features(num_nodes):
    g = torch.Generator().manual_seed(5)
    return torch.randn(num_nodes, WIDTH, generator=g), torch.randn(num_nodes, 4, generator=g)


def run_ranks(folder, num_nodes, num_relations):
    data = pyg_dist.DistHeteroData.load(folder).to_homogeneous()
    x_all, up_all = features(num_nodes)
    out = []
    for kind in KINDS:
        model = to_distributed(build(kind, num_relations))
        x = x_all[data.global_id].clone().requires_grad_()
        y = forward(model, x, data.edge_index, data.edge_type)
        (y * up_all[data.global_id]).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        for g in grads.values():
            dist.all_reduce(g)
        out.append((data.global_id, y.detach(), x.grad, grads))
    return out


def prepare(root):
    hetero = small_hetero()
    pyg_dist.partition(hetero, 3, root / "parts", seed=2)
    return (str(root / "parts"), hetero.to_homogeneous().num_nodes, len(hetero.edge_types)), None


RANKS = Battery(3, run_ranks, prepare, timeout=240)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return RANKS.results(tmp_path_factory)[1]


def test_rgcn_on_the_homogeneous_view_equals_pyg(results):
    hetero = small_hetero()
    data = hetero.to_homogeneous()
    num_relations = len(hetero.edge_types)
    x_all, up_all = features(data.num_nodes)
    for k, kind in enumerate(KINDS):
        model = build(kind, num_relations)
        x = x_all.clone().requires_grad_()
        y = forward(model, x, data.edge_index, data.edge_type)
        (y * up_all).sum().backward()
        out, x_grad = torch.full_like(y, float("nan")), torch.full_like(x, float("nan"))
        for rank in results:
            gid, y_rank, xg_rank, grads = rank[k]
            out[gid], x_grad[gid] = y_rank, xg_rank
        assert_close(out, y.detach(), what=f"{kind} out")
        assert_close(x_grad, x.grad, what=f"{kind} x.grad")
        for n, p in model.named_parameters():
            assert_close(results[0][k][3][n], p.grad, what=f"{kind} grad {n}")
