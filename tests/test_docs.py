"""The documentation site builds with warnings as errors (every reference into
pyg_dist resolved, the notebooks executed), and every block a reader would run
in README.md and the guides runs as written, so the pages cannot drift from
the code.

A block a reader would run is a fenced block (```` ``` ```` or ``~~~``) of
Python (``python``, ``py``) or shell (``bash``, ``sh``, ``shell``, or
``console`` with ``$`` prompts). Each page's blocks run in order, in a fresh
folder laid out like a clone with its set-up done (the tracked files of
tests/data, scripts, benchmarks and notebooks, and ``.venv`` holding this
interpreter and the ``pyg-dist`` command). A block that cannot run here
(a download, root, several machines, minutes of work) says so on its first
line, which the rendered page shows::

    # not run by the docs test: downloads ogbn-products

Every other block runs: one that fails fails the test, whether it is wrong or
merely unmarked (shell blocks under ``bash -e -o pipefail``). The commands of
a marked block still go through pyg-dist's parser, so a misspelt flag fails
there too. A ``print(...)`` line of a Python block that ends in
``# prints: TEXT`` shows what it prints, and the test checks it: every line it
printed is TEXT (or, when TEXT ends in ``...``, starts with what comes before).
"""
from __future__ import annotations

import ast
import json
import multiprocessing
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
GENERATED = {"cli.md"}
GUIDES = sorted(p for p in DOCS.glob("*.md") if p.name not in GENERATED)
PAGES = [REPO / "README.md", *GUIDES]
#: The tracked folders a clone holds that examples read (nothing outside the clone).
CLONE = ("tests/data", "scripts", "benchmarks", "notebooks")

PYTHON = {"python", "py", "python3"}
SHELL = {"bash", "sh", "shell", "console"}
#: Blocks a reader reads but does not run: outputs, files, directives.
SHOWN = {"text", "json", "toml", "yaml", "ini", "output", "diff"}
MARK = "# not run by the docs test: "

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)\n"
                   r"(?P<body>.*?)^[ \t]*(?P=fence)[ \t]*$", re.S | re.M)


@dataclass
class Block:
    page: Path
    line: int
    language: str
    code: str

    @property
    def kind(self) -> str:
        if self.language in PYTHON:
            return "python"
        if self.language in SHELL:
            return "shell"
        if self.language in SHOWN or self.language.startswith("{"):
            return "shown"
        return "unknown"

    @property
    def reason(self) -> str | None:
        """Why the block is not run, from its first line, or None."""
        first = self.code.strip().splitlines()[0] if self.code.strip() else ""
        return first[len(MARK):].strip() if first.startswith(MARK) else None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    def script(self) -> str:
        """The code to run: a console block's ``$`` lines (and their
        continuations), a shell block without its prompts."""
        if self.kind != "shell":
            return self.code
        lines, going = [], False
        for line in self.code.splitlines():
            if line.startswith("$ ") or line == "$":
                lines.append(line[2:])
            elif going or self.language != "console":
                lines.append(line)
            going = lines and lines[-1].endswith("\\")
        return "\n".join(lines) + "\n"


#: A print whose output the page shows: ``print(...)  # prints: TEXT``.
SHOWN_PRINT = re.compile(r"^(?P<indent>[ \t]*)print\((?P<args>.*)\)[ \t]+# prints: "
                         r"(?P<expected>.*?)[ \t]*$")
#: What marks a shown print's output on stdout (then its line number).
SENTINEL = "\x1e"


def instrumented(code: str) -> tuple[str, dict[int, str]]:
    """``code`` with each shown print announcing its line first, and what
    each of those lines shows it prints."""
    lines, shown = [], {}
    for number, line in enumerate(code.splitlines(), 1):
        match = SHOWN_PRINT.match(line)
        if match:
            shown[number] = match["expected"]
            line = (f"{match['indent']}print({SENTINEL!r} + '{number}' + {SENTINEL!r}, end=''); "
                    f"print({match['args']})")
        lines.append(line)
    return "\n".join(lines) + "\n", shown


