"""Rank-side batteries of several test modules that start the same world share
one launch.

Starting a world of gloo ranks costs seconds: each rank is a fresh interpreter
that imports torch, PyG and pyg_dist before the process group forms. A test
module whose rank-side checks run as one battery declares it here instead of
calling :func:`pyg_dist.launch` itself::

    EXCHANGE = Battery(4, ranks_body, prepare)      # at module level

    @pytest.fixture(scope="module")
    def results(tmp_path_factory):
        return EXCHANGE.results(tmp_path_factory)   # (context, per-rank results)

``prepare(root)`` runs in the test process: it writes what the ranks read
under the folder ``root`` and returns ``(args, context)``: the ranks run
``body(*args)``, and ``context`` comes back with their results. The first
module that asks for its results launches, at once, the batteries of every
module of this session's selection that starts the same world (the same
number of ranks and communication timeout): the ranks run them one after the
other, each from torch's start-up seed. When that launch fails, each of its
batteries is launched again on its own, so that a broken battery fails its own
tests with its own rank's error, never another module's; when every one of
them then passes alone, they interact, and each fails naming them all.

A pytest-xdist worker collects every test but runs only those it is sent,
so there each battery launches alone (ranks start from a fork server that
has imported torch and PyG: a launch costs about a second per rank).
"""
from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

import pyg_dist

__all__ = ["Battery", "once", "select", "summary", "interacting"]

#: Every battery declared, by world: (world size, communication timeout).
_DECLARED: dict[tuple[int, float | None], list[Battery]] = {}
#: Every launch made: (world size, names of its batteries, seconds).
_LAUNCHES: list[tuple[int, list[str], float]] = []
#: Files of the session's selected tests (None: no selection made, every file).
_SELECTED: set[Path] | None = None


def select(files: Iterable[str | Path]) -> None:
    """Only batteries that ``files`` (those of the selected tests) use join a
    shared launch; tests/conftest.py calls this once the session's tests are
    collected."""
    global _SELECTED
    _SELECTED = {Path(f).resolve() for f in files}


def _selected(battery: Battery) -> bool:
    if _SELECTED is None:
        return True
    return any(f in _SELECTED for f in battery.users)


class Battery:
    """The rank-side checks of one test module on ``world_size`` ranks.

    Args:
        world_size (int): Number of ranks.
        body (Callable): What every rank runs, ``body(*args)``; its return
            values, in rank order, are the results.
        prepare (Callable): ``prepare(root) -> (args, context)``, run once in the
            test process before the launch.
        timeout (float): Seconds this battery may take on the ranks.
        comm_timeout (float, optional): Seconds a collective may wait (see
            :func:`pyg_dist.launch`); only batteries with the same one share a launch.
        name (str, optional): What error messages call it (default: the
            declaring module's name).
        users (Sequence[str], optional): The test files that read the results,
            relative to the declaring file's folder (default: the declaring file).
    """

    def __init__(self, world_size: int, body: Callable[..., Any],
                 prepare: Callable[[Any], tuple[tuple, Any]], timeout: float = 600.0,
                 comm_timeout: float | None = None, name: str | None = None,
                 users: Sequence[str] = ()) -> None:
        caller = sys._getframe(1).f_globals
        file = Path(caller["__file__"]).resolve()
        self.users = [file.parent / u for u in users] if users else [file]
        self.name = name or f"{caller['__name__']} on {world_size} ranks"
        self.world_size, self.body, self.prepare = world_size, body, prepare
        self.timeout, self.comm_timeout = timeout, comm_timeout
        self._done = False
        self._value: tuple[Any, list[Any]] | None = None
        self._error: BaseException | None = None
        self._args: tuple | None = None
        self._context: Any = None
        _DECLARED.setdefault((world_size, comm_timeout), []).append(self)

    def results(self, tmp_path_factory: Any) -> tuple[Any, list[Any]]:
        """``(context, per-rank results)``; raises this battery's own error
        (from ``prepare`` or from a rank) when it failed."""
        if not self._done:
            _run_world(self, tmp_path_factory)
        if self._error is not None:
            raise self._error
        assert self._value is not None, f"{self.name}: no results and no error"
        return self._value

    def release(self) -> None:
        """Drops the results (a module fixture's teardown: the ranks' outputs
        of a large graph need not stay for the rest of the session)."""
        if self._value is not None:
            self._value = None
            self._error = RuntimeError(f"{self.name}: results asked for after release()")

    def _prepare(self, tmp_path_factory: Any) -> bool:
        """Runs ``prepare``; False (the error kept) when it failed."""
        try:
            root = tmp_path_factory.mktemp(self.name.replace(" ", "_").replace(".", "_"))
            self._args, self._context = self.prepare(root)
        except Exception as exc:  # noqa: BLE001 - raised by this battery's results()
            self._fail(exc)
            return False
        return True

    def _fail(self, exc: BaseException) -> None:
        self._done, self._error = True, exc

    def _succeed(self, per_rank: list[Any]) -> None:
        self._done, self._value = True, (self._context, per_rank)
        self._args = None  # the ranks have what they read; free the test process


