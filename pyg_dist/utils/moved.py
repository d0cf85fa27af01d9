"""The import paths of earlier releases. The package root used to hold every
module; each now lives in its room (``pyg_dist.distributed`` is
:mod:`pyg_dist.runtime.distributed`, ...). An old path still imports, for this
release, the very module of the new one, with a :class:`DeprecationWarning`
naming it."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

__all__ = ["MOVED", "install"]

#: Each module's path of earlier releases, and its path now.
MOVED = {
    "pyg_dist.distributed": "pyg_dist.runtime.distributed",
    "pyg_dist.peers": "pyg_dist.runtime.peers",
    "pyg_dist.env": "pyg_dist.runtime.env",
    "pyg_dist.hetero_data": "pyg_dist.data.hetero_data",
    "pyg_dist.hetero_view": "pyg_dist.data.hetero_view",
    "pyg_dist.hetero_models": "pyg_dist.models.hetero",
    "pyg_dist.hetero_task": "pyg_dist.strategies.task",
    "pyg_dist.dropout": "pyg_dist.utils.dropout",
    "pyg_dist.hashing": "pyg_dist.utils.hashing",
    "pyg_dist.preflight": "pyg_dist.cli.preflight",
    "pyg_dist.planner": "pyg_dist.strategies.planner",
    "pyg_dist.checkpoint": "pyg_dist.train.checkpoint",
    "pyg_dist.cpu_ext": "pyg_dist.ops.cpu_ext",
    "pyg_dist.cpu_build": "pyg_dist.ops.cpu_build",
}


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module of its new one."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"'{spec.name}' is now '{self.new}'; import it from there (the old "
                      f"path goes in the next release)", DeprecationWarning, stacklevel=2)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the new module ran when it was imported."""


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(name)
        return None if new is None else importlib.util.spec_from_loader(name, _Alias(new))


def install() -> None:
    """Lets the old paths import (once per interpreter)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