def printed(stdout: str) -> dict[int, list[str]]:
    """What each shown print printed, by line, from ``instrumented`` code's stdout."""
    out: dict[int, list[str]] = {}
    pattern = re.escape(SENTINEL) + r"(\d+)" + re.escape(SENTINEL) + r"([^\n]*)"
    for match in re.finditer(pattern, stdout):
        out.setdefault(int(match[1]), []).append(match[2])
    return out


def check_prints(block: Block, shown: dict[int, str], stdout: str) -> None:
    """Every shown print of ``block`` printed what the page shows."""
    got = printed(stdout)
    for number, expected in shown.items():
        lines = got.get(number)
        assert lines, f"{block.where}: the print on its line {number} printed nothing"
        for line in lines:
            ok = (line.startswith(expected[:-3].rstrip()) if expected.endswith("...")
                  else line == expected)
            assert ok, (f"{block.where}: its line {number} shows it prints {expected!r}; it "
                        f"printed {line!r}")


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, in order."""
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        indent = len(match["indent"])
        body = "".join(line[indent:] if line[:indent].isspace() else line
                       for line in match["body"].splitlines(keepends=True))
        info = match["info"].strip()
        found.append(Block(page, text.count("\n", 0, match.start()) + 1,
                           info.split()[0] if info else "", body))
    return found


def census() -> dict[str, tuple[int, int, int]]:
    """Per page: the blocks run, the blocks marked not run, the blocks shown."""
    table = {}
    for page in PAGES:
        found = blocks(page)
        code = [b for b in found if b.kind in ("python", "shell")]
        marked = sum(b.reason is not None for b in code)
        table[page.relative_to(REPO).as_posix()] = (len(code) - marked, marked,
                                                    len(found) - len(code))
    return table


def cli_commands(script: str) -> list[list[str]]:
    """The argument lists of ``pyg-dist`` (or ``-m pyg_dist.cli``) in ``script``."""
    commands = []
    for line in script.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        for start, word in enumerate(words):
            if word.endswith("pyg-dist"):
                commands.append(words[start + 1:])
                break
            if word == "pyg_dist.cli" and start and words[start - 1] == "-m":
                commands.append(words[start + 1:])
                break
    return commands


@pytest.mark.timeout(1800)
def test_site_builds_without_a_warning(tmp_path):
    out = tmp_path / "html"
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(tmp_path / "doctrees"), str(DOCS), str(out)],
        capture_output=True, text=True, timeout=1700, cwd=REPO,
        env={**os.environ, "PYG_DIST_NOTEBOOK_SMALL": "1"})  # the notebooks on small graphs
    assert done.returncode == 0, done.stderr[-5000:]
    pages = {p.relative_to(out).as_posix() for p in out.rglob("*.html")}
    # every guide, every notebook and every API module has its page
    for guide in GUIDES:
        assert guide.with_suffix(".html").name in pages, guide.name
    for notebook in (REPO / "notebooks").glob("*.ipynb"):
        html = (out / "notebooks" / f"{notebook.stem}.html").read_text()
        assert "cell_output" in html, f"{notebook.name} was rendered without its outputs"
    modules = [line.strip() for line in (DOCS / "api" / "modules.txt").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    for module in modules:
        assert f"api/generated/{module}.html" in pages, module
    # a layer has a page of its own with its docstring: the paper, the math, the shapes
    gcn = (out / "api" / "generated" / "pyg_dist.nn.DistGCNConv.html").read_text()
    assert 'id="pyg_dist.nn.DistGCNConv"' in gcn
    assert "arxiv.org/abs/1609.02907" in gcn and "Shapes" in gcn and "math" in gcn
    # a block the docs test does not run says so where a reader sees it (the site
    # shows README's quick tour only; the repository's page shows the README)
    for page in GUIDES:
        marked = [b for b in blocks(page) if b.reason]
        html = (out / page.with_suffix(".html").name).read_text()
        assert html.count("not run by the docs test") >= len(marked), page.name


#: Writes every API module's page as docs/conf.py does and prints the
#: constants of a module's ``__all__`` that got no entry of their own.
_CONSTANTS = """
import importlib, runpy, sys
conf = runpy.run_path(sys.argv[1], run_name="api_check")
seen, pages, names = {}, {}, conf["api_modules"]()
for name in names:
    pages.update(conf["_api_pages"](name, seen))
