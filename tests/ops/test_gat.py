"""The GAT attention op: gat_ref against PyG's GATConv computation (softmax +
scatter), and every backend against gat_ref, outputs and every gradient. The
Triton backend runs through Triton's interpreter without CUDA (see
conftest.py), so graphs stay at a few hundred entries."""
import pytest
import torch
import torch.nn.functional as F
from tolerances import assert_close
from torch_geometric.utils import scatter, softmax

from pyg_dist.ops import available_backends, gat, gat_attention, gat_ref, to_csr
from pyg_dist.testing import withTritonBackend

CPU_BACKENDS = available_backends("cpu")
CUDA_BACKENDS = available_backends("cuda") if torch.cuda.is_available() else []
CASES = [(b, "cpu") for b in CPU_BACKENDS] + [(b, "cuda") for b in CUDA_BACKENDS]
NAMES = ("x", "x_halo", "alpha_src", "alpha_src_halo", "alpha_dst", "alpha_edge")


def make_graph(num_rows, num_src, nnz, seed, empty=(), hub=None, hub_degree=0, hub_source=None,
               index_dtype=torch.int64):
    """A random directed CSR graph with self-loops, duplicate edges, the rows
    ``empty`` left without in-edges and optionally a hub row (``hub_degree``
    in-edges) and a hub source (``hub_degree`` out-edges)."""
    g = torch.Generator().manual_seed(seed)
    target = torch.randint(0, num_rows, (nnz,), generator=g)
    source = torch.randint(0, num_src, (nnz,), generator=g)
    loops = torch.arange(0, min(num_rows, num_src), 3)
    target = torch.cat([target, loops, target[:15]])  # self-loops and duplicates
    source = torch.cat([source, loops, source[:15]])
    if hub is not None:
        target = torch.cat([target, torch.full((hub_degree,), hub)])
        source = torch.cat([source, torch.randint(0, num_src, (hub_degree,), generator=g)])
    if hub_source is not None:
        target = torch.cat([target, torch.randint(0, num_rows, (hub_degree,), generator=g)])
        source = torch.cat([source, torch.full((hub_degree,), hub_source)])
    keep = ~torch.isin(target, torch.tensor(empty, dtype=torch.long))
    rowptr, col, _ = to_csr(torch.stack([source[keep], target[keep]]), num_rows)
    return rowptr.to(index_dtype), col.to(index_dtype)


def make_inputs(rowptr, col, num_owned, num_halo, heads, feats, dtype=torch.float32,
                edge=True, scale=True, device="cpu", seed=0):
    """Leaf tensors of one gat call, as keyword arguments (scores of order 1,
    so that the softmax is far from uniform)."""
    g = torch.Generator().manual_seed(seed)
    num_rows, nnz = rowptr.numel() - 1, col.numel()

    def leaf(*shape, std=1.0):
        return (std * torch.randn(*shape, generator=g)).to(device, dtype).requires_grad_()

    kwargs = dict(x=leaf(num_owned, heads, feats), alpha_src=leaf(num_owned, heads, std=2.0),
                  alpha_dst=leaf(num_rows, heads, std=2.0))
    if num_halo:
        kwargs.update(x_halo=leaf(num_halo, heads, feats),
                      alpha_src_halo=leaf(num_halo, heads, std=2.0))
    if edge:
        kwargs["alpha_edge"] = leaf(nnz, heads)
    if scale:
        keep = torch.rand(nnz, heads, generator=g) > 0.3
        kwargs["edge_scale"] = (keep / 0.7).to(device, dtype)
    return rowptr.to(device), col.to(device), kwargs


def pyg_gat(rowptr, col, x, alpha_src, alpha_dst, x_halo=None, alpha_src_halo=None,
            alpha_edge=None, edge_scale=None, negative_slope=0.2):
    """GATConv's propagate, message and softmax on the edge list of the CSR."""
    num_rows = rowptr.numel() - 1
    dst = torch.repeat_interleave(torch.arange(num_rows), (rowptr[1:] - rowptr[:-1]).long())
    src = col.long()
    if x_halo is not None:
        x, alpha_src = torch.cat([x, x_halo]), torch.cat([alpha_src, alpha_src_halo])
    alpha = alpha_src[src] + alpha_dst[dst]
    if alpha_edge is not None:
        alpha = alpha + alpha_edge
    alpha = softmax(F.leaky_relu(alpha, negative_slope), dst, num_nodes=num_rows)
    if edge_scale is not None:
        alpha = alpha * edge_scale
    return scatter(x[src] * alpha.unsqueeze(-1), dst, dim=0, dim_size=num_rows, reduce="sum")


