"""The Triton backend against the PyTorch reference: on CUDA when present,
otherwise on the CPU through Triton's interpreter (see conftest.py), where every
program costs milliseconds, so graphs stay at a few hundred entries."""
import pytest
import torch
from tolerances import assert_close

from pyg_dist.ops import available_backends, spmm, spmm_ref, to_csr
from pyg_dist.ops.torch_kernels import TorchKernels
from pyg_dist.testing import withTriton

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# Skipped only where Triton is not installed: an installed Triton whose
# backend does not load fails these tests instead of skipping them.
pytestmark = withTriton.mark


def test_triton_backend_is_available_when_installed():
    from pyg_dist.ops.triton import kernels

    assert kernels() is not None, "Triton is installed but pyg_dist's Triton kernels do not load"
    assert "triton" in available_backends(DEVICE), (
        f"the Triton backend does not run {DEVICE} tensors here (no CUDA and TRITON_INTERPRET "
        f"unset?)")

# Split thresholds small enough for the split path to run on small graphs: a
# 140-entry hub gives 35 chunks, more than one combine tile (BLOCK_E = 32 when interpreted).
SPLIT_DEGREE, CHUNK_NNZ = 16, 4


def triton_kernels():
    from pyg_dist.ops.triton import kernels

    return kernels()


@pytest.fixture
def small_split(monkeypatch):
    """Makes ``spmm(..., backend="triton")`` split every row longer than
    SPLIT_DEGREE into chunks of CHUNK_NNZ entries."""
    kernels = triton_kernels()
    monkeypatch.setattr(kernels, "split_degree", SPLIT_DEGREE)
    monkeypatch.setattr(kernels, "chunk_nnz", CHUNK_NNZ)
    return kernels


def hub_graph(num_rows=40, num_src=60, nnz=160, hubs=(0, 17), hub_degree=140, empty=(5, 39),
              index_dtype=torch.int64, seed=0):
    """A CSR graph with hub rows of ``hub_degree`` entries (duplicates included)
    and the rows ``empty`` left without entries."""
    g = torch.Generator().manual_seed(seed)
    target = torch.randint(0, num_rows, (nnz,), generator=g)
    for hub in hubs:
        target = torch.cat([target, torch.full((hub_degree,), hub)])
    source = torch.randint(0, num_src, (target.numel(),), generator=g)
    keep = ~torch.isin(target, torch.tensor(empty, dtype=torch.long))
    rowptr, col, _ = to_csr(torch.stack([source[keep], target[keep]]), num_rows)
    return rowptr.to(DEVICE, index_dtype), col.to(DEVICE, index_dtype)


def compare(rowptr, col, num_owned, num_halo, feats, reduce, dtype=torch.float32,
            with_value=True, what="", seed=0):
    """Output and gradients (x, x_halo, value) of the Triton backend against spmm_ref."""
    g = torch.Generator().manual_seed(seed)

    def leaf(*shape, rand=torch.randn):
        return rand(*shape, generator=g).to(DEVICE, dtype).requires_grad_()

    x = leaf(num_owned, feats)
    x_halo = leaf(num_halo, feats) if num_halo else None
    value = leaf(col.numel(), rand=torch.rand) if with_value else None
    inputs = [t for t in (x, x_halo, value) if t is not None]
    out = spmm(rowptr, col, x, value, reduce, x_halo, backend="triton")
    ref = spmm_ref(rowptr, col, x, value, reduce, x_halo)
    assert out.dtype == dtype, f"{what}: output came back as {out.dtype}"
    grad = torch.randn(ref.shape, generator=g).to(DEVICE, dtype)
    ours = torch.autograd.grad(out, inputs, grad)
    theirs = torch.autograd.grad(ref, inputs, grad)
    names = [n for n, t in zip(("x", "x_halo", "value"), (x, x_halo, value)) if t is not None]
    assert_close(out, ref, dtype, f"{what} out")
    for name, a, b in zip(names, ours, theirs):
        assert a.dtype == dtype, f"{what}: grad {name} came back as {a.dtype}"
        assert_close(a, b, dtype, f"{what} grad {name}")
    return ours


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_split_path_matches_ref(small_split, reduce, index_dtype):
    from pyg_dist.ops.triton.plan import hub_plan

    rowptr, col = hub_graph(index_dtype=index_dtype)
    plan = hub_plan(rowptr, col, SPLIT_DEGREE, CHUNK_NNZ)
    assert plan is not None and plan.rows.tolist() == [0, 17]
    grads = compare(rowptr, col, 45, 15, 33, reduce, what=f"split/{reduce}/{index_dtype}")
    assert grads[1].abs().sum() > 0, "the halo rows got no gradient"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("reduce", ["sum", "max"])
def test_split_path_half_precision(small_split, dtype, reduce):
    rowptr, col = hub_graph(hubs=(3,), hub_degree=120)
    compare(rowptr, col, 50, 10, 20, reduce, dtype, what=f"split/{reduce}/{dtype}")


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_unsplit_mean_and_max_with_halo_and_empty_rows(reduce):
    rowptr, col = hub_graph(hubs=(2,), hub_degree=40, empty=(0, 7, 39), index_dtype=torch.int32)
    compare(rowptr, col, 30, 30, 7, reduce, with_value=False, what=f"unsplit/{reduce}")


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_zero_nnz_and_all_rows_empty(small_split, reduce):
    rowptr = torch.zeros(9, dtype=torch.int32, device=DEVICE)
    col = torch.zeros(0, dtype=torch.int32, device=DEVICE)
    out, arg = triton_kernels().spmm_forward(
        rowptr, col, None, torch.randn(4, 5, device=DEVICE), None, reduce
    )
    assert out.shape == (8, 5) and bool((out == 0).all())
    assert arg is None if reduce != "max" else bool((arg == 0).all())
    compare(rowptr, col, 4, 2, 5, reduce, what=f"zero nnz/{reduce}")


