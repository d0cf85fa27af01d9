"""The shared launches of rank batteries (tests/worlds.py): batteries that
fail together and pass alone are reported as interacting, naming them; the
files that read one battery run in one xdist worker."""
import ast
from pathlib import Path

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


def shared_batteries(tests: Path) -> dict[str, tuple[str, ...]]:
    """Every ``Battery(..., users=...)`` of the test files under ``tests``
    whose results several files read: where it is declared -> those files."""
    found = {}
    for path in sorted(tests.rglob("*.py")):
        tree = ast.parse(path.read_text())
        constants = {target.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                     for target in node.targets if isinstance(target, ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Battery":
                for keyword in node.keywords:
                    if keyword.arg == "users":
                        value = keyword.value
                        if isinstance(value, ast.Name):
                            value = constants[value.id]
                        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) > 1:
                            users = tuple(ast.literal_eval(value))
                            found[path.relative_to(tests).as_posix()] = users
    return found


def test_files_that_read_one_battery_run_in_one_worker(request):
    """Under xdist each worker launches the batteries of the files it runs:
    the files that read one battery form one of tests/conftest.py's
    TOGETHER groups (their folder's), or its ranks start in both workers."""
    tests = Path(__file__).resolve().parents[1]
    conftest = next(p for p in request.config.pluginmanager.get_plugins()
                    if getattr(p, "__file__", None) == str(tests / "conftest.py"))
    shared = shared_batteries(tests)
    assert {"halo/conftest.py", "link/conftest.py"} <= set(shared), shared
    for where, users in shared.items():
        folder = Path(where).parent.name
        assert set(users) <= set(conftest.TOGETHER.get(folder, ())), (
            f"{where}'s battery is read by {users}: list them in tests/conftest.py's "
            f"TOGETHER[{folder!r}]")
