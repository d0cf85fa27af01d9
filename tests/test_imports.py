"""Every module of pyg_dist imports on its own, and no two modules import each
other, directly or through others (function-level imports included)."""
import ast
import functools
import json
import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyg_dist

PACKAGE = Path(pyg_dist.__file__).parent
REPO = PACKAGE.parent

# Imports that close a cycle in modules other work is changing at the moment:
# each entry (importer, imported) is left out of the cycle check. Remove the
# entries once those changes are in; the list should then be empty.
ALLOWED: set[tuple[str, str]] = set()


def modules() -> list[str]:
    """Every module and package of pyg_dist, by dotted name."""
    found = [info.name for info in pkgutil.walk_packages([str(PACKAGE)], "pyg_dist.")]
    return ["pyg_dist", *sorted(found)]


def source(module: str) -> Path:
    path = REPO.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def imported(module: str, names: set[str], text: str | None = None) -> set[str]:
    """The pyg_dist modules that ``module``'s source (or ``text``) imports,
    anywhere in the file: ``from pkg import name`` counts as importing
    ``pkg.name`` when that is a module, else ``pkg``."""
    path = source(module)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text() if text is None else text, str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in names else base
                       for alias in node.names)
    return {_known(name, names) for name in out if name.split(".")[0] == "pyg_dist"} - {module}


def _known(name: str, names: set[str]) -> str:
    """``name``, or the innermost package of it that is a module of pyg_dist."""
    while name not in names:
        name = name.rpartition(".")[0]
    return name


@functools.cache
def import_graph() -> dict[str, set[str]]:
    names = set(modules())
    return {m: imported(m, names) for m in sorted(names)}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or :obj:`None`."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_no_import_cycle():
    graph = {m: {d for d in deps if (m, d) not in ALLOWED} for m, deps in import_graph().items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_find_cycle_finds_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_function_level_imports_and_submodules_count():
    names = set(modules())
    graph = import_graph()
    assert "pyg_dist.testing.cluster" in graph["pyg_dist.testing.decorators"]  # inside a function
    assert "pyg_dist.ops.cpu" in graph["pyg_dist.ops.backends"]  # from pkg import module
    assert graph["pyg_dist.ops.triton"] == {"pyg_dist.typing", "pyg_dist.ops.triton.backend"}
    assert _known("pyg_dist.ops.spmm.spmm", names) == "pyg_dist.ops.spmm"
    text = "def f():\n    from . import comm\n    from ..ops import spmm, SOMETHING\n"
    assert imported("pyg_dist.halo.exchange", names, text) == {
        "pyg_dist.halo.comm", "pyg_dist.ops.spmm", "pyg_dist.ops"}


# One interpreter imports torch and the third-party packages once, then the
# package root, then forks a child per module (a few at a time) that imports
# that module, so a module that only imports after another fails here. Python
# imports a module's packages before it, so in a fresh interpreter every
# module's import begins with the root's: the parent runs that part once (a
# failing root fails every module), and each child holds the root's modules
# only (a module the root imports is checked by the root's import).
_CHILDREN = textwrap.dedent("""
    import json, os, sys, tempfile, traceback
    import torch, torch_geometric  # noqa: F401 - shared by every child
    import scipy.sparse.csgraph  # noqa: F401 - a dependency: a third of a child's time
    for optional in ("triton", "pymetis", "torch_sparse"):
        try:
            __import__(optional)
        except Exception:
            pass
    names, jobs = json.loads(sys.argv[1]), int(sys.argv[2])
    out, running, failed = tempfile.mkdtemp(), {}, {}
    try:
        import pyg_dist  # noqa: F401 - the start of every module's import
    except BaseException:
        print(json.dumps({name: traceback.format_exc() for name in names}))
        sys.exit(0)
    root = {m for m in sys.modules if m.split(".")[0] == "pyg_dist"}

    def reap():
        pid, status = os.wait()
        name = running.pop(pid)
        if status != 0:
            with open(os.path.join(out, name)) as f:
                failed[name] = f.read()

    for name in names:
        if len(running) >= jobs:
            reap()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                assert {m for m in sys.modules if m.split(".")[0] == "pyg_dist"} == root
                __import__(name)
            except BaseException:
                with open(os.path.join(out, name), "w") as f:
                    f.write(traceback.format_exc())
                code = 1
            os._exit(code)
        running[pid] = name
    while running:
        reap()
    print(json.dumps(failed))
""")


def test_every_module_imports_on_its_own():
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYG_DIST_DISABLE_CPU_EXT": "1"}
    jobs = "4"
    # A __main__ module is a command line: importing it runs it.
    names = [m for m in modules() if not m.endswith(".__main__")]
    out = subprocess.run([sys.executable, "-c", _CHILDREN, json.dumps(names), jobs],
                         capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr
    failed = json.loads(out.stdout.strip().splitlines()[-1])
    assert not failed, "\n".join(f"{name}:\n{text}" for name, text in failed.items())


def test_optional_dependencies_reach_only_the_cpu_loader():
    """pyg_dist.typing finds the C++ extension through pyg_dist.runtime.cpu_ext, which
    reaches no op (only its build flags and the environment), so every op may
    import pyg_dist.typing."""
    graph = import_graph()
    seen, todo = set(), ["pyg_dist.typing"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    assert seen == {"pyg_dist.typing", "pyg_dist.runtime.cpu_ext", "pyg_dist.runtime.cpu_build",
                    "pyg_dist.runtime.env"}, sorted(seen)


#: The rooms of the package from the top down: a module imports only from
#: its own level or below (the package root, the public face, sits between
#: the layers that compute and the strategies that use them).
LEVELS = {
    "cli": 6, "testing": 6,
    "train": 5, "config": 5,
    "strategies": 4,
    "nn": 3, "loop": 3, "pipeline": 3, "regroup": 3, "models": 3, "grads": 3, "metrics": 3,
    "halo": 2, "data": 2, "partitioning": 2, "datasets": 2, "tasks": 2,
    "ops": 1, "runtime": 1, "utils": 1, "typing": 1, "version": 1,
}
ROOT_LEVEL = 3.5


def _level(module: str) -> float:
    parts = module.split(".")
    return ROOT_LEVEL if len(parts) == 1 else LEVELS[parts[1]]


def test_every_module_lives_in_a_room():
    rooms = {m.split(".")[1] for m in modules() if "." in m}
    assert rooms <= set(LEVELS), sorted(rooms - set(LEVELS))
    loose = sorted(m for m in modules() if m.count(".") == 1 and m.split(".")[1] not in {
        "config", "metrics", "typing", "version"} and not (PACKAGE / m.split(".")[1]).is_dir())
    assert not loose, f"modules loose in the package root: {loose}"


def test_the_house_reads_top_down():
    """cli -> train -> strategies -> nn/loop/pipeline/regroup/models -> halo/data
    -> ops/runtime/utils: no module imports from a room above its own."""
    upward = [f"{m} imports {d}" for m, deps in import_graph().items() for d in sorted(deps)
              if _level(d) > _level(m)]
    assert not upward, "\n".join(upward)