def once(make: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``make(arg)`` computed by its first call only; later calls get that
    value, whatever they pass (a folder, say), until ``.clear()``. For what a
    battery's ``prepare`` and the module's tests both use (whole graphs,
    references)."""
    value: list[Any] = []

    @functools.wraps(make)
    def get(arg: Any) -> Any:
        if not value:
            value.append(make(arg))
        return value[0]

    get.clear = value.clear  # type: ignore[attr-defined]
    return get


def _run_world(first: Battery, tmp_path_factory: Any) -> None:
    """Launches ``first`` with every other pending battery of its world."""
    world = (first.world_size, first.comm_timeout)
    batteries = [first] + [b for b in _DECLARED[world]
                           if b is not first and not b._done and _selected(b)]
    batteries = [b for b in batteries if b._prepare(tmp_path_factory)]
    if not batteries:
        return
    try:
        per_rank = _launch(batteries)
    except Exception as exc:  # noqa: BLE001 - see below
        if len(batteries) == 1:
            batteries[0]._fail(exc)
            return
        # Which battery broke the launch? Each runs again alone and keeps its own outcome.
        broken = []
        for battery in batteries:
            try:
                battery._succeed([r[0] for r in _launch([battery])])
            except Exception as own:  # noqa: BLE001 - raised by that battery's results()
                battery._fail(own)
                broken.append(battery)
        if not broken:  # each passes alone: together they interact, which is a failure too
            interaction = interacting(batteries, exc)
            for battery in batteries:
                battery._fail(interaction)
        return
    for i, battery in enumerate(batteries):
        battery._succeed([r[i] for r in per_rank])


def interacting(batteries: list[Battery], error: BaseException) -> RuntimeError:
    """The failure of batteries that fail when they share a launch and
    pass alone: one leaves module-level state (a cache, a process group, a
    registry of warnings) that another reads."""
    names = ", ".join(b.name for b in batteries)
    return RuntimeError(f"the batteries {names} fail when they share one launch and pass "
                        f"alone: they interact through module-level state one leaves and "
                        f"another reads; the shared launch failed with "
                        f"{type(error).__name__}: {error}")


def _launch(batteries: list[Battery]) -> list[list[Any]]:
    first = batteries[0]
    work = [(b.body, b._args) for b in batteries]
    start = time.perf_counter()
    try:
        return pyg_dist.launch(_run_batteries, first.world_size, args=(work,),
                               timeout=sum(b.timeout for b in batteries),
                               comm_timeout=first.comm_timeout)
    finally:
        _LAUNCHES.append((first.world_size, [b.name for b in batteries],
                          time.perf_counter() - start))


def summary() -> str:
    """One line: the launches made for how many batteries (empty if none)."""
    if not _LAUNCHES:
        return ""
    per_world: dict[int, list[int]] = {}
    for world_size, names, _ in _LAUNCHES:
        counts = per_world.setdefault(world_size, [0, 0])
        counts[0] += len(names)
        counts[1] += 1
    batteries = sum(b for b, _ in per_world.values())
    seconds = sum(s for _, _, s in _LAUNCHES)
    worlds = "; ".join(f"{w} rank{'s' if w > 1 else ''}: {b} in {n}"
                       for w, (b, n) in sorted(per_world.items()))
    return (f"rank batteries (tests/worlds.py): {batteries} in {len(_LAUNCHES)} launches, "
            f"{seconds:.0f} s ({worlds})")


def _run_batteries(work: list[tuple[Callable[..., Any], tuple]]) -> list[Any]:
    """On every rank: each battery in turn, each from the seed torch started with."""
    seed = torch.initial_seed()
    out = []
    for body, args in work:
        torch.manual_seed(seed)
        out.append(body(*args))
    return out
