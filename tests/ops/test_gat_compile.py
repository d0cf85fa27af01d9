"""The fused GAT op under torch.compile: its registered ops pass
torch.library.opcheck, and a compiled function of it (one graph, no break)
equals eager forward and backward on every backend."""
import pytest
import torch
from tolerances import assert_close

from pyg_dist.ops import available_backends, gat, to_csr

BACKENDS = available_backends("cpu")
NUM_OWNED, NUM_HALO, HEADS, CHANNELS = 20, 6, 2, 3


def inputs(with_halo, with_edge, seed=0):
    """A CSR with empty rows and duplicates, and every tensor of one gat call."""
    g = torch.Generator().manual_seed(seed)
    num_src = NUM_OWNED + (NUM_HALO if with_halo else 0)
    target = torch.randint(0, NUM_OWNED - 2, (90,), generator=g)
    source = torch.randint(0, num_src, (90,), generator=g)
    rowptr, col, _ = to_csr(torch.stack([source, target]), NUM_OWNED)
    x = torch.randn(NUM_OWNED, HEADS, CHANNELS, generator=g)
    alpha_src = torch.randn(NUM_OWNED, HEADS, generator=g)
    alpha_dst = torch.randn(NUM_OWNED, HEADS, generator=g)
    x_halo = torch.randn(NUM_HALO, HEADS, CHANNELS, generator=g) if with_halo else None
    alpha_halo = torch.randn(NUM_HALO, HEADS, generator=g) if with_halo else None
    alpha_edge = torch.randn(col.numel(), HEADS, generator=g) if with_edge else None
    scale = (torch.rand(col.numel(), HEADS, generator=g) > 0.3).float() * 2 if with_edge else None
    return rowptr, col, x, x_halo, alpha_src, alpha_halo, alpha_dst, alpha_edge, scale


@pytest.mark.parametrize("with_halo", [True, False])
@pytest.mark.parametrize("with_edge", [True, False])
def test_opcheck_gat(with_halo, with_edge):
    rowptr, col, *tensors = inputs(with_halo, with_edge)
    for t in tensors[:-1]:  # edge_scale is not differentiated
        if t is not None:
            t.requires_grad_()
    torch.library.opcheck(torch.ops.pyg_dist.gat.default,
                          (rowptr, col, *tensors, 0.2, BACKENDS[0]))


def test_opcheck_gat_backward():
    rowptr, col, *tensors = inputs(True, True)
    out, lse = torch.ops.pyg_dist.gat(rowptr, col, *tensors, 0.2, BACKENDS[0])
    grad_out = torch.randn_like(out)
    for need in [(True, True, True), (True, False, False), (False, False, True)]:
        torch.library.opcheck(torch.ops.pyg_dist.gat_backward.default,
                              (grad_out, lse, rowptr, col, *tensors, 0.2, BACKENDS[0], *need))


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_gat_equals_eager(backend):
    rowptr, col, x, x_halo, alpha_src, alpha_halo, alpha_dst, alpha_edge, scale = \
        inputs(True, True)
    leaves = [t.requires_grad_() for t in (x, x_halo, alpha_src, alpha_halo, alpha_dst,
                                           alpha_edge)]

    def attend(x, x_halo, alpha_src, alpha_halo, alpha_dst, alpha_edge):
        return gat(rowptr, col, x.tanh(), alpha_src, alpha_dst, x_halo=x_halo,
                   alpha_src_halo=alpha_halo, alpha_edge=alpha_edge, edge_scale=scale,
                   negative_slope=0.1, backend=backend)

    compiled = torch.compile(attend, fullgraph=True, backend="aot_eager")
    upstream = torch.randn(NUM_OWNED, HEADS, CHANNELS, generator=torch.Generator().manual_seed(3))
    results = []
    for fn in (attend, compiled):
        out = fn(*leaves)
        results.append((out, torch.autograd.grad((out * upstream).sum(), leaves)))
    (eager, eager_grads), (ours, our_grads) = results
    assert_close(ours, eager, what=f"{backend}: compiled gat output")
    for name, a, b in zip(("x", "x_halo", "alpha_src", "alpha_src_halo", "alpha_dst",
                           "alpha_edge"), our_grads, eager_grads):
        assert_close(a, b, what=f"{backend}: compiled gradient of {name}")
