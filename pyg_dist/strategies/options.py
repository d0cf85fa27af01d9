"""The base of every option object: a frozen dataclass that checks its own
fields when it is made, with an error that names the fix, and reads and
writes itself as a dictionary of plain values (what ``pyg-dist train --config``
reads). Its fields made with :func:`option` are also command-line options:
their ``help`` metadata is the one description of each."""
from __future__ import annotations

import dataclasses
import os
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
    of plain values both ways."""

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raises :class:`ValueError`, naming the field and the fix, on a bad field."""

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values (policies as their spec strings)."""
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Any:
        """The object :meth:`to_dict` wrote; unknown keys are refused by name."""
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(values) - names - {"name"})
        if unknown:
            raise ValueError(f"{cls.__name__} has no field {', '.join(map(repr, unknown))}; "
                             f"its fields are {', '.join(sorted(names))}")
        return cls(**{k: v for k, v in values.items() if k in names})


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
