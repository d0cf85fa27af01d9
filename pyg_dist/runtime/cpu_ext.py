"""Loader of pyg_dist's C++ CPU kernels (the sources in ``csrc/``): how
:data:`pyg_dist.typing.WITH_CPU_EXT` is found, and what
:mod:`pyg_dist.ops.cpu` calls through. The kernels register as
``torch.ops.pyg_dist.*`` and come from the first of (:func:`kernels_origin`
says which):

1. **prebuilt**: the library that a binary wheel ships
   (``pyg_dist/_cpu_kernels_<variant>*.so``, built by
   ``scripts/build_wheel.sh``), the variant of
   :func:`torch.backends.cpu.get_cpu_capability` (AVX2 or baseline, see
   :mod:`pyg_dist.runtime.cpu_build`), loaded with :func:`torch.ops.load_library`.
   A library built for another torch release is not loaded, and one that
   fails to load warns with the cause and the fix (reinstall the wheel built
   for your torch); either way the kernels are compiled as in 2.
2. **cached** or **compiled**: the sources (``pyg_dist/csrc`` of an
   installation, ``csrc/`` of a checkout) compiled on first use by
   :func:`torch.utils.cpp_extension.load` (a C++ compiler and ``pip install
   ninja`` are needed, nothing else), which says so once on stderr before it
   starts (one line for all ranks that start together) and how long it took
   once done, and cached between runs under ``$TORCH_EXTENSIONS_DIR``
   (default ``~/.cache/torch_extensions``), one build per Python environment
   (the torch installation it compiles against, :func:`environment`), so a
   clone used from two environments (a notebook's kernel and a shell's venv)
   compiles once in each and never again when switching back.
   ``cpp_extension`` builds under a lock file, so ranks that start together
   build the extension once; a lock left by a
   build that was killed midway is removed after :data:`STALE_LOCK_SECONDS`
   (with a warning) instead of blocking every later process.
3. **unavailable**: without a compiler or ``ninja``, after a failed build, or
   with ``PYG_DIST_DISABLE_CPU_EXT=1``, :func:`is_available` is :obj:`False`,
   one warning says why, and :func:`pyg_dist.ops.spmm` runs its PyTorch
   kernels.

``PYG_DIST_VERBOSE_BUILD=1`` shows the compiler's command lines and output.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.machinery
import json
import logging
import os
import shutil
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from pyg_dist.runtime import cpu_build, env

__all__ = ["is_available", "unavailable_reason", "kernels_origin", "kernels_library",
           "source_dir", "environment", "DISABLE_ENV", "STALE_LOCK_SECONDS", "COMPILE_MESSAGE"]

#: The package folder: prebuilt libraries of a binary wheel and its copy of the
#: C++ sources lie there (the repository's ``csrc/`` beside it in a checkout).
PACKAGE = Path(__file__).resolve().parents[1]
#: Set to ``1`` to never build nor load the extension (e.g. for baselines).
DISABLE_ENV = env.DISABLE_CPU_EXT

#: Seconds after which a build lock is taken to be left by a killed build (a
#: build takes 1-3 minutes on 2 cores).
STALE_LOCK_SECONDS = 15 * 60
#: Said on stderr before a compile on first use starts.
COMPILE_MESSAGE = "compiling pyg_dist's CPU kernels once, about a minute"
# In the build folder while a process compiles: the others do not repeat the message.
_ANNOUNCED = "announced"
_log = logging.getLogger(__name__)

Origin = Literal["prebuilt", "cached", "compiled", "unavailable"]


@dataclass(frozen=True)
class _LoadResult:
    origin: Origin
    reason: str = ""
    library: Path | None = None

    @property
    def available(self) -> bool:
        return self.origin != "unavailable"


@dataclass(frozen=True)
class _Prebuilt:
    """The libraries of a binary wheel: this CPU's (:obj:`None` when the wheel
    has none for it), and the torch they were built against."""

    library: Path | None
    torch: str


def source_dir() -> Path | None:
    """The folder holding the C++ sources: ``pyg_dist/csrc`` in an installed
    wheel, the repository's ``csrc/`` in a source checkout, else :obj:`None`."""
    for candidate in (PACKAGE / "csrc", PACKAGE.parent / "csrc"):
        if all((candidate / name).is_file() for name in cpu_build.SOURCES + cpu_build.HEADERS):
            return candidate
    return None


def environment() -> str:
    """The Python environment a compile on first use builds for: the folder of
    the torch installation whose headers and libraries the build uses (two
    virtual environments with their own torch differ; environments that share
    one torch, e.g. through ``--system-site-packages``, share the build). The
    path as torch sees it, symbolic links unresolved: torch's build names its
    headers by that path, so one environment reached through a link and
    directly would otherwise share a name and rebuild each other's kernels
    at every switch."""
    return os.path.abspath(os.path.dirname(torch.__file__))


