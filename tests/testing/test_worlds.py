"""The shared launches of rank batteries (tests/worlds.py): batteries that
fail together and pass alone are reported as interacting, naming them."""
import pytest
import worlds

#: State one battery leaves in the rank's process and the other reads.
_LEFT: list[str] = []


def _leaves_state():
    _LEFT.append("a cache entry")
    return "left"


def _reads_state():
    if _LEFT:
        raise RuntimeError(f"found {_LEFT[0]} another battery left")
    return "clean"


def _nothing(root):
    return (), None


class _Factory:
    def __init__(self, root):
        self.root, self.n = root, 0

    def mktemp(self, name):
        self.n += 1
        folder = self.root / f"{name}{self.n}"
        folder.mkdir()
        return folder


def test_batteries_that_fail_together_and_pass_alone_fail_naming_both(tmp_path, monkeypatch):
    world = (1, 7.5)  # a world of its own: no other battery joins the launch
    monkeypatch.setitem(worlds._DECLARED, world, [])
    monkeypatch.setattr(worlds, "_SELECTED", None)
    leaves = worlds.Battery(1, _leaves_state, _nothing, timeout=120, comm_timeout=7.5,
                            name="leaves")
    reads = worlds.Battery(1, _reads_state, _nothing, timeout=120, comm_timeout=7.5,
                           name="reads")
    factory = _Factory(tmp_path)
    for battery in (leaves, reads):
        with pytest.raises(RuntimeError) as info:
            battery.results(factory)
        message = str(info.value)
        assert "the batteries leaves, reads fail when they share one launch and pass alone" \
            in message, message
        assert "found a cache entry another battery left" in message, message