for name in names:
    module = importlib.import_module(name)
    for c in module.__all__:
        if (not c.startswith("__") and conf["_kind"](getattr(module, c)) == "data"
                and f".. py:data:: {c}" not in pages[name]):
            print(f"{name}.{c}")
"""


def test_every_constant_gets_its_entry():
    """Each module's constants are documented on its page. (Keyed by the id
    of a pair freed at once, some went missing under some hash seeds, and the
    site's references to them broke now and then.)"""
    done = subprocess.run([sys.executable, "-c", _CONSTANTS, str(DOCS / "conf.py")],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [], f"constants without an entry: {done.stdout.split()}"


def unguarded_set_up(code: str) -> list[str]:
    """The module-level statements of a Python block that call something,
    outside ``if __name__ == "__main__":``: under ``launch`` every rank
    re-imports the file and would run them again (cut the graph again, make
    another temporary folder)."""
    found = []
    for node in ast.parse(code).body:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
            continue
        if any(isinstance(inner, ast.Call) for inner in ast.walk(node)):
            found.append(ast.unparse(node).splitlines()[0])
    return found


def test_blocks_that_start_ranks_guard_their_set_up():
    """A Python block that starts local ranks (``launch``) does its set-up
    under ``if __name__ == "__main__":``, as the ranks re-import the file."""
    for block in (b for page in PAGES for b in blocks(page)):
        if block.kind == "python" and "launch(" in block.code:
            unguarded = unguarded_set_up(block.code)
            assert not unguarded, (f"{block.where} starts ranks, which re-import the file and "
                                   f"run {unguarded} again: move them under "
                                   f"'if __name__ == \"__main__\":'")


def test_every_block_is_run_or_marked_visibly(capsys):
    """No block is left out silently: each is Python or shell (run, or marked
    on its first line), or an output/file shown (``text``, ``json``, ...);
    a fence without a language is refused. The counts are printed by page."""
    from pyg_dist.cli import build_parser

    found = [b for page in PAGES for b in blocks(page)]
    unknown = [f"{b.where} ({b.language or 'no language'})" for b in found if b.kind == "unknown"]
    assert not unknown, (f"fenced blocks of no known kind: {unknown}; name the language "
                         f"(python, bash, console, text, ...)")
    for block in found:
        if block.reason is not None:
            assert block.reason, f"{block.where}: say why the block is not run"
            for argv in cli_commands(block.code):
                try:
                    build_parser().parse_args(argv)
                except SystemExit as exc:
                    pytest.fail(f"{block.where}: 'pyg-dist {shlex.join(argv)}' is refused by "
                                f"pyg-dist's parser (exit {exc.code})")
    for page, line in CHECKS:
        assert any(b.page.name == page and line in b.code and b.reason is None
                   for b in found), f"no block of {page} that runs holds {line!r}"
    table = census()
    assert sum(run for run, _, _ in table.values()) > 20
    with capsys.disabled():
        print("\npage                     run  not run (marked)  shown")
        for page, (run, marked, shown) in table.items():
            print(f"{page:<24} {run:>3}  {marked:>16}  {shown:>5}")


def test_the_block_reader_takes_both_fences_prompts_and_marks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Text\n\n~~~bash\n$ pyg-dist plan --dataset cora \\\n  --parts 2\n~~~\n\n"
                    "  ```console\n  $ echo hi\n  hi\n  ```\n\n```py\n" + MARK + "a reason\n"
                    "x = 1\n```\n\n```text\noutput\n```\n```\nbare\n```\n")
    read = blocks(page)
    assert [(b.line, b.language, b.kind) for b in read] == [
        (3, "bash", "shell"), (8, "console", "shell"), (13, "py", "python"),
        (18, "text", "shown"), (21, "", "unknown")]
    assert read[0].script() == "pyg-dist plan --dataset cora \\\n  --parts 2\n"
    assert read[1].script() == "echo hi\n"
    assert read[2].reason == "a reason" and read[0].reason is None
    assert cli_commands(read[0].script()) == [["plan", "--dataset", "cora", "--parts", "2"]]
    assert cli_commands("torchrun --nnodes 2 ... -m pyg_dist.cli train --parts 4  # x") == [
        ["train", "--parts", "4"]]