def is_available() -> bool:
    """Whether the C++ kernels are loaded; loads (or builds) them on the first call."""
    return _load().available


def unavailable_reason() -> str:
    """Why the C++ kernels are not available (empty when they are)."""
    return _load().reason


def kernels_origin() -> Origin:
    """Where the loaded C++ kernels come from: ``"prebuilt"`` (the binary
    wheel's library), ``"cached"`` (an earlier compile on first use),
    ``"compiled"`` (compiled by this process), or ``"unavailable"``."""
    return _load().origin


def kernels_library() -> Path | None:
    """The file of the loaded C++ kernels (:obj:`None` when unavailable)."""
    return _load().library


@functools.cache
def _load() -> _LoadResult:
    """Loads the prebuilt library, else builds (or finds in the cache) and
    loads the extension, once per process; warns once when it cannot."""
    reason = _disabled_reason()
    prebuilt = None if reason else _find_prebuilt()
    if prebuilt is not None:
        problem = _load_prebuilt(prebuilt)
        if not problem:
            return _LoadResult("prebuilt", library=prebuilt.library)
        warnings.warn(
            f"pyg_dist's prebuilt C++ CPU kernels are not used ({problem}); compiling them "
            f"from source instead. Reinstall the pyg-dist wheel built for your torch "
            f"{torch.__version__}, or build one with scripts/build_wheel.sh",
            RuntimeWarning,
            stacklevel=2,
        )
    reason = reason or _why_not_buildable()
    if not reason:
        try:
            return _build_and_load()
        except Exception as exc:  # compiler errors, missing headers, a bad cache, ...
            reason = f"the build failed: {_last_lines(str(exc))}"
    warnings.warn(
        f"pyg_dist's C++ CPU kernels are not used ({reason}); 'spmm' falls back to the "
        f"slower PyTorch kernels",
        RuntimeWarning,
        stacklevel=2,
    )
    return _LoadResult("unavailable", reason)


def _disabled_reason() -> str:
    disabled = env.cpu_ext_disabled()
    return f"disabled by {DISABLE_ENV}={disabled}" if disabled is not None else ""


def _find_prebuilt() -> _Prebuilt | None:
    """The libraries of a binary wheel, or :obj:`None` in any other installation."""
    info = PACKAGE / cpu_build.PREBUILT_INFO
    if not info.is_file():
        return None
    try:
        built_for = str(json.loads(info.read_text())["torch"])
    except (OSError, ValueError, KeyError, TypeError):
        built_for = "unknown"
    variant = cpu_build.variant(torch.backends.cpu.get_cpu_capability())
    stem = cpu_build.library_name(variant).rpartition(".")[2]
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if (PACKAGE / f"{stem}{suffix}").is_file():
            return _Prebuilt(PACKAGE / f"{stem}{suffix}", built_for)
    return _Prebuilt(None, built_for)


def _load_prebuilt(prebuilt: _Prebuilt) -> str:
    """Loads the wheel's library for this CPU; the reason it did not, or an empty string."""
    if prebuilt.library is None:
        capability = torch.backends.cpu.get_cpu_capability()
        return f"the wheel has no library for this CPU ({capability})"
    if _minor(prebuilt.torch) != _minor(torch.__version__):
        return f"they were built for torch {prebuilt.torch}"
    try:
        torch.ops.load_library(str(prebuilt.library))
    except Exception as exc:  # undefined symbols of another torch build, a damaged file, ...
        cause = f"{exc} ({exc.__cause__})" if exc.__cause__ is not None else str(exc)
        return f"loading {prebuilt.library.name} failed: {_last_lines(cause)}"
    return ""


def _minor(version: str) -> str:
    """``"2.13"`` of ``"2.13.0+cpu"``."""
    return ".".join(version.split("+")[0].split(".")[:2])


def _why_not_buildable() -> str:
    """A reason not to try the build, or an empty string."""
    disabled = _disabled_reason()
    if disabled:
        return disabled
    if source_dir() is None:
        return "its C++ sources (csrc/) are not part of this installation"
    from torch.utils import cpp_extension

    with environment_ninja():
        if not cpp_extension.is_ninja_available():
            return "ninja is not installed (pip install ninja)"
    compiler = cpu_build.compiler()
    if shutil.which(compiler) is None:
        return f"no C++ compiler '{compiler}' on PATH (install one, or set CXX)"
    return ""


