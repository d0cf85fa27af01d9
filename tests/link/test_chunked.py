"""The chunked pair sum against plain autograd over the same chunks: the
value, the rows' and the decoder's gradients, with a dropout decoder whose
masks the backward must draw again as the forward drew them."""
import torch
from tolerances import assert_close

from pyg_dist.models.link import LinkPredictor
from pyg_dist.tasks.chunked import chunked_sum


def _chunks(decoder, src, dst, label, size):
    out = []
    for lo in range(0, src.numel(), size):
        hi = min(lo + size, src.numel())

        def part(h_src, h_dst, lo=lo, hi=hi):
            score = decoder(h_src, h_dst)
            return torch.nn.functional.binary_cross_entropy_with_logits(
                score, label[lo:hi], reduction="sum")
        out.append(((src[lo:hi], dst[lo:hi]), part))
    return out


def test_chunks_recomputed_in_the_backward_replay_the_forwards_dropout():
    gen = torch.Generator().manual_seed(0)
    rows = torch.randn(40, 6, generator=gen)
    src, dst = torch.randint(0, 40, (2, 90), generator=gen)
    label = (torch.rand(90, generator=gen) > 0.5).float()
    decoder = LinkPredictor(6, 16, 1, 3, dropout=0.5).train()
    results = []
    for chunked in (True, False):
        leaf = rows.clone().requires_grad_()
        decoder.zero_grad()
        chunks = _chunks(decoder, src, dst, label, 16)  # 6 chunks, the last of 10 pairs
        torch.manual_seed(7)
        if chunked:
            total = chunked_sum(chunks, leaf * 2, list(decoder.parameters()))
        else:  # every chunk's activations kept, in the same order of draws
            total = sum(fn(*((leaf * 2)[i] for i in index)) for index, fn in chunks)
        state = torch.get_rng_state()
        (3 * total).backward()
        assert torch.equal(torch.get_rng_state(), state), "the replay moved the generator"
        results.append((total.detach(), leaf.grad, [p.grad for p in decoder.parameters()]))
    (value, grad, params), (ref_value, ref_grad, ref_params) = results
    assert_close(value, ref_value, what="sum")
    assert_close(grad, ref_grad, what="rows' gradient")
    assert grad.abs().sum() > 0
    for i, (ours, ref) in enumerate(zip(params, ref_params)):
        assert_close(ours, ref, what=f"decoder parameter {i}")


def test_a_part_that_skips_its_rows_and_parameters_it_does_not_read():
    rows = torch.randn(5, 3, requires_grad=True)
    used, unused = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))
    chunks = [((torch.tensor([0, 0, 4]), torch.tensor([4])), lambda x, y: (x * used).sum()),
              ((torch.tensor([], dtype=torch.long),), lambda x: used.sum())]
    chunked_sum(chunks, rows, [used, unused]).backward()
    assert torch.equal(rows.grad, torch.tensor([[2.0] * 3, [0.0] * 3, [0.0] * 3, [0.0] * 3,
                                                [1.0] * 3]))
    assert torch.equal(used.grad, rows.detach()[[0, 0, 4]].sum(0) + 1)
    assert unused.grad is None
