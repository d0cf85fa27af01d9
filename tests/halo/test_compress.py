"""Codecs: round trips within their documented bounds, payload sizes, bad
names; int4 and int2 unbiased and keyed; compressed exchanges on 4 ranks
(policy_cases.py) within those bounds, forward and backward; policy specs that
round-trip."""
import pytest
import torch
from policy_cases import F_IN

from pyg_dist.halo import (
    Adaptive,
    Cached,
    Exact,
    Isolated,
    Pipelined,
    Sampled,
    Stale,
    get_codec,
    parse_policy,
)
from pyg_dist.halo.compress import CODECS


def rows(seed):
    g = torch.Generator().manual_seed(seed)
    scale = torch.logspace(-3, 3, 40).view(-1, 1)  # rows of very different magnitude
    out = torch.randn(40, 33, generator=g) * scale
    out[5] = 0.0  # an all-zero row (int8 scale 0)
    out[6, :3] = torch.tensor([1e-9, -1e-9, 0.0])
    return out


@pytest.mark.parametrize("name", sorted(CODECS))
@pytest.mark.parametrize("seed", [0, 1])
def test_round_trip_within_bound(name, seed):
    codec = CODECS[name]
    x = rows(seed)
    payload = codec.encode(x)
    assert payload.dtype == torch.uint8 and payload.shape == (40, codec.row_bytes(33))
    back = codec.decode(payload, 33, torch.float32)
    assert back.shape == x.shape and back.dtype == torch.float32
    err = (back - x).abs()
    assert bool((err <= codec.error_bound(x)).all()), (err - codec.error_bound(x)).max()


@pytest.mark.parametrize("name", sorted(CODECS))
@pytest.mark.parametrize("width", [1, 3, 5, 33])
def test_odd_widths_round_trip_and_zero_rows_stay_zero(name, width):
    codec = CODECS[name]
    x = rows(2)[:, :width].contiguous()
    payload = codec.encode(x, key=11)
    assert payload.shape == (40, codec.row_bytes(width))
    back = codec.decode(payload, width, torch.float32)
    assert bool(((back - x).abs() <= codec.error_bound(x)).all())
    assert torch.equal(back[5], torch.zeros(width))


def test_low_bit_levels_pack_two_and_four_to_a_byte():
    assert [CODECS["int4"].row_bytes(f) for f in (1, 2, 3, 33)] == [5, 5, 6, 21]
    assert [CODECS["int2"].row_bytes(f) for f in (1, 4, 5, 33)] == [5, 5, 6, 13]
    # F = 5: the last byte of levels holds 1 (int4) or 1 (int2) feature; its
    # padding bits are ignored when decoding.
    x = rows(0)[:, :5].contiguous()
    for name, last, pad in (("int4", 2, 0xF0), ("int2", 1, 0xFC)):
        codec = CODECS[name]
        payload = codec.encode(x, key=3)
        noisy = payload.clone()
        noisy[:, last] |= pad
        assert torch.equal(codec.decode(noisy, 5, torch.float32),
                           codec.decode(payload, 5, torch.float32))


@pytest.mark.parametrize("name", ["int4", "int2"])
def test_stochastic_rounding_is_unbiased(name):
    """The mean of n = 4000 independent encodings of one row is the row, to
    within 5 standard deviations: each level's rounding has variance at most
    step**2 / 4, so the mean's std is at most step / (2 sqrt(n)). The row is
    chosen so that rounding to nearest is biased by far more (0.3 of the
    absmax: 0.3 away from int2's levels, 0.1 of a step from int4's)."""
    codec, n = CODECS[name], 4000
    row = torch.full((1, 33), 0.3)
    row[0, 0], row[0, 1] = 1.0, -0.3
    mean = codec.decode(codec.encode(row.expand(n, 33), key=1), 33, torch.float32).mean(0)
    step = {"int4": 1.0 / 7, "int2": 1.0}[name]  # absmax / qmax
    assert (mean - row[0]).abs().max() <= 5 * step / (2 * n**0.5)


@pytest.mark.parametrize("name", ["int4", "int2"])
def test_draws_are_keyed_and_leave_torch_generator_alone(name):
    codec, x = CODECS[name], rows(1)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    first = codec.encode(x, key=5)
    assert torch.equal(torch.rand(3), expected)
    assert torch.equal(codec.encode(x, key=5), first)
    assert (codec.encode(x, key=6) != first).float().mean() > 0.2


@pytest.mark.parametrize("name", sorted(CODECS))
def test_empty_rows(name):
    codec = CODECS[name]
    back = codec.decode(codec.encode(torch.zeros(0, 7)), 7, torch.float32)
    assert back.shape == (0, 7)


def test_bounds_are_tight_enough_to_mean_something():
    x = rows(0)
    assert (CODECS["fp16"].error_bound(x) / x.abs().clamp(min=1e-3)).max() < 1e-3
    assert (CODECS["int8"].error_bound(x)[7] == x[7].abs().max() / 254 * (1 + 1e-6)).all()


def test_bad_names():
    with pytest.raises(ValueError, match="use one of fp16, bf16, int8, int4, int2"):
        get_codec("int3")
    with pytest.raises(ValueError, match="unknown halo policy 'stal:3'"):
        parse_policy("stal:3")
    with pytest.raises(ValueError, match="every >= 1"):
        parse_policy("stale:0")
    with pytest.raises(ValueError, match="takes no compression"):
        parse_policy("isolated", compress="int8")
    with pytest.raises(ValueError, match="0 < p <= 1"):
        parse_policy("sampled:1.5")


