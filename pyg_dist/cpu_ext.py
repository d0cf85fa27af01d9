"""Loader of pyg_dist's C++ CPU kernels (the sources in ``csrc/``): how
:data:`pyg_dist.typing.WITH_CPU_EXT` is found, and what
:mod:`pyg_dist.ops.cpu` calls through.

The kernels are compiled on first use by :func:`torch.utils.cpp_extension.load`
(a C++ compiler and ``pip install ninja`` are needed, nothing else), cached
between runs under ``$TORCH_EXTENSIONS_DIR`` (default
``~/.cache/torch_extensions``), and registered as ``torch.ops.pyg_dist.*``.
``cpp_extension`` builds under a lock file, so ranks that start together build
the extension once; a lock left by a build that was killed midway is removed
after :data:`STALE_LOCK_SECONDS` (with a warning) instead of blocking every
later process. Without a compiler or ``ninja``, after a failed build, or
with ``PYG_DIST_DISABLE_CPU_EXT=1``, :func:`is_available` is :obj:`False`, one
warning says why, and :func:`pyg_dist.ops.spmm` runs its PyTorch kernels.
``PYG_DIST_VERBOSE_BUILD=1`` shows the compiler's command lines and output.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from pyg_dist import env

__all__ = ["is_available", "unavailable_reason", "source_dir", "DISABLE_ENV",
           "STALE_LOCK_SECONDS"]

#: Set to ``1`` to never build nor load the extension (e.g. for baselines).
DISABLE_ENV = env.DISABLE_CPU_EXT

#: Seconds after which a build lock is taken to be left by a killed build (a
#: build takes 1-3 minutes on 2 cores).
STALE_LOCK_SECONDS = 15 * 60
_SOURCES = ("spmm.cpp", "gat.cpp", "cpu/spmm_kernel.cpp", "cpu/gat_kernel.cpp")
# Included by the sources: part of the build key, so that editing one rebuilds.
_HEADERS = ("cpu/common.h",)
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _LoadResult:
    available: bool
    reason: str = ""


def source_dir() -> Path | None:
    """The folder holding the C++ sources: ``pyg_dist/csrc`` in an installed
    wheel, the repository's ``csrc/`` in a source checkout, else :obj:`None`."""
    package = Path(__file__).resolve().parent
    for candidate in (package / "csrc", package.parent / "csrc"):
        if all((candidate / name).is_file() for name in _SOURCES + _HEADERS):
            return candidate
    return None


def is_available() -> bool:
    """Whether the C++ kernels are loaded; builds them on the first call."""
    return _load().available


def unavailable_reason() -> str:
    """Why the C++ kernels are not available (empty when they are)."""
    return _load().reason


@functools.cache
def _load() -> _LoadResult:
    """Builds (or finds in the cache) and loads the extension, once per process;
    warns once when it cannot."""
    reason = _why_not_buildable()
    if not reason:
        try:
            _build_and_load()
        except Exception as exc:  # compiler errors, missing headers, a bad cache, ...
            reason = f"the build failed: {_last_lines(str(exc))}"
    if reason:
        warnings.warn(
            f"pyg_dist's C++ CPU kernels are not used ({reason}); 'spmm' falls back to the "
            f"slower PyTorch kernels",
            RuntimeWarning,
            stacklevel=2,
        )
        return _LoadResult(False, reason)
    return _LoadResult(True)


def _why_not_buildable() -> str:
    """A reason not to try the build, or an empty string."""
    disabled = env.cpu_ext_disabled()
    if disabled is not None:
        return f"disabled by {DISABLE_ENV}={disabled}"
    if source_dir() is None:
        return "its C++ sources (csrc/) are not part of this installation"
    from torch.utils import cpp_extension

    if not cpp_extension.is_ninja_available():
        return "ninja is not installed (pip install ninja)"
    compiler = _compiler()
    if shutil.which(compiler) is None:
        return f"no C++ compiler '{compiler}' on PATH (install one, or set CXX)"
    return ""


