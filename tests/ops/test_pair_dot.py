"""pair_dot against its reference and the reference against one dot product
at a time: scores and the gradient of the rows, in chunks that do not divide
the pairs, with repeated pairs, self-pairs and rows no pair names."""
import pytest
import torch

from pyg_dist.ops.pair_dot import pair_dot, pair_dot_ref


def _case(num_rows=11, width=5, pairs=37, seed=0):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(num_rows, width, generator=gen, dtype=torch.float64)
    src = torch.randint(0, num_rows - 1, (pairs,), generator=gen)  # the last row: no pair
    dst = torch.randint(0, num_rows - 1, (pairs,), generator=gen)
    src[:3], dst[:3] = torch.tensor([2, 2, 1]), torch.tensor([3, 3, 1])  # a repeat, a self-pair
    return h, src, dst


def test_the_reference_is_one_dot_product_at_a_time():
    h, src, dst = _case()
    one_by_one = torch.stack([torch.dot(h[u], h[v]) for u, v in zip(src, dst)])
    assert torch.allclose(pair_dot_ref(h, src, dst), one_by_one, atol=1e-12)


@pytest.mark.parametrize("chunk", [1, 5, 37, 100])
def test_scores_and_gradient_equal_the_reference(chunk):
    h, src, dst = _case()
    weight = torch.randn(src.numel(), generator=torch.Generator().manual_seed(1),
                         dtype=torch.float64)
    mine, ref = h.clone().requires_grad_(True), h.clone().requires_grad_(True)
    out = pair_dot(mine, src, dst, chunk)
    expected = pair_dot_ref(ref, src, dst)
    assert torch.allclose(out, expected, atol=1e-12)
    (out * weight).sum().backward()
    (expected * weight).sum().backward()
    assert torch.allclose(mine.grad, ref.grad, atol=1e-12)
    assert mine.grad[-1].abs().sum() == 0  # a row no pair names


def test_gradcheck_and_no_pairs():
    h, src, dst = _case(num_rows=5, width=3, pairs=7)
    assert torch.autograd.gradcheck(lambda x: pair_dot(x, src, dst, 3),
                                    (h.clone().requires_grad_(True),))
    empty = torch.empty(0, dtype=torch.long)
    x = h.clone().requires_grad_(True)
    out = pair_dot(x, empty, empty)
    out.sum().backward()
    assert out.shape == (0,) and torch.equal(x.grad, torch.zeros_like(h))


def test_bad_pairs_and_chunks_are_refused():
    h = torch.ones(3, 2)
    with pytest.raises(ValueError, match=r"'pair_dot' scores pairs: src and dst must be 1-D "
                                         r"and as long; got shapes \(2,\) and \(3,\)"):
        pair_dot(h, torch.zeros(2, dtype=torch.long), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"'pair_dot' got chunk=0; pass an int >= 1"):
        pair_dot(h, torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long), 0)
