"""The oracle itself: spmm_ref against implementations that share none of its
code, ``torch.sparse.mm`` (sum; mean through the row degree) and PyG's
``scatter`` (every reduction), outputs and gradients, with and without edge
weights and halo rows, with empty rows and widths that are not powers of two."""
import pytest
import torch
from tolerances import assert_close
from torch_geometric.utils import scatter

from pyg_dist.ops import spmm_ref
from pyg_dist.ops.spmm_ref import REDUCTIONS

NUM_ROWS, NUM_OWNED, NUM_HALO = 40, 30, 12
EMPTY_ROWS = (0, 5, 39)


def graph(seed, num_halo):
    """A CSR of ``NUM_ROWS`` rows over ``NUM_OWNED + num_halo`` sources with
    duplicate entries and the rows ``EMPTY_ROWS`` empty, built here from an
    edge list (rowptr from counts, entries sorted by row)."""
    g = torch.Generator().manual_seed(seed)
    row = torch.randint(0, NUM_ROWS, (300,), generator=g)
    col = torch.randint(0, NUM_OWNED + num_halo, (300,), generator=g)
    row, col = torch.cat([row, row[:15]]), torch.cat([col, col[:15]])  # duplicates
    keep = ~torch.isin(row, torch.tensor(EMPTY_ROWS))
    row, col = row[keep], col[keep]
    order = torch.argsort(row, stable=True)
    row, col = row[order], col[order]
    rowptr = torch.zeros(NUM_ROWS + 1, dtype=torch.long)
    rowptr[1:] = torch.bincount(row, minlength=NUM_ROWS).cumsum(0)
    return rowptr, col, row


def leaves(seed, feats, nnz, num_halo, weighted):
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(NUM_OWNED, feats, generator=g).requires_grad_()
    x_halo = torch.randn(num_halo, feats, generator=g).requires_grad_() if num_halo else None
    value = (torch.rand(nnz, generator=g) + 0.5).requires_grad_() if weighted else None
    return x, x_halo, value


def sources(x, x_halo):
    return x if x_halo is None else torch.cat([x, x_halo])


def with_sparse_mm(row, col, x, x_halo, value, reduce):
    """``torch.sparse.mm`` of the COO matrix; the mean divides by the number
    of entries of each row (zero rows stay zero)."""
    src = sources(x, x_halo)
    weight = torch.ones(col.numel()) if value is None else value
    adj = torch.sparse_coo_tensor(torch.stack([row, col]), weight, (NUM_ROWS, src.size(0)),
                                  check_invariants=True)
    out = torch.sparse.mm(adj, src)
    if reduce == "mean":
        degree = torch.bincount(row, minlength=NUM_ROWS).clamp(min=1).float()
        out = out / degree.view(-1, 1)
    return out


def with_scatter(row, col, x, x_halo, value, reduce):
    """PyG's ``scatter`` of the weighted messages onto their rows."""
    msg = sources(x, x_halo)[col]
    if value is not None:
        msg = msg * value.view(-1, 1)
    return scatter(msg, row, dim=0, dim_size=NUM_ROWS, reduce=reduce)


def compare(reference, reduce, feats, num_halo, weighted, seed=0):
    rowptr, col, row = graph(seed, num_halo)
    inputs = leaves(seed, feats, col.numel(), num_halo, weighted)
    x, x_halo, value = inputs
    ours = spmm_ref(rowptr, col, x, value, reduce, x_halo)
    ref = reference(row, col, x, x_halo, value, "sum" if reduce == "add" else reduce)
    what = f"{reference.__name__} {reduce} F={feats} halo={num_halo} weighted={weighted}"
    assert_close(ours, ref, what=f"{what}: output")
    assert bool((ours[list(EMPTY_ROWS)] == 0).all()), f"{what}: empty rows are not zero"
    upstream = torch.randn(ours.shape, generator=torch.Generator().manual_seed(seed + 2))
    leaves_ = [t for t in inputs if t is not None]
    grads = torch.autograd.grad(ours, leaves_, upstream)
    ref_grads = torch.autograd.grad(ref, leaves_, upstream)
    for name, a, b in zip(("x", "x_halo", "value"), grads, ref_grads):
        assert_close(a, b, what=f"{what}: gradient of {name}")


@pytest.mark.parametrize("reduce", ["sum", "add", "mean"])
@pytest.mark.parametrize("feats", [1, 7, 33])
@pytest.mark.parametrize("num_halo", [0, NUM_HALO])
@pytest.mark.parametrize("weighted", [False, True])
def test_ref_matches_torch_sparse_mm(reduce, feats, num_halo, weighted):
    compare(with_sparse_mm, reduce, feats, num_halo, weighted)


@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("feats", [1, 7, 33])
@pytest.mark.parametrize("num_halo", [0, NUM_HALO])
@pytest.mark.parametrize("weighted", [False, True])
def test_ref_matches_pyg_scatter(reduce, feats, num_halo, weighted):
    """Random values: no ties, so the first maximum spmm_ref routes the
    gradient of ``"max"`` to is the only one."""
    compare(with_scatter, reduce, feats, num_halo, weighted)


def test_every_reduction_is_checked():
    assert set(REDUCTIONS) == {"sum", "mean", "max"}, "a new reduction needs a reference here"
