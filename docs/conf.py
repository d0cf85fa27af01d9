"""Sphinx configuration of pyg_dist's documentation.

Build it with ``bash scripts/docs.sh`` (``.venv/bin/python -m sphinx -W --keep-going
-b html docs docs/_build/html``). The build writes three kinds of generated pages
first, none of them kept in git: one API page per module of ``api/modules.txt``
(what its ``__all__`` exports, from the docstrings), the command-line reference
(``cli.md``, from the parser the CLI runs), and the notebooks of ``../notebooks``,
executed during the build.
"""
from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
sys.path.insert(0, str(REPO))

import pyg_dist  # noqa: E402

project = "pyg_dist"
author = "the pyg_dist developers"
copyright = "the pyg_dist developers, MIT License"
release = pyg_dist.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "myst_nb",
]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "README.md", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []

html_theme = "furo"
html_title = f"pyg_dist {release}"
html_static_path: list[str] = []

# Every reference into pyg_dist must resolve; references to other projects
# (no inventories are fetched: the build is offline) are not checked.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|torch_geometric|numpy|np|typing|collections|argparse|pathlib|os|"
               r"dataclasses|enum|abc|datetime|concurrent|multiprocessing|socket|"
               r"tqdm|scipy|pymetis|triton)(\..*)?"),
    (r"py:.*", r"(Tensor|Any|Callable|Iterable|Iterator|Sequence|Mapping|Path|Module|"
               r"Optimizer|Data|Parameter|ProcessGroup|Work|Generator|Literal|ClassVar|"
               r"TypeVar|Self|NamedTuple|Protocol|LRScheduler|ReduceLROnPlateau|"
               r"EdgeIndex|MessagePassing|ndarray|PathLike|SparseTensor)"),
    # PyG's docstrings write literals as :obj:`0`, :obj:`"mean"`, :obj:`[N, F]`.
    (r"py:.*", r"([^A-Za-z_].*|.*[^A-Za-z0-9_.].*|__\w+__)"),
    (r"py:(obj|class|data)", r"(int|float|str|bool|bytes|tuple|list|dict|set|frozenset|"
                             r"object|type|None|True|False|Ellipsis|slice|range|"
                             r"BaseException|Exception|.*Error|.*Warning|optional)"),
]

autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the docstrings' Args say the types, as PyG's do
autosummary_generate = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_custom_sections = ["Shapes"]  # a rubric over the list as written

myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3

# The notebooks run during the build, at full size (10,000-node graphs, about
# 3.5 minutes on 2 cores), so the pages show what a reader's run prints; the
# test suite's build sets PYG_DIST_NOTEBOOK_SMALL=1, which their first cells
# read, to run them on small graphs. An error in a cell fails the build.
nb_execution_mode = "force"
nb_execution_timeout = 600
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_in_temp = True  # what a notebook writes goes to a folder of its own
# stderr is progress bars and tqdm's note that ipywidgets is missing
nb_output_stderr = "remove"