#: Quantisation levels per side of an absmax-scaled row: a row's step is
#: its absmax / levels. int8 rounds to nearest (an error of at most half a
#: step of absmax / 127); int4 and int2 round stochastically (under one step).
LEVELS = {"int8": 254, "int4": 7, "int2": 1}
#: Relative error of a float cast: the unit roundoff of its mantissa.
ROUNDOFF = {"fp16": 2.0**-11, "bf16": 2.0**-8}
#: What fp32 adds to the bound, relative to it: the stored scale and the
#: product level * scale each round once, by up to |level| units of 2**-24
#: of a step; int8's level (<= 127) is also a rounded quotient. int8: 3 x 254
#: units of its half step < 2**-14; int4: 2 x 7 units < 2**-20; int2: 2 units.
FP32_MARGIN = {"int8": 2.0**-14, "int4": 2.0**-20, "int2": 2.0**-20}


def promised_bound(name, sent):
    """Per element of the ``[R, F]`` rows ``sent``, the error the codec
    promises, worked out from its description (not taken from it)."""
    if name in ROUNDOFF:
        return sent.abs() * ROUNDOFF[name] + 2.0**-25  # + half a subnormal step (fp16's)
    step = sent.abs().amax(dim=1, keepdim=True) / LEVELS[name]
    return (step * (1 + FP32_MARGIN[name])).expand_as(sent)


@pytest.mark.parametrize("name", sorted(CODECS))
def test_each_codec_reports_the_bound_its_description_promises(name):
    """``error_bound`` (which the backward check below sums) is the bound
    worked out by hand, up to the fp32 margins."""
    x = rows(0)
    assert torch.allclose(CODECS[name].error_bound(x), promised_bound(name, x), rtol=2**-14,
                          atol=2.0**-24)


@pytest.mark.parametrize("codec", sorted(CODECS))
@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_compressed_exchange_within_bounds(policy_results, kind, codec):
    """Forward: every halo row that arrives differs from the row its owner
    sent by less than the codec promises for that row (int: one quantisation
    step, the row's absmax / levels; casts: the mantissa's roundoff).
    Backward: each rank's input gradient differs from the exact one by at
    most the codec's bound on the halo gradients sent back to it (summed over
    the ranks that hold its rows). Both directions are booked at the
    compressed size: rows sent forward, halo gradients sent back."""
    row_bytes = CODECS[codec].row_bytes(F_IN)
    for rank, res in enumerate(policy_results):
        r = res["compression"][(kind, codec)]
        sent, received = r["halo_sent"], r["halo_received"]
        assert received.shape == sent.shape
        over = (received - sent).abs() > promised_bound(codec, sent)
        assert not bool(over.any()), f"rank {rank}: rows {over.any(1).nonzero().view(-1)}"
        assert r["bwd_excess"] <= 1e-6 * max(r["bwd_scale"], 1.0), r["bwd_excess"]
        assert r["fwd_bytes"] == r["num_send"] * row_bytes
        assert r["bwd_bytes"] == r["num_halo"] * row_bytes


def test_compression_is_not_free_of_error(policy_results):
    """The bounds above are met by a lossy wire, not by an exact one."""
    errors = [res["compression"][("gcn", "int8")]["fwd_err"] for res in policy_results]
    assert max(errors) > 0


POLICIES = [
    Exact(), Exact(compress="int8"), Exact(compress="int4"), Stale(every=4, compress="int2"),
    Exact(cache_inputs=False), Cached(compress="fp16"),
    Stale(every=4), Stale(every=2, stale_grads="drop", compress="bf16"),
    Pipelined(), Pipelined(smoothing=0.5, cache_inputs=False),
    Adaptive(tol=0.05), Adaptive(tol=0.1, max_staleness=3, stale_grads="drop"),
    Adaptive(tol=0.2, max_staleness=None), Sampled(0.1), Sampled(0.5, seed=3, compress="int8"),
    Isolated(),
]


@pytest.mark.parametrize("policy", POLICIES, ids=repr)
def test_spec_round_trips_every_argument(policy):
    assert parse_policy(policy.spec()) == policy
    assert repr(parse_policy(policy.spec())) == repr(policy)


def test_specs_round_trip():
    for spec in ("exact", "cached", "stale:4", "pipelined", "adaptive:0.1", "sampled:0.5",
                 "isolated", "adaptive:0.05,max_staleness=4", "sampled:0.1,seed=3",
                 "pipelined:0.5", "stale:2,stale_grads=drop,compress=int8",
                 "stale:4,compress=int2", "exact,compress=int4"):
        assert parse_policy(spec).spec() == spec
    assert repr(parse_policy("stale:4", "int8")) == "Stale(every=4, compress='int8')"
    assert repr(parse_policy("exact", cache_inputs=False)) == "Exact(cache_inputs=False)"
    assert parse_policy("adaptive:0.1,max_staleness=none") == Adaptive(0.1, max_staleness=None)
    with pytest.raises(ValueError, match="'seeds=3' is not KEY=VALUE"):
        parse_policy("sampled:0.1,seeds=3")
    with pytest.raises(ValueError, match="takes no ':' argument"):
        parse_policy("cached:3")
