"""spmm under torch.compile: the registered ops pass torch.library.opcheck, and
a compiled function of spmm (one graph, no break) equals eager forward and
backward on every backend."""
import pytest
import torch
from tolerances import assert_close

from pyg_dist.ops import available_backends, spmm, to_csr

BACKENDS = available_backends("cpu")
NUM_OWNED, NUM_HALO, FEATS = 30, 10, 7


def graph(num_src, seed=0):
    """A CSR over ``num_src`` source rows with empty rows and duplicate entries."""
    g = torch.Generator().manual_seed(seed)
    target = torch.randint(0, NUM_OWNED - 3, (150,), generator=g)  # the last rows are empty
    source = torch.randint(0, num_src, (150,), generator=g)
    edge_index = torch.stack([torch.cat([source, source[:10]]), torch.cat([target, target[:10]])])
    rowptr, col, _ = to_csr(edge_index, NUM_OWNED)
    return rowptr, col


def tensors(col, with_value, with_halo, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(NUM_OWNED, FEATS, generator=g)
    x_halo = torch.randn(NUM_HALO, FEATS, generator=g) if with_halo else None
    value = torch.rand(col.numel(), generator=g) + 0.1 if with_value else None
    return x, x_halo, value


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
@pytest.mark.parametrize("with_value", [True, False])
@pytest.mark.parametrize("with_halo", [True, False])
def test_opcheck_spmm(reduce, with_value, with_halo):
    rowptr, col = graph(NUM_OWNED + (NUM_HALO if with_halo else 0))
    x, x_halo, value = tensors(col, with_value, with_halo)
    for t in (x, x_halo, value):
        if t is not None:
            t.requires_grad_()
    torch.library.opcheck(torch.ops.pyg_dist.spmm.default,
                          (rowptr, col, value, x, x_halo, reduce, BACKENDS[0]))


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_opcheck_spmm_backward(reduce):
    rowptr, col = graph(NUM_OWNED + NUM_HALO)
    x, x_halo, value = tensors(col, True, True)
    out, arg = torch.ops.pyg_dist.spmm(rowptr, col, value, x, x_halo, reduce, BACKENDS[0])
    grad_out = torch.randn_like(out)
    for need_src, need_value in [(True, True), (True, False), (False, True)]:
        torch.library.opcheck(torch.ops.pyg_dist.spmm_backward.default,
                              (grad_out, rowptr, col, value, x, x_halo, arg, reduce,
                               BACKENDS[0], need_src, need_value))


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_spmm_equals_eager(backend):
    rowptr, col = graph(NUM_OWNED + NUM_HALO)
    x, x_halo, value = tensors(col, True, True)
    inputs = [x.requires_grad_(), x_halo.requires_grad_(), value.requires_grad_()]

    def aggregate(rowptr, col, x, x_halo, value):
        return (spmm(rowptr, col, x, value, "sum", x_halo, backend=backend),
                spmm(rowptr, col, x, None, "mean", x_halo, backend=backend),
                spmm(rowptr, col, x.relu(), value, "max", x_halo, backend=backend))

    compiled = torch.compile(aggregate, fullgraph=True)  # inductor; fullgraph: no break
    g = torch.Generator().manual_seed(2)
    upstream = [torch.randn(NUM_OWNED, FEATS, generator=g) for _ in range(3)]
    results = []
    for fn in (aggregate, compiled):
        outs = fn(rowptr, col, x, x_halo, value)
        loss = sum((out * up).sum() for out, up in zip(outs, upstream))
        results.append((outs, torch.autograd.grad(loss, inputs)))
    (eager_outs, eager_grads), (ours, our_grads) = results
    for name, a, b in zip(("sum", "mean", "max"), ours, eager_outs):
        assert_close(a, b, what=f"{backend}: compiled {name} output")
    for name, a, b in zip(("x", "x_halo", "value"), our_grads, eager_grads):
        assert_close(a, b, what=f"{backend}: compiled gradient of {name}")