def test_first_max_ties_and_minus_inf_across_chunks(small_split):
    """Few distinct values make ties everywhere: ``arg`` must name the first
    maximal entry in CSR order, across chunk and tile boundaries."""
    rowptr, col = hub_graph(hubs=(0, 1), hub_degree=140)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 3, (60, 9), generator=g).float().to(DEVICE)
    x[torch.randint(0, 60, (20,), generator=g)] = float("-inf")
    out, arg = triton_kernels().spmm_forward(rowptr, col, None, x[:50], x[50:], "max")
    ref_out, ref_arg = TorchKernels().spmm_forward(rowptr, col, None, x[:50], x[50:], "max")
    assert torch.equal(out, ref_out)
    assert torch.equal(arg, ref_arg)


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_sddmm_matches_torch(index_dtype):
    rowptr, col = hub_graph(index_dtype=index_dtype, hubs=(4,), hub_degree=70)
    g = torch.Generator().manual_seed(2)
    num_rows, feats = rowptr.numel() - 1, 130
    a = torch.randn(num_rows, feats, generator=g).to(DEVICE)
    x, x_halo = (torch.randn(n, feats, generator=g).to(DEVICE) for n in (45, 15))
    ours = triton_kernels().sddmm(rowptr, col, a, x, x_halo)
    assert ours.dtype == torch.float32 and ours.shape == col.shape
    assert_close(ours, TorchKernels().sddmm(rowptr, col, a, x, x_halo), what="sddmm")


def test_strided_sources(small_split):
    """Row strides other than the width, and a transposed halo, read right."""
    rowptr, col = hub_graph(hubs=(9,), hub_degree=60)
    g = torch.Generator().manual_seed(3)
    wide = torch.randn(50, 40, generator=g).to(DEVICE)
    x = wide[:, 3:14]
    x_halo = torch.randn(11, 10, generator=g).to(DEVICE).t()
    value = torch.rand(col.numel(), generator=g).to(DEVICE)
    for reduce in ("sum", "max"):
        out, _ = triton_kernels().spmm_forward(rowptr, col, value, x, x_halo, reduce)
        assert_close(out, spmm_ref(rowptr, col, x, value, reduce, x_halo), what=reduce)


def test_hub_plan_is_cached_and_covers_each_hub_row():
    from pyg_dist.ops.triton.plan import hub_plan

    rowptr, col = hub_graph(hubs=(3, 30), hub_degree=50)
    plan = hub_plan(rowptr, col, SPLIT_DEGREE, CHUNK_NNZ)
    assert hub_plan(rowptr, col, SPLIT_DEGREE, CHUNK_NNZ) is plan
    degree = rowptr[1:] - rowptr[:-1]
    assert plan.rows.tolist() == torch.nonzero(degree > SPLIT_DEGREE).view(-1).tolist()
    for h, row in enumerate(plan.rows.tolist()):
        first, last = plan.chunk_ptr[h].item(), plan.chunk_ptr[h + 1].item()
        starts = plan.chunk_start[first:last].tolist()
        ends = plan.chunk_end[first:last].tolist()
        assert starts[0] == rowptr[row].item() and ends[-1] == rowptr[row + 1].item()
        assert starts[1:] == ends[:-1], "chunks of a row must be contiguous and in order"
        assert all(0 < e - s <= CHUNK_NNZ for s, e in zip(starts, ends))
    assert hub_plan(rowptr, col, 10_000, CHUNK_NNZ) is None


def test_launchers_name_the_bad_argument():
    rowptr, col = hub_graph(hubs=(), nnz=20)
    x = torch.randn(60, 4, device=DEVICE)
    kernels = triton_kernels()
    with pytest.raises(TypeError, match="one dtype"):
        kernels.spmm_forward(rowptr.int(), col, None, x, None, "sum")
    with pytest.raises(TypeError, match="float32, float16 or bfloat16 'x'"):
        kernels.spmm_forward(rowptr, col, None, x.double(), None, "sum")
    with pytest.raises(ValueError, match=r"'x_halo' of shape \[\*, 4\]"):
        kernels.spmm_forward(rowptr, col, None, x, x[:, :2], "sum")
    with pytest.raises(ValueError, match="use one of sum, mean, max"):
        kernels.spmm_forward(rowptr, col, None, x, None, "min")
    with pytest.raises(ValueError, match=r"'a' of shape \[40, 4\]"):
        kernels.sddmm(rowptr, col, x, x, None)


def test_configs_cover_every_width():
    import triton

    from pyg_dist.ops.triton.configs import prune_by_width

    configs = [triton.Config({"BLOCK_E": 32, "BLOCK_F": f}) for f in (16, 32, 64, 128)]
    for width, expected in ((1, 16), (16, 16), (33, 64), (64, 64), (130, 128), (1000, 128)):
        kept = {c.kwargs["BLOCK_F"] for c in prune_by_width(configs, {"num_feats": width})}
        assert expected in kept and max(kept) == expected, (width, kept)