def _build_and_load() -> _LoadResult:
    from torch.utils import cpp_extension

    root = source_dir()
    assert root is not None, "_build_and_load called without C++ sources"
    capability = torch.backends.cpu.get_cpu_capability()
    sources = [root / source for source in cpu_build.SOURCES]
    flags = cpu_build.compiler_flags(capability)
    headers = [root / header for header in cpu_build.HEADERS]
    key = _build_key(sources + headers, flags + cpu_build.linker_flags())
    name = f"pyg_dist_cpu_{capability.lower()}_{key}"
    _log.info("loading pyg_dist's C++ CPU kernels %s (the first build takes a minute)", name)
    _wait_for_build(name)
    folder = _build_directory(name)
    library = None if folder is None else folder / f"{name}{_library_suffix()}"
    before = _modified(library)
    cached = before is not None
    announced = None if cached else _announce_compile(folder)
    start = time.perf_counter()
    try:
        with environment_ninja():
            cpp_extension.load(
                name=name,
                sources=[str(source) for source in sources],
                extra_cflags=flags,
                extra_ldflags=cpu_build.linker_flags(),
                is_python_module=False,
                verbose=env.verbose_build(),
            )
    finally:
        if announced is not None:
            announced.unlink(missing_ok=True)
    seconds = time.perf_counter() - start
    after = _modified(library)
    compiled = not cached or after != before  # or ninja found the cached build stale
    # said by the process that announced the compile, or (a stale build, which
    # every rank that waited for sees rewritten) by the first to claim it
    if announced is not None or (cached and compiled and _claim(folder, f"rebuilt-{after}")):
        print(f"compiled pyg_dist's CPU kernels in {seconds:.1f} s (kept in {folder} for "
              f"this environment)", file=sys.stderr, flush=True)
    return _LoadResult("compiled" if compiled else "cached", library=library)


@contextlib.contextmanager
def environment_ninja() -> Iterator[None]:
    """Within it, ``ninja`` on ``PATH`` is this Python environment's (the
    ``ninja`` package's, which the ``cpu-ext`` extra installs) where it has
    one: every process of the environment then builds with one ninja,
    whatever its own ``PATH``. (Two ninja versions sharing a build folder
    each read the other's log as foreign and rebuilt the kernels from
    scratch, a minute or more at every switch.)"""
    try:
        import ninja
    except ImportError:
        yield
        return
    folder = getattr(ninja, "BIN_DIR", None)
    before = os.environ.get("PATH")
    if folder is not None:
        os.environ["PATH"] = os.pathsep.join([folder, *([before] if before else [])])
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = before


def _claim(folder: Path | None, name: str) -> bool:
    """Whether this process is the first to create file ``name`` in ``folder``."""
    if folder is None:
        return True
    try:
        os.close(os.open(folder / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _modified(library: Path | None) -> int | None:
    """When ``library`` was last written (ns), or :obj:`None` when it is not there."""
    try:
        return None if library is None else library.stat().st_mtime_ns
    except FileNotFoundError:
        return None


def _build_directory(name: str) -> Path | None:
    """Where ``cpp_extension`` builds extension ``name`` (it creates the
    folder), or :obj:`None` with a torch that does not say."""
    from torch.utils import cpp_extension

    find = getattr(cpp_extension, "_get_build_directory", None)
    return None if find is None else Path(find(name, False))


def _library_suffix() -> str:
    from torch.utils import cpp_extension

    return str(getattr(cpp_extension, "LIB_EXT", ".so"))


def _announce_compile(folder: Path | None) -> Path | None:
    """Says :data:`COMPILE_MESSAGE` on stderr, unless another process that
    compiles into ``folder`` has (ranks that start together compile once):
    returns the marker file to remove once the compile is done, if any. A
    marker older than :data:`STALE_LOCK_SECONDS` was left by a killed compile."""
    if folder is None:
        print(COMPILE_MESSAGE, file=sys.stderr, flush=True)
        return None
    marker = folder / _ANNOUNCED
    for _ in range(2):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            try:
                age = time.time() - marker.stat().st_mtime
            except FileNotFoundError:  # that compile just finished
                return None
            if age <= STALE_LOCK_SECONDS:
                return None
            marker.unlink(missing_ok=True)
            continue
        print(COMPILE_MESSAGE, file=sys.stderr, flush=True)
        return marker
    return None


def _wait_for_build(name: str) -> None:
    """Waits while another process builds extension ``name``, and removes the
    lock that a build killed midway left behind (``cpp_extension`` would wait
    for it forever): a lock older than :data:`STALE_LOCK_SECONDS` is stale."""
    folder = _build_directory(name)
    if folder is None:  # another torch: let cpp_extension handle its lock
        return
    lock = folder / "lock"
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


def _build_key(sources: list[Path], flags: list[str]) -> str:
    """A short hash of the sources (their paths and contents), the flags, the
    torch version and the environment (:func:`environment`): builds of
    different checkouts or torch installations that share a cache never
    overwrite each other. (The paths count: torch's build files name them and
    torch's headers, so two checkouts of equal sources, or one checkout used
    from two virtual environments, sharing one name rebuilt each other's
    extension, a minute or more at every switch.)"""
    digest = hashlib.sha1(" ".join([torch.__version__, environment(), *flags]).encode())
    for source in sources:
        digest.update(str(source.resolve()).encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:10]


def _last_lines(text: str, count: int = 8) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:])
