"""Command-line options built from the fields of option dataclasses
(:func:`pyg_dist.config.option`), so every option is defined once: its name,
default, choices and help come from the field."""
from __future__ import annotations

import argparse
import dataclasses
from typing import Any

__all__ = ["add_fields", "given", "flag_of"]


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
