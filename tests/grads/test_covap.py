"""COVAP's compression step against its definition: one shard in K per step,
nothing lost with full feedback, K = 1 untouched; and the spec's errors."""
import pytest
import torch

from pyg_dist.grads import CovapState, GradCompress, parse_grad_compress
from pyg_dist.grads.covap import covap_compress


def _run(grads, shards, weight=1.0):
    """Sends ``grads`` (``[T, n]``, one parameter) through COVAP; returns what
    each step sent, scattered back to its positions, and the last residual."""
    state = CovapState(shards)
    param = torch.zeros(grads.size(1))
    residual, sent = None, []
    for g in grads:
        mask = state.shard_mask([param])
        payload, residual = covap_compress(g.clone(), residual, mask, weight)
        full = torch.zeros_like(g)
        full[mask] = payload
        sent.append(full)
        state.step += 1
    return torch.stack(sent), residual


def test_each_step_sends_one_strided_shard_in_k_and_every_element_once_per_k_steps():
    n, k = 37, 4  # n not a multiple of K
    sent, _ = _run(torch.ones(k, n), k)
    assert [int((s != 0).sum()) for s in sent] == [len(range(j, n, k)) for j in range(k)]
    assert torch.equal((sent != 0).sum(0), torch.ones(n, dtype=torch.long))


def test_with_full_feedback_sent_plus_residual_is_everything_produced():
    torch.manual_seed(0)
    grads = torch.randn(11, 53)
    sent, residual = _run(grads, 4)
    torch.testing.assert_close(sent.sum(0) + residual, grads.sum(0), rtol=1e-5, atol=1e-5)


def test_constant_gradient_each_window_of_k_steps_sends_k_steps_worth():
    k, g = 4, torch.randn(29)
    sent, _ = _run(g.expand(3 * k, -1), k)
    for start in range(k, 2 * k + 1):  # after the first round, any K consecutive steps
        torch.testing.assert_close(sent[start:start + k].sum(0), k * g, rtol=1e-6, atol=1e-6)


def test_partial_feedback_weight_discounts_the_residual():
    g = torch.ones(8)
    sent, _ = _run(g.expand(2, -1), 2, weight=0.5)
    assert torch.equal(sent[1][1::2], torch.full((4,), 1.5))  # 1 + 0.5 x 1


def test_feedback_weight_ramps_from_half_to_one():
    state = CovapState(4)
    weights = []
    for step in (0, 25, 50, 80):
        state.step = step
        weights.append(state.feedback_weight())
    assert weights == [0.5, 0.75, 1.0, 1.0]
    assert CovapState(4, ramp_steps=0).feedback_weight() == 1.0


def test_shards_follow_the_elements_not_the_bucket_layout():
    a, b, c = torch.zeros(5), torch.zeros(2, 3), torch.zeros(4)  # elements 0-4, 5-10, 11-14
    state = CovapState(4)
    state.register([a, b, c])
    state.step = 1
    together = state.shard_mask([a, b, c])
    assert together.nonzero().flatten().tolist() == [1, 5, 9, 13]
    # DDP may rebuild its buckets in another order or split them: same elements
    swapped = state.shard_mask([c, a])
    assert torch.equal(swapped, torch.cat([together[11:], together[:5]]))
    assert torch.equal(state.shard_mask([b]), together[5:11])


def test_residuals_are_kept_per_parameter():
    a, b = torch.zeros(3), torch.zeros(2)
    state = CovapState(2)
    state.register([a, b])
    state.keep([a, b], torch.arange(5.0))
    assert torch.equal(state.residual([b, a]), torch.tensor([3.0, 4.0, 0.0, 1.0, 2.0]))
    assert CovapState(2).residual([a]) is None


def test_spec_parsing_and_errors_that_name_the_fix():
    assert parse_grad_compress(None) is None and parse_grad_compress("none") is None
    assert parse_grad_compress("fp16") == GradCompress("fp16")
    assert parse_grad_compress("covap:4") == GradCompress("covap", 4)
    assert parse_grad_compress("covap:auto").auto
    assert parse_grad_compress("powersgd:2").spec() == "powersgd:2"
    for spec in ("covap:4", "covap:auto", "fp16", "powersgd:8"):
        assert parse_grad_compress(spec).spec() == spec
    with pytest.raises(ValueError, match=r"shard count K >= 1"):
        parse_grad_compress("covap:0")
    with pytest.raises(ValueError, match=r"rank R >= 1"):
        parse_grad_compress("powersgd:x")
    with pytest.raises(ValueError, match=r"use none, fp16, powersgd:R"):
        parse_grad_compress("topk:0.1")
