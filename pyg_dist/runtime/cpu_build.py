"""How pyg_dist's C++ CPU kernels are compiled: their sources, the compiler
and linker flags, and the libraries a binary wheel ships. One source of truth
for both builds: ``setup.py`` compiles the wheel's libraries with it (loading
this file by path, so it imports nothing but the standard library), and
:mod:`pyg_dist.runtime.cpu_ext` compiles on first use with it.

A wheel ships one library per :data:`VARIANTS` entry, each compiled with the
flags of a CPU capability as :func:`torch.backends.cpu.get_cpu_capability`
names it; :func:`variant` picks the one a machine loads, so the wheel runs on
any x86-64 CPU and uses AVX2 where torch does.
"""
from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys

__all__ = ["SOURCES", "HEADERS", "VARIANTS", "VECTOR_CAPABILITIES", "PREBUILT_INFO",
           "compiler", "compiler_flags", "wheel_flags", "linker_flags", "variant", "library_name",
           "wheel_variants"]

#: The C++ sources, relative to ``csrc/``.
SOURCES = ("schemas.cpp", "cpu/spmm_kernel.cpp", "cpu/gat_kernel.cpp")
#: Included by the sources: part of a compile-on-first-use build's key, so that
#: editing one rebuilds.
HEADERS = ("cpu/common.h",)
#: The capabilities whose kernels are compiled with AVX2, FMA and F16C.
VECTOR_CAPABILITIES = ("AVX2", "AVX512")
#: The libraries of a binary wheel: variant -> the capability whose flags build it.
VARIANTS = {"default": "DEFAULT", "avx2": "AVX2"}
#: File next to a wheel's libraries naming the torch they were built against.
PREBUILT_INFO = "_cpu_kernels.json"


def variant(capability: str) -> str:
    """The :data:`VARIANTS` entry that a CPU of ``capability`` loads."""
    return "avx2" if capability in VECTOR_CAPABILITIES else "default"


def library_name(name: str) -> str:
    """The module name (``pyg_dist._cpu_kernels_<variant>``) of a wheel's library."""
    return f"pyg_dist._cpu_kernels_{name}"


def wheel_variants() -> list[str]:
    """The variants a wheel built on this machine ships: AVX2 only on x86-64."""
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    return [name for name in VARIANTS if x86 or name == "default"]


def compiler_flags(capability: str) -> list[str]:
    """Optimisation flags for the vector unit that torch itself dispatches to
    (a compile-on-first-use build puts the capability in its name, so a cache
    shared by machines with different CPUs keeps one build per capability),
    and OpenMP, without which ``at::parallel_for`` compiles to a serial loop
    (on Linux and Windows; elsewhere the kernels run on one thread)."""
    vector = capability in VECTOR_CAPABILITIES
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
    if _is_gcc(compiler()):
        # GCC's -O3 unroll-and-jam turns the max kernel's loop nest into a
        # scalar loop over pairs of entries: 2.2x slower (1M entries, F = 64).
        flags.append("-fno-loop-unroll-and-jam")
    return flags + (["-mavx2", "-mfma", "-mf16c"] if vector else [])


def wheel_flags(capability: str) -> list[str]:
    """:func:`compiler_flags` for a wheel's library, which setuptools compiles
    with Python's own CFLAGS too: ``-g0`` drops the debug information that
    those ask for (a compile on first use has none): 0.8-1.0 MB a library
    instead of 10.6-11.5 MB (GCC 12, torch 2.13)."""
    return compiler_flags(capability) + ([] if sys.platform == "win32" else ["-g0"])


def linker_flags() -> list[str]:
    """OpenMP's runtime: the ``libgomp.so.1`` that torch has already loaded."""
    return ["-fopenmp"] if sys.platform.startswith("linux") else []


def compiler() -> str:
    """The C++ compiler that ``torch.utils.cpp_extension`` runs."""
    return os.environ.get("CXX", "cl" if sys.platform == "win32" else "c++")


@functools.cache
def _is_gcc(command: str) -> bool:
    """Whether ``command`` is GCC (``c++`` may well be clang)."""
    try:
        version = subprocess.run([command, "--version"], capture_output=True, text=True,
                                 timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "clang" not in version.lower() and "Free Software Foundation" in version
