"""The base of every option object: a frozen dataclass that checks its own
fields when it is made, with an error that names the fix, and reads and
writes itself as a dictionary of plain values (what ``pyg-dist train --config``
reads). Its fields made with :func:`option` are also command-line options:
their ``help`` metadata is the one description of each."""
from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import field
from typing import Any

from pyg_dist.halo import HaloPolicy, parse_policy

__all__ = ["option", "Options", "as_policy", "check_int", "check_choice", "check_policy",
           "is_number", "plain"]


def option(default: Any, help: str, *, type: Any = None, choices: tuple[str, ...] | None = None,
           metavar: str | None = None) -> Any:
    """A dataclass field that is also a command-line option: ``help`` is its
    one description, ``type`` converts the command line's text (:obj:`None`:
    the type of ``default``), ``choices`` the allowed values (the package's
    own constants).

    Args:
        default (Any): The field's default value.
        help (str): The field's one description, shown by ``--help``.
        type (Callable, optional): Converts the command line's text;
            :obj:`None` for the type of ``default``. (default: :obj:`None`)
        choices (tuple[str, ...], optional): The allowed values.
            (default: :obj:`None`)
        metavar (str, optional): The value's name in ``--help``; :obj:`None`
            for the field's name in upper case. (default: :obj:`None`)
    """
    return field(default=default, metadata={"help": help, "type": type, "choices": choices,
                                            "metavar": metavar})


class Options:
    """Base of the option objects: validation in ``check``, and a dictionary
    of plain values both ways. Before ``check`` runs, every field annotated
    with plain types only (``bool``, ``int``, ``float``, ``str``, ``None``)
    is checked to hold one of them (an ``int`` is a ``float`` too, a ``bool``
    is no ``int``)."""

    def __post_init__(self) -> None:
        _check_types(self)
        self.check()

    def check(self) -> None:
        """Raises :class:`ValueError`, naming the field and the fix, on a bad field."""

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values (policies as their spec strings)."""
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Any:
        """The object :meth:`to_dict` wrote; unknown keys are refused by name
        (``"name"`` is known to the classes that have one, the strategies)."""
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        if not isinstance(values, dict):
            raise ValueError(f"{cls.__name__} is read from a JSON object of its fields "
                             f"({', '.join(sorted(names))}), not {values!r}")
        known = names | ({"name"} if isinstance(getattr(cls, "name", None), str) else set())
        unknown = sorted(set(values) - known, key=str)
        if unknown:
            raise ValueError(f"{cls.__name__} has no field {', '.join(map(repr, unknown))}; "
                             f"its fields are {', '.join(sorted(names))}")
        return cls(**{k: v for k, v in values.items() if k in names})


#: The plain types a field may be annotated with, as an error names them.
_PLAIN = {bool: "True or False", int: "an integer", float: "a number", str: "a string",
          type(None): "None"}
_PLAIN_FIELDS: dict[type, list[tuple[str, tuple[type, ...]]]] = {}


def _plain_fields(cls: type) -> list[tuple[str, tuple[type, ...]]]:
    """``(name, types)`` of each field of ``cls`` annotated with plain types only."""
    if cls not in _PLAIN_FIELDS:
        hints = typing.get_type_hints(cls)
        kinds = {f.name: typing.get_args(hints[f.name]) or (hints[f.name],)
                 for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        _PLAIN_FIELDS[cls] = [(name, k) for name, k in kinds.items() if set(k) <= set(_PLAIN)]
    return _PLAIN_FIELDS[cls]


def _check_types(options: Options) -> None:
    """Raises naming the field when a plain-typed field holds another type
    (policies, paths, schedules and phases are read by the class's ``check``)."""
    for name, kinds in _plain_fields(type(options)):
        value = getattr(options, name)
        if isinstance(value, bool):
            fits = bool in kinds
        elif isinstance(value, int):
            fits = int in kinds or float in kinds
        else:
            fits = isinstance(value, tuple(k for k in kinds if k not in (bool, int)))
        if not fits:
            raise ValueError(f"{type(options).__name__}({name}={value!r}): {name} must be "
                             f"{' or '.join(_PLAIN[k] for k in kinds)}, not "
                             f"{type(value).__name__}")


def plain(value: Any) -> Any:
    """``value`` as JSON holds it: a policy as its spec, a path as a string."""
    if isinstance(value, HaloPolicy):
        return value.spec()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def check_int(cls: Any, name: str, value: Any, low: int, fix: str) -> None:
    """Raises unless ``value`` (field ``name`` of ``cls``) is an integer >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{cls.__name__}({name}={value!r}): {name} must be an integer "
                         f">= {low}; {fix}")


def check_choice(cls: Any, name: str, value: Any, choices: tuple[str, ...]) -> None:
    """Raises unless ``value`` (field ``name`` of ``cls``) is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{cls.__name__}({name}={value!r}): use one of {', '.join(choices)}")


def check_policy(cls: Any, name: str, value: Any) -> None:
    """A halo policy given as a :class:`~pyg_dist.halo.HaloPolicy` or its spec."""
    if value is None or isinstance(value, HaloPolicy):
        return
    if not isinstance(value, str):
        raise ValueError(f"{cls.__name__}({name}={value!r}): give a halo policy or its spec, "
                         f"e.g. 'exact', 'stale:4,compress=int8'")
    try:
        parse_policy(value)
    except ValueError as exc:
        raise ValueError(f"{cls.__name__}({name}={value!r}): {exc}") from None


def as_policy(value: HaloPolicy | str | None) -> HaloPolicy | None:
    """A policy from a policy or its spec (:obj:`None` stays).

    Args:
        value (HaloPolicy or str, optional): A policy or its spec.
    """
    return parse_policy(value) if isinstance(value, str) else value


def is_number(value: Any) -> bool:
    """Whether ``value`` is an int or a float (a bool is neither)."""
    return not isinstance(value, bool) and isinstance(value, (int, float))