def test_a_shown_print_is_checked_against_what_it_prints():
    code, shown = instrumented("x = 2\nif x:\n    print(x + 1, 'a')   # prints: 3 a\n"
                               "print([1, 2, 3])  # prints: [1, 2, ...\nprint(5)  # five\n")
    assert shown == {3: "3 a", 4: "[1, 2, ..."}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    block = Block(REPO / "README.md", 1, "python", code)
    check_prints(block, shown, done.stdout)
    assert done.stdout.endswith("5\n")
    with pytest.raises(AssertionError, match="shows it prints '4 a'; it printed '3 a'"):
        check_prints(block, {3: "4 a"}, done.stdout)


#: Scripts whose exit status and output must be those of ``python SCRIPT``.
AS_PYTHON_RUNS_THEM = {
    "where.py": "import os, sys\nprint(__name__, sys.argv, os.getcwd(), sys.path[0])\n"
                "print(os.environ['BLOCK_VALUE'])\nprint(sorted(k for k in globals()"
                " if not k.startswith('__')))\n",
    "exits.py": "import sys\nprint('before')\nsys.exit(3)\n",
    "says.py": "raise SystemExit('a message')\n",
    "raises.py": "print('partial')\nraise ValueError('a block that fails')\n",
    "tests_dir.py": "import tolerances\n",  # tests/ is not on a block's path
    "main_guard.py": "import multiprocessing as mp\n\ndef square(x):\n    return x * x\n\n"
                     "if __name__ == '__main__':\n"
                     "    with mp.get_context('spawn').Pool(1) as pool:\n"
                     "        print(pool.map(square, [3]))\n",
}


@pytest.mark.parametrize("name", sorted(AS_PYTHON_RUNS_THEM))
def test_a_python_block_runs_as_python_runs_the_script(name, tmp_path):
    script = tmp_path / name
    script.write_text(AS_PYTHON_RUNS_THEM[name])
    env = {**os.environ, "BLOCK_VALUE": "from the block's environment"}
    env.pop("PYTHONPATH", None)
    fresh = subprocess.run([sys.executable, name], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=120)
    forked = run_python(script, env)
    assert (forked.returncode, forked.stdout) == (fresh.returncode, fresh.stdout)
    # the same error, its traceback through runpy's frames
    assert forked.stderr.splitlines()[-1:] == fresh.stderr.splitlines()[-1:]