def outputs_and_grads(fn, rowptr, col, kwargs, seed=1, **extra):
    inputs = {k: v for k, v in kwargs.items() if k in NAMES}
    out = fn(rowptr, col, **kwargs, **extra)
    g = torch.Generator().manual_seed(seed)
    grad = torch.randn(out.shape, generator=g).to(out.device, out.dtype)
    grads = torch.autograd.grad(out, list(inputs.values()), grad)
    return out, dict(zip(inputs, grads))


def compare(ours, ref, dtype, what):
    (out, grads), (ref_out, ref_grads) = ours, ref
    assert out.dtype == ref_out.dtype, f"{what}: output came back as {out.dtype}"
    assert_close(out, ref_out, dtype, f"{what} out")
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        assert grads[name].dtype == ref_grads[name].dtype, f"{what}: grad {name} dtype"
        assert_close(grads[name], ref_grads[name], dtype, f"{what} grad {name}")


@pytest.mark.parametrize("halo", [0, 12])
@pytest.mark.parametrize("edge,scale", [(False, False), (True, True)])
def test_ref_matches_pyg_gatconv(halo, edge, scale):
    rowptr, col = make_graph(50, 40 + halo, 300, seed=halo, empty=(0, 17, 49))
    rowptr, col, kwargs = make_inputs(rowptr, col, 40, halo, 3, 5, edge=edge, scale=scale)
    ours = outputs_and_grads(gat_ref, rowptr, col, kwargs)
    theirs = outputs_and_grads(pyg_gat, rowptr, col, kwargs)
    compare(ours, theirs, torch.float32, f"ref halo={halo} edge={edge} scale={scale}")
    assert bool((ours[0][[0, 17, 49]] == 0).all()), "empty rows must give zeros"


def test_attention_matches_pyg_softmax():
    rowptr, col = make_graph(30, 36, 150, seed=3, empty=(4,))
    _, _, kwargs = make_inputs(rowptr, col, 30, 6, 2, 4)
    coef = gat_attention(rowptr, col, kwargs["alpha_src"], kwargs["alpha_dst"],
                         kwargs["alpha_src_halo"], kwargs["alpha_edge"], negative_slope=0.1)
    dst = torch.repeat_interleave(torch.arange(30), rowptr[1:] - rowptr[:-1])
    alpha_src = torch.cat([kwargs["alpha_src"], kwargs["alpha_src_halo"]])
    score = alpha_src[col] + kwargs["alpha_dst"][dst] + kwargs["alpha_edge"]
    ref = softmax(F.leaky_relu(score, 0.1), dst, num_nodes=30)
    assert_close(coef, ref, what="attention")
    grad = torch.randn_like(ref)
    ours = torch.autograd.grad(coef, kwargs["alpha_dst"], grad)[0]
    assert_close(ours, torch.autograd.grad(ref, kwargs["alpha_dst"], grad)[0], what="grad")


@pytest.mark.parametrize("backend,device", CASES)
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("halo,edge,scale",
                         [(0, False, False), (15, True, True), (15, False, True)])
def test_backend_matches_ref(backend, device, index_dtype, halo, edge, scale):
    rowptr, col = make_graph(40, 30 + halo, 200, seed=7, empty=(2, 30, 39),
                             index_dtype=index_dtype)
    rowptr, col, kwargs = make_inputs(rowptr, col, 30, halo, 3, 6, edge=edge, scale=scale,
                                      device=device)
    ours = outputs_and_grads(gat, rowptr, col, kwargs, backend=backend)
    ref = outputs_and_grads(gat_ref, rowptr, col, kwargs)
    compare(ours, ref, torch.float32, f"{backend}/{index_dtype} halo={halo} edge={edge}")


