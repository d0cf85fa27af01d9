"""Command-line options built from the fields of option dataclasses
(:func:`pyg_dist.config.option`), so every option is defined once: its name,
default, choices and help come from the field."""
from __future__ import annotations

import argparse
import dataclasses
import difflib
from typing import Any

__all__ = ["add_fields", "given", "flag_of", "Parser"]


class Parser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose commands (its subparsers)
    report an option they do not know themselves, with the closest one they
    do know: ``pyg-dist train: error: unrecognized arguments: --hiden 32;
    did you mean --hidden?`` and ``train``'s usage, where argparse names
    neither the command nor the option meant."""

    def parse_args(self, args: Any = None,  # type: ignore[override]
                   namespace: Any = None) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self._command(parsed)
            (command or self).error(unrecognized(command or self, extras))
        return parsed

    def _command(self, parsed: argparse.Namespace) -> argparse.ArgumentParser | None:
        """The subparser of the command ``parsed`` names, if any."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return action.choices.get(getattr(parsed, action.dest, None) or "")
        return None


def unrecognized(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """argparse's ``unrecognized arguments: ...``, with the option of
    ``parser`` closest to each unknown one (:func:`difflib.get_close_matches`)."""
    known = [flag for action in parser._actions if not action.dest.startswith("old.")
             for flag in action.option_strings if flag.startswith("--")]
    hints = []
    for extra in extras:
        flag = extra.split("=", 1)[0]
        if flag.startswith("--"):
            close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
            if close and close[0] not in hints:
                hints.append(close[0])
    message = f"unrecognized arguments: {' '.join(extras)}"
    return message + (f"; did you mean {' or '.join(hints)}?" if hints else "")


def flag_of(prefix: str, name: str, flags: dict[str, str] | None = None) -> str:
    """The option spelling of field ``name`` (``--`` + prefix + name, dashed),
    unless ``flags`` renames it."""
    if flags and name in flags:
        return flags[name]
    return "--" + f"{prefix}{name}".replace("_", "-")


def add_fields(group: Any, cls: type, section: str, prefix: str = "",
               flags: dict[str, str] | None = None, seen: set[str] | None = None,
               skip: set[str] | frozenset[str] = frozenset(),
               order: tuple[str, ...] = ()) -> None:
    """Adds one option per field of dataclass ``cls`` to ``group``, with
    ``dest`` ``"<section>.<field>"`` and no default: the namespace holds only
    what was given, so a config file and recipes can fill in the rest. A flag
    in ``seen`` is added once (fields that several classes share). The
    fields named in ``order`` come first, in that order (help lists them so)."""
    fields = dataclasses.fields(cls)
    first = [f for name in order for f in fields if f.name == name]
    for f in first + [f for f in fields if f not in first]:
        meta = f.metadata
        if "help" not in meta or f.name in skip:
            continue
        flag = flag_of(prefix, f.name, flags)
        if seen is not None:
            if flag in seen:
                continue
            seen.add(flag)
        kind = meta["type"] or type(f.default)
        default = f.default if f.default is not dataclasses.MISSING else None
        shown = "" if default in (None, False, "", ()) else f" (default: {default})"
        kwargs: dict[str, Any] = {"dest": f"{section}.{f.name}", "default": argparse.SUPPRESS,
                                  "help": meta["help"] + shown}
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs.update(type=kind, metavar=meta["metavar"] or f.name.upper())
            if meta["choices"]:
                kwargs["choices"] = meta["choices"]
        group.add_argument(flag, **kwargs)


def given(namespace: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """What was given on the command line, by section: ``{"graph": {"seed": 1}}``."""
    out: dict[str, dict[str, Any]] = {}
    for dest, value in vars(namespace).items():
        section, dot, name = dest.partition(".")
        if dot:
            out.setdefault(section, {})[name] = value
    return out