def clone(folder: Path) -> Path:
    """``folder`` laid out like a clone after its set-up: the tracked files
    of :data:`CLONE` and ``.venv`` (this interpreter's environment)."""
    listed = subprocess.run(["git", "ls-files", "-z", *CLONE], cwd=REPO, capture_output=True,
                            text=True)
    files = [f for f in listed.stdout.split("\0") if f] if listed.returncode == 0 else [
        p.relative_to(REPO).as_posix() for top in CLONE for p in (REPO / top).rglob("*")
        if p.is_file() and "processed" not in p.parts and "__pycache__" not in p.parts]
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, folder / name)
    (folder / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return folder


def quick_tour_trains_cora(out: str, folder: Path) -> None:
    """README's quick tour: one test accuracy per rank, equal (global), and a
    2-layer GCN without dropout reaches ~80% in 100 epochs (81.5% published
    with dropout); the parts it cut are in the clone."""
    accuracies = ast.literal_eval(out.strip().splitlines()[-1])
    assert len(accuracies) == 2 and accuracies[0] == accuracies[1], accuracies
    assert accuracies[0] >= 0.75, accuracies
    assert (folder / "parts" / "meta.json").is_file()


#: What a block's output must show besides its exit status, by page and a
#: line of the block.
CHECKS = {("README.md", "def rank_main():"): quick_tour_trains_cora}


def runnable(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.kind in ("python", "shell") and b.reason is None]


#: The modules every rank's fork server imports first (pyg_dist.launch's).
PRELOAD = ["torch", "torch_geometric", "scipy.sparse.csgraph"]


def _python_block(script: str, environ: dict[str, str], path: list[str], out: str,
                  err: str) -> None:
    """A Python block's process, as ``python NAME`` in the script's folder
    starts it: that folder, the environment, argv, a ``__main__`` of its
    own (its absolute ``__file__``), the folder and then ``path`` (a fresh
    interpreter's) to import from; its output to files."""
    folder, name = os.path.split(script)
    os.chdir(folder)
    os.environ.clear()
    os.environ.update(environ)
    for fd, file in ((1, out), (2, err)):
        os.dup2(os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.path[:] = [folder, *path]
    sys.argv = [name]
    main = types.ModuleType("__main__")
    main.__file__ = script
    sys.modules["__main__"] = main
    code = compile(Path(script).read_text(), script, "exec")
    exec(code, main.__dict__)


def fresh_path(environ: dict[str, str]) -> list[str]:
    """The import path of a fresh interpreter with ``environ``, after its
    script's folder."""
    return json.loads(subprocess.run(
        [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
        env=environ, capture_output=True, text=True, check=True).stdout)


def run_python(script: Path, environ: dict[str, str],
               path: list[str] | None = None) -> subprocess.CompletedProcess:
    """``python SCRIPT`` as a process forked from the fork server that this
    test process's ranks come from, which has imported torch and PyG: a
    fresh interpreter would spend seconds of CPU importing them again.
    Everything else is the block's own (names, modules it imports, the
    ranks it starts); what it writes and its exit status come back as
    :func:`subprocess.run` gives them. ``path``: the import path after the
    script's folder (:func:`fresh_path` of ``environ`` when not given)."""
    path = fresh_path(environ) if path is None else path
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    out, err = script.with_suffix(".out"), script.with_suffix(".err")
    process = context.Process(target=_python_block, name=script.name,
                              args=(str(script), environ, path, str(out), str(err)))
    process.start()
    process.join(900)
    if process.exitcode is None:
        process.kill()
        process.join()
        raise subprocess.TimeoutExpired(script.name, 900)
    return subprocess.CompletedProcess([script.name], process.exitcode, out.read_text(),
                                       err.read_text())


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p)],
                         ids=lambda p: p.stem)
def test_every_example_of_the_page_runs_from_a_clone(page, tmp_path, capsys):
    """The page's blocks, in order, in one fresh clone: each ends with
    status 0 (shell blocks under ``bash -e``, with pyg-dist on PATH)."""
    folder = clone(tmp_path)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                                 f"{os.environ.get('PATH', '')}"}
    env.pop("PYTHONPATH", None)
    path = fresh_path(env)
    took = []
    for number, block in enumerate(runnable(page), 1):
        shown: dict[int, str] = {}
        if block.kind == "python":
            script = folder / f"{page.stem}_{number}.py"
            code, shown = instrumented(block.script())
            script.write_text(code)
            start = time.perf_counter()
            done = run_python(script, env, path)
        else:
            script = folder / f"{page.stem}_{number}.sh"
            script.write_text(block.script())
            start = time.perf_counter()
            done = subprocess.run(["bash", "-e", "-o", "pipefail", script.name], cwd=folder,
                                  capture_output=True, text=True, timeout=900, env=env)
        took.append(time.perf_counter() - start)
        assert done.returncode == 0, (
            f"{block.where} ({block.kind}) fails from a clone (exit {done.returncode}); fix it, "
            f"or if it cannot run here begin it with '{MARK}REASON':\n{block.script()}\n"
            f"{done.stdout[-1500:]}\n{done.stderr[-3000:]}")
        check_prints(block, shown, done.stdout)
        for (name, line), check in CHECKS.items():
            if name == page.name and line in block.code:
                check(done.stdout, folder)
    with capsys.disabled():
        print(f"\n{page.name}: {len(took)} blocks run in {sum(took):.0f} s "
              f"({', '.join(f'{t:.0f}' for t in took)})")
