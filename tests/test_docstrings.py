"""Every public name of the API reference has a docstring that documents each
of its arguments.

The names are those of the ``__all__`` of every module ``docs/api/modules.txt``
lists. A class's arguments are its constructor's (a dataclass's: its fields);
each must have an entry in the docstring's ``Args:`` section, written as
napoleon's Google style reads it (``name (type): ...`` or ``name: ...`` at the
section's entry indent). A dataclass may document its fields in an
``Attributes:`` section instead. A name mentioned anywhere else in the prose
does not count.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MODULES_TXT = REPO / "docs" / "api" / "modules.txt"

# Section headers napoleon renders as a parameter list.
ARG_SECTIONS = {"args", "arguments", "parameters", "params", "keyword args",
                "keyword arguments", "other parameters"}
FIELD_SECTIONS = {"attributes"}
HEADER = re.compile(r"^([A-Za-z][A-Za-z ]*):\s*$")
ENTRY = re.compile(r"^\**([A-Za-z_]\w*)\s*(\(.*\))?\s*:(\s|$)")


def api_modules() -> list[str]:
    lines = MODULES_TXT.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def sections(doc: str) -> dict[str, set[str]]:
    """The entry names of each section of a Google-style docstring, by the
    section's lower-cased title. An entry is a line at the section's first
    indent that reads ``name (type): ...`` or ``name: ...``; deeper lines
    continue the entry before them."""
    found: dict[str, set[str]] = {}
    lines = inspect.cleandoc(doc).splitlines()
    i = 0
    while i < len(lines):
        header = HEADER.match(lines[i])
        i += 1
        if header is None:
            continue
        names = found.setdefault(header.group(1).strip().lower(), set())
        indent = None
        while i < len(lines) and (not lines[i].strip() or lines[i][0].isspace()):
            line = lines[i]
            i += 1
            if not line.strip():
                continue
            depth = len(line) - len(line.lstrip())
            if indent is None:
                indent = depth
            if depth == indent and (entry := ENTRY.match(line.strip())):
                names.add(entry.group(1))
    return found


def own_doc(obj: object) -> str | None:
    """The docstring written for ``obj`` (not one inherited, nor the signature
    a dataclass writes when it has none)."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    if not doc or not doc.strip():
        return None
    if dataclasses.is_dataclass(obj) and inspect.isclass(obj):
        generated = obj.__name__ + str(inspect.signature(obj)).replace(" -> None", "")
        if doc == generated:
            return None
    return doc


def arguments(obj: object) -> list[str]:
    """The arguments a caller passes: a function's parameters, a class's
    constructor's, a dataclass's public fields (``self``, ``*args``,
    ``**kwargs`` and private ``_fields`` left out)."""
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
        return [f.name for f in dataclasses.fields(obj) if f.init and not f.name.startswith("_")]
    try:
        signature = inspect.signature(obj)  # type: ignore[arg-type]
    except ValueError:  # a class whose constructor is a builtin's
        return []
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [name for name, p in signature.parameters.items()
            if name != "self" and p.kind not in variadic]


def offenders(module_name: str) -> list[str]:
    """``module.Name: missing ...`` for each exported class or function of
    ``module_name`` defined in pyg_dist that lacks a docstring or leaves an
    argument out of it."""
    module = importlib.import_module(module_name)
    found = []
    for name in module.__all__:
        obj = getattr(module, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # constants and type aliases
        if not getattr(obj, "__module__", "").startswith("pyg_dist"):
            continue  # re-exported from torch or PyG: documented there
        doc = own_doc(obj)
        if doc is None:
            found.append(f"{module_name}.{name}: missing docstring")
            continue
        by_section = sections(doc)
        documented = set().union(*(by_section.get(s, set()) for s in ARG_SECTIONS))
        if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
            documented |= set().union(*(by_section.get(s, set()) for s in FIELD_SECTIONS))
        missing = [arg for arg in arguments(obj) if arg not in documented]
        if missing:
            found.append(f"{module_name}.{name}: missing {', '.join(missing)}")
    return found


def test_sections_parse_entries_only():
    doc = '''Summary mentioning alpha and beta.

    Args:
        alpha (int, optional): First (default: :obj:`1`). It
            is not gamma: the text goes on.
        beta: Second.
        **kwargs (optional): Passed on.

    Returns:
        delta (int): not an argument.
    '''
    found = sections(doc)
    assert found["args"] == {"alpha", "beta", "kwargs"}
    assert found["returns"] == {"delta"}


def test_offenders_lists_each_missing_argument(monkeypatch):
    import types

    def f(alpha, beta, *args, gamma=1, **kwargs):
        """Uses alpha, beta and gamma.

        Args:
            alpha (int): The first.
        """

    @dataclasses.dataclass
    class Record:
        """A record.

        Attributes:
            x (int): The first field.
        """
        x: int
        y: int

    def bare(a):
        pass

    module = types.ModuleType("pyg_dist._docstring_probe")
    for obj in (f, Record, bare):
        obj.__module__ = module.__name__
        setattr(module, obj.__name__, obj)
    module.__all__ = ["f", "Record", "bare"]  # type: ignore[attr-defined]
    monkeypatch.setitem(__import__("sys").modules, module.__name__, module)
    assert offenders(module.__name__) == [
        "pyg_dist._docstring_probe.f: missing beta, gamma",
        "pyg_dist._docstring_probe.Record: missing y",
        "pyg_dist._docstring_probe.bare: missing docstring",
    ]


@pytest.mark.parametrize("module_name", api_modules())
def test_every_argument_documented(module_name):
    missing = offenders(module_name)
    assert not missing, "undocumented:\n" + "\n".join(missing)
