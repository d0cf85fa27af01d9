"""Policy specs: every policy class that names itself is read back, one of
your own included, and names are not taken twice."""
import pytest

from pyg_dist.halo import SPECS, Exact, HaloPolicy, HaloRows, parse_policy
from pyg_dist.halo.policy import POLICIES
from pyg_dist.halo.spec import spellings


def test_every_policy_is_registered_with_its_spelling():
    assert sorted(POLICIES) == ["adaptive", "auto", "cached", "exact", "isolated", "pipelined",
                                "sampled", "stale"]
    assert "stale:K" in spellings() and "pipelined[:SMOOTHING]" in spellings()
    assert SPECS == spellings()
    with pytest.raises(ValueError, match="use one of adaptive:TOL, auto, cached, exact"):
        parse_policy("every_other")


def test_a_policy_of_your_own_is_read_once_defined():
    class EveryOther(HaloPolicy):
        name = "every_other"
        primary = "phase"

        def __init__(self, phase: int = 0, compress=None, cache_inputs=True):
            super().__init__(compress, cache_inputs)
            self.phase = phase

        def fetch(self, x, ctx):
            return HaloRows(ctx.exchange(x, self.codec))

        def options(self):
            return {**({"phase": self.phase} if self.phase else {}), **super().options()}

    try:
        policy = parse_policy("every_other:1,compress=int8")
        assert isinstance(policy, EveryOther) and policy.phase == 1
        assert policy.codec is not None and policy.codec.name == "int8"
        assert parse_policy(policy.spec()) == policy
        assert "every_other:PHASE" in spellings()
    finally:
        POLICIES.pop("every_other", None)


def test_a_taken_name_is_refused():
    with pytest.raises(ValueError, match="takes the spec name 'exact' of 'Exact'"):
        type("MyExact", (HaloPolicy,), {"name": "exact"})
    assert POLICIES["exact"] is Exact
    # a subclass that keeps its parent's name does not register again
    Quiet = type("Quiet", (Exact,), {})
    assert POLICIES["exact"] is Exact and Quiet.name == "exact"
