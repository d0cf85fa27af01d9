"""Codecs: round trips within their documented bounds, payload sizes, bad names."""
import pytest
import torch

from pyg_dist.halo import CODECS, get_codec, parse_policy


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


def test_specs_round_trip():
    for spec in ("exact", "cached", "stale:4", "pipelined", "adaptive:0.1", "sampled:0.5",
                 "isolated"):
        assert parse_policy(spec).spec() == spec
    assert repr(parse_policy("stale:4", "int8")) == "Stale(every=4, compress='int8')"
    assert repr(parse_policy("exact", cache_inputs=False)) == "Exact(cache_inputs=False)"
