"""HGTConv distributed (to_distributed's DistHGTConv twin) equals PyG's
HGTConv on the whole HeteroData: outputs, input and parameter gradients,
with one halo exchange per source type and layer."""
import pytest
import torch
import torch.distributed as dist
from hetero_graphs import small_hetero
from tolerances import assert_close
from torch_geometric.nn import HGTConv
from worlds import Battery

import pyg_dist
from pyg_dist.nn import DistHGTConv, to_distributed


class HGT(torch.nn.Module):
    def __init__(self, widths, metadata):
        super().__init__()
        self.conv1 = HGTConv(widths, 8, metadata, heads=2)
        self.conv2 = HGTConv(8, 4, metadata, heads=1)

    def forward(self, x_dict, edge_index_dict):
        x_dict = {t: v.relu() for t, v in self.conv1(x_dict, edge_index_dict).items()}
        return self.conv2(x_dict, edge_index_dict)


def grad_of(p):
    """A parameter's gradient, zeros where the output does not use it (the
    skip gate of a type whose widths differ)."""
    return p.grad.clone() if p.grad is not None else torch.zeros_like(p)


def upstream(num_nodes):
    g = torch.Generator().manual_seed(3)
    return {t: torch.randn(n, 4, generator=g) for t, n in num_nodes.items()}


def run_ranks(folder, widths, state, num_nodes):
    data = pyg_dist.DistHeteroData.load(folder)
    model = to_distributed(HGT(widths, data.metadata()))
    assert isinstance(model.conv1, DistHGTConv)
    model.load_state_dict(state)
    x = {t: v.clone().requires_grad_() for t, v in data.x_dict.items()}
    out = model(x, data.edge_index_dict)
    up = upstream(num_nodes)
    sum((out[t] * up[t][data[t].global_id]).sum() for t in out).backward()
    grads = {n: grad_of(p) for n, p in model.named_parameters()}
    for g in grads.values():
        dist.all_reduce(g)
    exchanges = {name: e.exchanges for (_, name, d), e in data.ledger.entries.items()
                 if d == "fwd"}
    return ({t: data[t].global_id for t in data.node_types}, {t: v.detach() for t, v in
            out.items()}, {t: v.grad for t, v in x.items()}, grads, exchanges)


def whole_model(data):
    """PyG's model on the whole graph (seeded), its output and input gradients."""
    widths = {t: data[t].x.size(1) for t in data.node_types}
    torch.manual_seed(0)
    model = HGT(widths, data.metadata())
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x = {t: v.clone().requires_grad_() for t, v in data.x_dict.items()}
    out = model(x, data.edge_index_dict)
    num_nodes = {t: data[t].num_nodes for t in data.node_types}
    up = upstream(num_nodes)
    sum((out[t] * up[t]).sum() for t in out).backward()
    return model, state, x, out, widths, num_nodes


def prepare(root):
    data = small_hetero()
    _, state, _, _, widths, num_nodes = whole_model(data)
    pyg_dist.partition(data, 3, root / "parts", method="random", seed=3)
    return (str(root / "parts"), widths, state, num_nodes), None


RANKS = Battery(3, run_ranks, prepare, timeout=240)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return RANKS.results(tmp_path_factory)[1]


def test_hgt_equals_pyg(results):
    data = small_hetero()
    model, _, x, out, _, _ = whole_model(data)
    for t in out:
        full_out = torch.full_like(out[t], float("nan"))
        full_grad = torch.full_like(x[t], float("nan"))
        for gid, y, xg, _, _ in results:
            full_out[gid[t]], full_grad[gid[t]] = y[t], xg[t]
        assert_close(full_out, out[t].detach(), what=f"out {t}")
        assert_close(full_grad, x[t].grad, what=f"x.grad {t}")
    for n, p in model.named_parameters():
        assert_close(results[0][3][n], grad_of(p), what=f"grad {n}")
    sources = sorted({e[0] for e in data.edge_types})
    for *_, exchanges in results:
        assert sorted(exchanges) == sorted(f"conv{i}[{t}]" for i in (1, 2) for t in sources)
        assert set(exchanges.values()) == {1}