def _build_and_load() -> None:
    from torch.utils import cpp_extension

    root = source_dir()
    assert root is not None, "_build_and_load called without C++ sources"
    capability = torch.backends.cpu.get_cpu_capability()
    sources = [root / source for source in _SOURCES]
    flags = _compiler_flags(capability)
    key = _build_key(sources + [root / header for header in _HEADERS], flags + _linker_flags())
    name = f"pyg_dist_cpu_{capability.lower()}_{key}"
    _log.info("loading pyg_dist's C++ CPU kernels %s (the first build takes a minute)", name)
    _wait_for_build(name)
    cpp_extension.load(
        name=name,
        sources=[str(source) for source in sources],
        extra_cflags=flags,
        extra_ldflags=_linker_flags(),
        is_python_module=False,
        verbose=env.verbose_build(),
    )


def _wait_for_build(name: str) -> None:
    """Waits while another process builds extension ``name``, and removes the
    lock that a build killed midway left behind (``cpp_extension`` would wait
    for it forever): a lock older than :data:`STALE_LOCK_SECONDS` is stale."""
    from torch.utils import cpp_extension

    find = getattr(cpp_extension, "_get_build_directory", None)
    if find is None:  # another torch: let cpp_extension handle its lock
        return
    lock = Path(find(name, False)) / "lock"
    while lock.exists():
        try:
            age = time.time() - lock.stat().st_mtime
        except FileNotFoundError:  # the build just finished
            return
        if age > STALE_LOCK_SECONDS:
            warnings.warn(f"removing the lock of a C++ build that stopped {age / 60:.0f} minutes "
                          f"ago ({lock}); building pyg_dist's kernels again",
                          RuntimeWarning, stacklevel=2)
            lock.unlink(missing_ok=True)
            return
        time.sleep(1.0)


def _compiler_flags(capability: str) -> list[str]:
    """Optimisation flags for the vector unit that torch itself dispatches to
    (the capability is part of the extension's name, so a cache shared by
    machines with different CPUs keeps one build per capability), and OpenMP,
    without which ``at::parallel_for`` compiles to a serial loop (on Linux and
    Windows; elsewhere the kernels run on one thread)."""
    vector = capability in ("AVX2", "AVX512")
    if sys.platform == "win32":
        return ["/O2", "/openmp"] + (["/arch:AVX2"] if vector else [])
    # -fno-trapping-math (clang's default): GCC otherwise keeps the selects of
    # the leaky ReLU and of the clamps in gat_kernel.cpp's exponential as
    # branches and does not vectorise those loops; the kernels never enable
    # floating-point traps. Measured (1 thread, 1M entries, 8 heads of 8
    # channels): GAT forward 161 ms without, 68-78 ms with; the source-side
    # backward pass 163 ms against 54-66 ms. SpMM (F = 64, same graph): 15-18
    # ms either way.
    flags = ["-O3", "-fno-trapping-math"]
    if sys.platform.startswith("linux"):
        flags.append("-fopenmp")
    if _is_gcc(_compiler()):
        # GCC's -O3 unroll-and-jam turns the max kernel's loop nest into a
        # scalar loop over pairs of entries: 2.2x slower (1M entries, F = 64).
        flags.append("-fno-loop-unroll-and-jam")
    return flags + (["-mavx2", "-mfma", "-mf16c"] if vector else [])


def _compiler() -> str:
    """The C++ compiler that ``cpp_extension`` runs."""
    return os.environ.get("CXX", "cl" if sys.platform == "win32" else "c++")


@functools.cache
def _is_gcc(compiler: str) -> bool:
    """Whether ``compiler`` is GCC (``c++`` may well be clang)."""
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                                 timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "clang" not in version.lower() and "Free Software Foundation" in version


def _linker_flags() -> list[str]:
    """OpenMP's runtime: the ``libgomp.so.1`` that torch has already loaded."""
    return ["-fopenmp"] if sys.platform.startswith("linux") else []


def _build_key(sources: list[Path], flags: list[str]) -> str:
    """A short hash of the sources (their paths and contents), the flags and
    the torch version: builds of different checkouts or torch installs that
    share a cache never overwrite each other. (The paths count: torch's build
    files name them, so two checkouts of equal sources sharing one name
    rebuilt each other's extension, a minute or more each time.)"""
    digest = hashlib.sha1(" ".join([torch.__version__, *flags]).encode())
    for source in sources:
        digest.update(str(source.resolve()).encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:10]


def _last_lines(text: str, count: int = 8) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:])
