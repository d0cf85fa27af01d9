"""What ``pyg-dist --help`` and ``pyg-dist train --help`` print: plain text
that fits a screen, choice lists wrapped between choices (never inside a
name), per-model defaults shown as such, and the options of one strategy at a
time (``pyg-dist train --strategy NAME --help``)."""
from __future__ import annotations

import argparse
import re
import textwrap
from collections.abc import Sequence
from typing import Any

from pyg_dist.cli.job import EMBEDDING_MODELS, RECIPES
from pyg_dist.models.gnn import DEEP_MODELS
from pyg_dist.models.hetero import HETERO_MODELS

__all__ = ["DESCRIPTION", "EPILOG", "Formatter", "TopFormatter", "wrap", "recipe_default",
           "asked_strategy"]

#: The first paragraph of ``pyg-dist --help``.
DESCRIPTION = textwrap.fill(
    "Partition a graph, or train a GNN on it across local ranks (spawned here, or "
    "torchrun's). 'pyg-dist train' prints its progress on stderr and ends stdout with one "
    "JSON line: the results and the job, which 'pyg-dist train --config FILE' runs again.",
    78)
#: The end of ``pyg-dist --help``: two commands to start with.
EPILOG = """examples (in a clone, whose tests/data holds Cora):
  pyg-dist train --dataset cora --root tests/data --parts 2 --epochs 50
  pyg-dist plan --dataset synthetic --parts 4 --accept compressed

'pyg-dist COMMAND --help' shows a command's options; docs/ explains them."""

# A piece of help text: a word with the separator after it (spaces, or a
# '|' or ',' between choices), where a line may end.
_PIECE = re.compile(r"(?:\[,|[^\s|,])*(?:[|,]+\s*|\s+|$)")


def wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken at spaces and
    after the ``|`` and ``,`` between choices, never inside a name (a piece
    longer than ``width`` keeps a line of its own).

    Args:
        text (str): The help text.
        width (int): The widest line.
    """
    text = " ".join(text.split())
    lines: list[str] = []
    line = ""
    for piece in _PIECE.findall(text):
        if not piece:
            continue
        if line and len(line + piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        line += piece
    if line.strip():
        lines.append(line.rstrip())
    return lines


class Formatter(argparse.HelpFormatter):
    """``train``'s help: option names up to 24 characters wide share a line
    with their help, ``--x, --no-x`` is shown as ``--[no-]x``, and help
    text wraps with :func:`wrap`."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=26)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if isinstance(action, argparse.BooleanOptionalAction) and len(action.option_strings) == 2:
            return "--[no-]" + action.option_strings[0][2:]
        return super()._format_action_invocation(action)

    def _split_lines(self, text: str, width: int) -> list[str]:
        return wrap(text, width)


class TopFormatter(argparse.RawDescriptionHelpFormatter):
    """``pyg-dist --help``: the description and examples as written, the
    commands listed as options are (without argparse's ``COMMAND`` line)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=14)

    def _format_action(self, action: argparse.Action) -> str:
        if isinstance(action, argparse._SubParsersAction):
            return "".join(self._format_action(sub) for sub in action._get_subactions())
        return super()._format_action(action)

    def _split_lines(self, text: str, width: int) -> list[str]:
        return wrap(text, width)


def recipe_default(key: str, fallback: Any = None) -> str:
    """How the per-model default of recipe ``key`` (``"lr"``, ``"hidden"``)
    reads in help: ``"default per model: 0.01; gat 0.005"``; the GNNs' (an
    embedding model's, LightGCN's, is in the docs: a help line each).

    Args:
        key (str): A key of :data:`~pyg_dist.cli.job.RECIPES`' recipes.
        fallback (optional): The value of a model without the key.
            (default: :obj:`None`)
    """
    base = RECIPES["gcn"].get(key, fallback)
    others: dict[Any, list[str]] = {}
    for name, recipe in RECIPES.items():
        if name in EMBEDDING_MODELS:
            continue
        value = recipe.get(key, fallback)
        if value != base:
            others.setdefault(value, []).append(name)
    parts = [_value(base)] + [f"{_models(names)} {_value(value)}"
                              for value, names in others.items()]
    if not others:
        return f"default: {parts[0]}"
    return "per model: " + "; ".join(parts)


def _models(names: list[str]) -> str:
    """``names`` in words: the deep models and the heterogeneous ones by
    their kind when all of a kind are there."""
    words = []
    for kind, members in (("deep", DEEP_MODELS), ("hetero", HETERO_MODELS)):
        if set(members) <= set(names):
            names = [n for n in names if n not in members]
            words.append(kind)
    if words:
        names = names + words
    return ", ".join(names)


def _value(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def asked_strategy(argv: Sequence[str] | None, names: Sequence[str]) -> str | None:
    """The strategy of ``train --strategy NAME --help`` in ``argv``, if the
    command line asks for help and names one of ``names``; its options are
    the ones the help shows.

    Args:
        argv (Sequence[str], optional): The arguments (without the program).
        names (Sequence[str]): The strategies' names.
    """
    args = list(argv or [])
    if not {"-h", "--help"} & set(args):
        return None
    for i, arg in enumerate(args):
        value = (args[i + 1] if arg == "--strategy" and i + 1 < len(args)
                 else arg.partition("=")[2] if arg.startswith("--strategy=") else None)
        if value in names:
            return value
    return None
