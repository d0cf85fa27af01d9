"""The one home of optional dependencies.

Each ``WITH_*`` flag is found by trying the feature, not by reading version
strings. A package that is installed but broken gives a warning, never a crash;
asking for a feature whose package is missing raises an error naming the
package to install (:func:`require`). ``WITH_CPU_EXT`` is resolved on first
access, since it may compile the C++ kernels (see :mod:`pyg_dist.runtime.cpu_ext`);
importing pyg_dist never does.
"""
from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

from pyg_dist.runtime import cpu_ext

__all__ = [
    "WITH_METIS",
    "WITH_TRITON",
    "WITH_TORCH_SPARSE",
    "WITH_CPU_EXT",
    "TRITON_INTERPRET",
    "require",
]


def _try_import(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
    except Exception as exc:  # installed, but broken (ABI mismatch, missing .so, ...)
        warnings.warn(
            f"'{name}' is installed but failed to import ({exc!r}); pyg_dist continues without it",
            stacklevel=2,
        )
        return None


pymetis = _try_import("pymetis")
WITH_METIS: bool = pymetis is not None and hasattr(pymetis, "part_graph")

triton = _try_import("triton")
WITH_TRITON: bool = triton is not None and hasattr(triton, "jit")
#: Triton kernels run on the CPU through Triton's interpreter (slow; tests only).
TRITON_INTERPRET: bool = os.environ.get("TRITON_INTERPRET", "0") == "1"

torch_sparse = _try_import("torch_sparse")
WITH_TORCH_SPARSE: bool = torch_sparse is not None and hasattr(torch_sparse, "SparseTensor")

#: Whether pyg_dist's C++ CPU kernels are built and loaded (resolved lazily).
WITH_CPU_EXT: bool


def __getattr__(name: str) -> bool:
    if name == "WITH_CPU_EXT":
        return cpu_ext.is_available()
    raise AttributeError(f"module '{__name__}' has no attribute '{name}'")


_INSTALL_HINT = {
    "pymetis": "pip install pymetis",
    "triton": "pip install triton (kernels run on CUDA, or on the CPU with TRITON_INTERPRET=1)",
    "torch_sparse": "pip install --no-build-isolation torch_scatter torch_sparse",
    "matplotlib": "pip install matplotlib",
}


def require(name: str, feature: str) -> ModuleType:
    """Returns the optional module ``name``, or raises an :class:`ImportError`
    that names ``feature`` and the command that installs the package."""
    module = _try_import(name)
    if module is None:
        hint = _INSTALL_HINT.get(name, f"pip install {name}")
        raise ImportError(f"{feature} needs the optional package '{name}'; install it with: {hint}")
    return module