def api_modules() -> list[str]:
    """The modules of the API reference, as ``api/modules.txt`` lists them."""
    lines = (DOCS / "api" / "modules.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _kind(obj: object) -> str:
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    if callable(obj):
        return "function"
    return "data"


def _api_pages(module_name: str, seen: dict[object, str]) -> dict[str, str]:
    """The pages of one module: its own (its docstring, a summary table of its
    ``__all__``, its constants) and one per class or function, as PyG's
    reference has them. Each object is documented once, under the first
    module that exports it; later modules link to it. An object's page is
    reached from its module's table, not from the sidebar (``:orphan:``): a
    sidebar of every object, drawn on each of the site's pages, made the
    build three times as long."""
    module = importlib.import_module(module_name)
    lines = [module_name, "=" * len(module_name), "", f".. automodule:: {module_name}",
             "   :no-members:", ""]
    own, elsewhere = [], []
    for name in module.__all__:
        if name.startswith("__"):
            continue
        obj = getattr(module, name)
        # a constant is its own module's (two modules' equal values are not one
        # object); the key is the pair itself: the id of a pair made here could be
        # the id of an earlier, freed pair, and the constant would go undocumented
        key: object = id(obj) if _kind(obj) != "data" else (module_name, name)
        if key in seen:
            elsewhere.append(f"{seen[key]}")
        else:
            seen[key] = f"{module_name}.{name}"
            own.append((name, obj))
    # Constants have no docstring of their own (autosummary would show that of
    # their type, e.g. dict's); their ``#:`` comment is shown below instead.
    objects = [name for name, obj in own if _kind(obj) != "data"]
    pages = {}
    if objects:
        lines += [".. autosummary::", "   :nosignatures:", ""]
        lines += [f"   {name}" for name in objects] + [""]
    if elsewhere:
        refs = ", ".join(f":py:obj:`~{target}`" for target in elsewhere)
        lines += [f"Also exported here: {refs}.", ""]
    for name, obj in own:
        kind = _kind(obj)
        if kind == "data":
            lines += _data_entry(name, obj)
            continue
        directive = {"class": "autoclass", "exception": "autoexception",
                     "function": "autofunction"}[kind]
        page = [":orphan:", "", name, "=" * len(name), "", f".. currentmodule:: {module_name}",
                "", f".. {directive}:: {name}"]
        if kind in ("class", "exception"):
            page += ["   :members:", "   :exclude-members: forward, check, __init__"]
        pages[f"{module_name}.{name}"] = "\n".join(page) + "\n"
    pages[module_name] = "\n".join(lines)
    return pages


def _data_entry(name: str, obj: object) -> list[str]:
    """A constant, with the ``#:`` comment of the module that defines it
    (autodoc looks for it only in the module that re-exports it)."""
    from sphinx.pycode import ModuleAnalyzer

    for module_name, module in sorted(sys.modules.items()):
        if not module_name.startswith("pyg_dist") or getattr(module, name, None) is not obj:
            continue
        try:
            docs = ModuleAnalyzer.for_module(module_name).find_attr_docs()
        except Exception:  # an extension module, or no source
            continue
        if ("", name) in docs:
            return [f".. py:data:: {name}", ""] + [f"   {line}" for line in docs["", name]]
    return [f".. py:data:: {name}", ""]


def _write(path: Path, text: str) -> None:
    """Writes a generated page only when it changed, so that an incremental
    build rereads only what changed and two builds never see a page missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)


def _keep_only(folder: Path, names: set[str]) -> None:
    for stale in folder.iterdir():
        if stale.name not in names:
            stale.unlink()


def write_api_pages() -> None:
    out = DOCS / "api" / "generated"
    seen: dict[object, str] = {}
    modules = api_modules()
    pages: dict[str, str] = {}
    for name in modules:
        pages.update(_api_pages(name, seen))
    for name, text in pages.items():
        _write(out / f"{name}.rst", text)
    _keep_only(out, {f"{name}.rst" for name in pages})
    toc = "\n".join(f"   generated/{name}" for name in modules)
    _write(DOCS / "api" / "index.rst",
           "API reference\n=============\n\nEvery public name of the package, from its "
           f"docstring.\n\n.. toctree::\n   :maxdepth: 1\n\n{toc}\n")


def write_cli_page() -> None:
    from pyg_dist.cli import build_parser

    parser = build_parser()
    parts = ["# Command line\n",
             "`pyg-dist` (also `python -m pyg_dist.cli`) cuts graphs, trains on them and "
             "checks machines. Its options are the fields of the option objects in "
             "{py:mod}`pyg_dist.config`; this page is generated from the parser the "
             "command runs.\n",
             "```text", parser.format_help().rstrip(), "```\n"]
    commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, sub in commands.choices.items():
        parts += [f"## `pyg-dist {name}`\n", "```text", sub.format_help().rstrip(), "```\n"]
    _write(DOCS / "cli.md", "\n".join(parts))


def copy_notebooks() -> None:
    out = DOCS / "notebooks"
    notebooks = sorted((REPO / "notebooks").glob("*.ipynb"))
    for notebook in notebooks:
        _write(out / notebook.name, notebook.read_text())
    _keep_only(out, {notebook.name for notebook in notebooks})


write_api_pages()
write_cli_page()
copy_notebooks()