@pytest.mark.parametrize("backend,device", CASES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_backend_half_precision(backend, device, dtype):
    rowptr, col = make_graph(30, 40, 200, seed=8, empty=(5,))
    rowptr, col, kwargs = make_inputs(rowptr, col, 30, 10, 2, 17, dtype=dtype, device=device)
    ours = outputs_and_grads(gat, rowptr, col, kwargs, backend=backend)
    ref = outputs_and_grads(gat_ref, rowptr, col, kwargs)
    compare(ours, ref, dtype, f"{backend}/{dtype}")


@pytest.mark.parametrize("backend,device", CASES)
def test_hub_row_and_wide_heads(backend, device):
    """A row of 300 entries (longer than any block, split on Triton) and a
    head width that is not a power of two."""
    rowptr, col = make_graph(24, 40, 80, seed=9, empty=(3,), hub=11, hub_degree=300)
    assert (rowptr[12] - rowptr[11]).item() > 256
    rowptr, col, kwargs = make_inputs(rowptr, col, 40, 0, 2, 37, device=device)
    ours = outputs_and_grads(gat, rowptr, col, kwargs, backend=backend, negative_slope=0.05)
    ref = outputs_and_grads(gat_ref, rowptr, col, kwargs, negative_slope=0.05)
    compare(ours, ref, torch.float32, f"{backend} hub")


@withTritonBackend
def test_triton_split_rows_and_sources(monkeypatch):
    """Rows and sources above the split degree go through the chunk kernels
    and their combines (split thresholds made small, as in test_triton.py)."""
    from pyg_dist.ops.csr import csr_transpose
    from pyg_dist.ops.triton import kernels
    from pyg_dist.ops.triton.plan import hub_plan

    monkeypatch.setattr(kernels(), "split_degree", 16)
    monkeypatch.setattr(kernels(), "chunk_nnz", 4)
    device = CUDA_BACKENDS and "cuda" or "cpu"
    rowptr, col = make_graph(20, 36, 60, seed=12, empty=(0,), hub=4, hub_degree=40,
                             hub_source=33)
    colptr, row, _ = csr_transpose(rowptr, col, 36)
    assert hub_plan(rowptr, col, 16, 4).rows.tolist() == [4]
    assert 33 in hub_plan(colptr, row, 16, 4).rows.tolist()
    rowptr, col, kwargs = make_inputs(rowptr, col, 30, 6, 2, 5, device=device)
    ours = outputs_and_grads(gat, rowptr, col, kwargs, backend="triton")
    ref = outputs_and_grads(gat_ref, rowptr, col, kwargs)
    compare(ours, ref, torch.float32, "triton split")


@pytest.mark.parametrize("backend,device", CASES)
def test_zero_nnz(backend, device):
    rowptr, col = torch.zeros(6, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    rowptr, col, kwargs = make_inputs(rowptr, col, 4, 2, 2, 3, device=device)
    out, grads = outputs_and_grads(gat, rowptr, col, kwargs, backend=backend)
    assert out.shape == (5, 2, 3) and bool((out == 0).all())
    assert all(bool((g == 0).all()) for g in grads.values())


@pytest.mark.parametrize("backend,device", CASES)
def test_only_the_asked_gradients(backend, device):
    rowptr, col = make_graph(20, 20, 80, seed=10)
    rowptr, col, kwargs = make_inputs(rowptr, col, 20, 0, 2, 4, device=device)
    kwargs["alpha_src"].requires_grad_(False)
    kwargs["alpha_edge"].requires_grad_(False)
    out = gat(rowptr, col, backend=backend, **kwargs)
    ref = gat_ref(rowptr, col, **kwargs)
    grad = torch.randn_like(out)
    for name in ("x", "alpha_dst"):
        ours = torch.autograd.grad(out, kwargs[name], grad, retain_graph=True)[0]
        theirs = torch.autograd.grad(ref, kwargs[name], grad, retain_graph=True)[0]
        assert_close(ours, theirs, what=f"{backend} grad {name} alone")


def test_bad_arguments_name_the_fix():
    rowptr, col = make_graph(6, 6, 20, seed=11)
    x, a_src, a_dst = torch.randn(6, 2, 3), torch.randn(6, 2), torch.randn(6, 2)
    with pytest.raises(TypeError, match=r"shape \[N, H, C\]"):
        gat(rowptr, col, x.view(6, 6), a_src, a_dst)
    with pytest.raises(ValueError, match=r"'alpha_src' of shape \[N, H\] = \[6, 2\]"):
        gat(rowptr, col, x, torch.randn(6, 3), a_dst)
    with pytest.raises(ValueError, match=r"'alpha_dst' of shape \[6, 2\].*heads"):
        gat(rowptr, col, x, a_src, torch.randn(6, 1))
    with pytest.raises(ValueError, match=r"'alpha_edge' of shape \[\d+, 2\]"):
        gat(rowptr, col, x, a_src, a_dst, alpha_edge=torch.randn(3, 2))
    with pytest.raises(ValueError, match="'x_halo' without 'alpha_src_halo'"):
        gat(rowptr, col, x, a_src, a_dst, x_halo=torch.randn(2, 2, 3))
    with pytest.raises(ValueError, match=r"'x_halo' of shape \[2, 2, 3\]"):
        gat(rowptr, col, x, a_src, a_dst, x_halo=torch.randn(2, 2, 4),
            alpha_src_halo=torch.randn(2, 2))
    with pytest.raises(TypeError, match="one dtype"):
        gat(rowptr.int(), col, x, a_src, a_dst)
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        gat(rowptr, col, x.double(), a_src, a_dst)
    with pytest.raises(ValueError, match="'gat' got backend='fortran'"):
        gat(rowptr, col, x, a_src, a_dst, backend="fortran")
