"""Codecs: round trips within their documented bounds, payload sizes, bad
names; compressed exchanges on 4 ranks (policy_cases.py) within those bounds,
forward and backward; policy specs that round-trip."""
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
def test_empty_rows(name):
    codec = CODECS[name]
    back = codec.decode(codec.encode(torch.zeros(0, 7)), 7, torch.float32)
    assert back.shape == (0, 7)


def test_bounds_are_tight_enough_to_mean_something():
    x = rows(0)
    assert (CODECS["fp16"].error_bound(x) / x.abs().clamp(min=1e-3)).max() < 1e-3
    assert (CODECS["int8"].error_bound(x)[7] == x[7].abs().max() / 254 * (1 + 1e-6)).all()


def test_bad_names():
    with pytest.raises(ValueError, match="use one of fp16, bf16, int8"):
        get_codec("int4")
    with pytest.raises(ValueError, match="unknown halo policy 'stal:3'"):
        parse_policy("stal:3")
    with pytest.raises(ValueError, match="every >= 1"):
        parse_policy("stale:0")
    with pytest.raises(ValueError, match="takes no compression"):
        parse_policy("isolated", compress="int8")
    with pytest.raises(ValueError, match="0 < p <= 1"):
        parse_policy("sampled:1.5")


@pytest.mark.parametrize("codec", sorted(CODECS))
@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_compressed_exchange_within_bounds(policy_results, kind, codec):
    """Backward: each rank's input gradient differs from the exact one by at
    most the codec's bound on the halo gradients sent back to it (summed over
    the ranks that hold its rows). Both directions are booked at the
    compressed size: rows sent forward, halo gradients sent back."""
    row_bytes = CODECS[codec].row_bytes(F_IN)
    fwd_limit = {"fp16": 5e-3, "bf16": 4e-2, "int8": 5e-2}[codec]
    for res in policy_results:
        r = res["compression"][(kind, codec)]
        assert r["bwd_excess"] <= 1e-6 * max(r["bwd_scale"], 1.0), r["bwd_excess"]
        assert r["fwd_err"] < fwd_limit
        assert r["fwd_bytes"] == r["num_send"] * row_bytes
        assert r["bwd_bytes"] == r["num_halo"] * row_bytes


def test_compression_is_not_free_of_error(policy_results):
    """The bounds above are met by a lossy wire, not by an exact one."""
    errors = [res["compression"][("gcn", "int8")]["fwd_err"] for res in policy_results]
    assert max(errors) > 0


POLICIES = [
    Exact(), Exact(compress="int8"), Exact(cache_inputs=False), Cached(compress="fp16"),
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
                 "pipelined:0.5", "stale:2,stale_grads=drop,compress=int8"):
        assert parse_policy(spec).spec() == spec
    assert repr(parse_policy("stale:4", "int8")) == "Stale(every=4, compress='int8')"
    assert repr(parse_policy("exact", cache_inputs=False)) == "Exact(cache_inputs=False)"
    assert parse_policy("adaptive:0.1,max_staleness=none") == Adaptive(0.1, max_staleness=None)
    with pytest.raises(ValueError, match="'seeds=3' is not KEY=VALUE"):
        parse_policy("sampled:0.1,seeds=3")
    with pytest.raises(ValueError, match="takes no ':' argument"):
        parse_policy("cached:3")
