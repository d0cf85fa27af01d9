import pytest
import torch
from tolerances import TOL, assert_close

from pyg_dist.ops import available_backends, spmm, spmm_ref, to_csr

CPU_BACKENDS = available_backends("cpu")
CUDA_BACKENDS = available_backends("cuda") if torch.cuda.is_available() else []
CASES = [(b, "cpu") for b in CPU_BACKENDS] + [(b, "cuda") for b in CUDA_BACKENDS]


def make_graph(num_rows, num_src, nnz, seed, hub=0, empty_rows=(), dup=False):
    g = torch.Generator().manual_seed(seed)
    target = torch.randint(0, num_rows, (nnz,), generator=g)
    source = torch.randint(0, num_src, (nnz,), generator=g)
    if hub:
        target = torch.cat([target, torch.zeros(hub, dtype=torch.long)])
        source = torch.cat([source, torch.randint(0, num_src, (hub,), generator=g)])
    if dup:
        target = torch.cat([target, target[:20]])
        source = torch.cat([source, source[:20]])
    keep = ~torch.isin(target, torch.tensor(list(empty_rows), dtype=torch.long))
    return to_csr(torch.stack([source[keep], target[keep]]), num_rows)


def run_both(rowptr, col, num_owned, num_halo, feats, reduce, dtype, backend, device,
             with_value=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num_owned, feats, generator=g).to(device, dtype).requires_grad_()
    xh = (torch.randn(num_halo, feats, generator=g).to(device, dtype).requires_grad_()
          if num_halo else None)
    value = (torch.rand(col.numel(), generator=g).to(device, dtype).requires_grad_()
             if with_value else None)
    rowptr, col = rowptr.to(device), col.to(device)
    inputs = [t for t in (x, xh, value) if t is not None]
    out = spmm(rowptr, col, x, value, reduce, xh, backend=backend)
    grad = torch.randn(out.shape, generator=g).to(device, dtype)
    grads = torch.autograd.grad(out, inputs, grad, allow_unused=True)
    ref = spmm_ref(rowptr, col, x, value, reduce, xh)
    ref_grads = torch.autograd.grad(ref, inputs, grad, allow_unused=True)
    return (out, *grads), (ref, *ref_grads)


@pytest.mark.parametrize("backend,device", CASES)
@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
@pytest.mark.parametrize("feats", [1, 3, 33, 130])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_spmm_matches_ref(backend, device, reduce, feats, index_dtype):
    rowptr, col, _ = make_graph(60, 90, 400, seed=feats, hub=0, empty_rows=(3, 7, 59), dup=True)
    rowptr, col = rowptr.to(index_dtype), col.to(index_dtype)
    ours, ref = run_both(rowptr, col, 70, 20, feats, reduce, torch.float32, backend, device)
    for name, a, b in zip(("out", "grad_x", "grad_halo", "grad_value"), ours, ref):
        assert_close(a, b, torch.float32, f"{backend}/{reduce}/F={feats} {name}")


@pytest.mark.parametrize("backend,device", CASES)
@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_spmm_hub_row(backend, device, reduce):
    rowptr, col, _ = make_graph(40, 50, 200, seed=1, hub=1500)
    assert (rowptr[1] - rowptr[0]).item() >= 1000
    ours, ref = run_both(rowptr, col, 50, 0, 16, reduce, torch.float32, backend, device)
    for name, a, b in zip(("out", "grad_x", "grad_value"), ours, ref):
        assert_close(a, b, torch.float32, f"{backend}/{reduce} hub {name}")


@pytest.mark.parametrize("backend,device", CASES)
@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_spmm_without_value_and_without_halo(backend, device, reduce):
    rowptr, col, _ = make_graph(30, 30, 100, seed=2)
    ours, ref = run_both(rowptr, col, 30, 0, 5, reduce, torch.float32, backend, device,
                         with_value=False)
    for name, a, b in zip(("out", "grad_x"), ours, ref):
        assert_close(a, b, torch.float32, f"{backend}/{reduce} {name}")


@pytest.mark.parametrize("backend,device", CASES)
@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_spmm_zero_nnz(backend, device, reduce):
    rowptr = torch.zeros(6, dtype=torch.long)
    col = torch.zeros(0, dtype=torch.long)
    ours, ref = run_both(rowptr, col, 4, 2, 3, reduce, torch.float32, backend, device)
    assert ours[0].shape == (5, 3) and bool((ours[0] == 0).all())
    for a, b in zip(ours, ref):
        assert_close(a, b)


@pytest.mark.parametrize("backend,device", CASES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_spmm_half_precision(backend, device, dtype, reduce):
    rowptr, col, _ = make_graph(50, 60, 300, seed=3)
    ours, ref = run_both(rowptr, col, 60, 0, 33, reduce, dtype, backend, device)
    for name, a, b in zip(("out", "grad_x", "grad_value"), ours, ref):
        assert a.dtype == dtype, f"{name} came back as {a.dtype}"
        assert_close(a, b, dtype, f"{backend}/{reduce}/{dtype} {name}")


def test_transpose_is_cached_per_graph():
    from pyg_dist.ops.csr import csr_transpose

    rowptr, col, _ = make_graph(20, 20, 50, seed=4)
    first = csr_transpose(rowptr, col, 20)
    assert csr_transpose(rowptr, col, 20)[0] is first[0]
    col.add_(0)  # an in-place write invalidates the cached structure
    assert csr_transpose(rowptr, col, 20)[0] is not first[0]


def test_bad_arguments_name_the_fix():
    rowptr, col, _ = make_graph(4, 4, 6, seed=5)
    x = torch.randn(4, 2)
    with pytest.raises(ValueError, match="use one of sum, mean, max"):
        spmm(rowptr, col, x, reduce="min")
    with pytest.raises(ValueError, match="backend"):
        spmm(rowptr, col, x, backend="fortran")
    with pytest.raises(ValueError, match=r"x_halo' of shape \[H, 2\]"):
        spmm(rowptr, col, x, x_halo=torch.randn(3, 5))
    with pytest.raises(TypeError, match="int32 or int64"):
        spmm(rowptr.float(), col, x)


def test_tolerance_table_covers_feature_dtypes():
    assert set(TOL) == {torch.float32, torch.float16, torch.bfloat16}


@pytest.mark.parametrize("backend,device", CASES)
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_sources_are_freed_when_the_entries_take_no_gradient(backend, device, reduce):
    import weakref

    rowptr, col, _ = make_graph(30, 40, 150, seed=6)
    rowptr, col = rowptr.to(device), col.to(device)
    g = torch.Generator().manual_seed(6)
    h = torch.randn(40, 5, generator=g).to(device).requires_grad_()
    fixed = torch.rand(col.numel(), generator=g).to(device)
    learnt = fixed.clone().requires_grad_()
    grad = torch.randn(30, 5, generator=g).to(device)
    for value, kept in ((fixed, False), (learnt, True)):
        source = h * 2  # an intermediate only spmm refers to
        alive = weakref.ref(source)
        out = spmm(rowptr, col, source, value, reduce, backend=backend)
        del source
        assert (alive() is not None) == kept, f"{backend}/{reduce}: sources kept={kept}"
        (got,) = torch.autograd.grad(out, [h], grad)
        (want,) = torch.autograd.grad(spmm_ref(rowptr, col, h * 2, value, reduce), [h], grad)
        assert_close(got, want, torch.float32, f"{backend}/{reduce} grad of the sources")
