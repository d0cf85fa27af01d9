import torch

from pyg_dist.ops import to_csr
from pyg_dist.ops.csr import csr_transpose, csr_transpose_values


def make_csr(seed=0):
    g = torch.Generator().manual_seed(seed)
    return to_csr(torch.randint(0, 20, (2, 60), generator=g), 20)[:2]


def test_transpose_values_are_cached_per_value_tensor():
    rowptr, col = make_csr()
    _, _, perm = csr_transpose(rowptr, col, 20)
    value = torch.rand(col.numel())
    first = csr_transpose_values(value, perm)
    assert torch.equal(first, value[perm])
    assert csr_transpose_values(value, perm) is first
    value.mul_(2)  # an in-place write invalidates the cached values
    again = csr_transpose_values(value, perm)
    assert again is not first and torch.equal(again, value[perm])


def test_transpose_values_follow_the_permutation():
    rowptr, col = make_csr()
    _, _, perm = csr_transpose(rowptr, col, 20)
    value = torch.rand(col.numel())
    csr_transpose_values(value, perm)
    other = perm.flip(0)
    assert torch.equal(csr_transpose_values(value, other), value[other])
