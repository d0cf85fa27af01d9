"""The parts of the build that pyproject.toml cannot say:

* the C++ sources of the CPU kernels (the top-level ``csrc/``) ship inside the
  package as ``pyg_dist/csrc``, so that an installation without prebuilt
  kernels can compile them on first use;
* where torch is importable at build time (``python -m build --wheel
  --no-isolation``, see scripts/build_wheel.sh), the wheel is a binary one:
  the kernels are compiled now, once per :data:`pyg_dist.runtime.cpu_build.VARIANTS`
  entry, with the flags that :mod:`pyg_dist.runtime.cpu_build` defines, and the wheel
  requires the torch minor release it was compiled against. Elsewhere (an
  isolated build, an sdist, an editable install, or
  ``PYG_DIST_BUILD_CPU_KERNELS=0``) the wheel is pure and asks for
  :data:`TORCH_RANGE`.
"""
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
CSRC = ROOT / "csrc"
#: Set to ``0`` for a pure wheel even where torch is importable.
BUILD_ENV = "PYG_DIST_BUILD_CPU_KERNELS"
#: The torch of a pure wheel: a range that the CPU wheel on disk satisfies.
#: Install torch first (see README), so that pip never resolves a multi-GB
#: CUDA build on its own.
TORCH_RANGE = "torch>=2.4"
DEPENDENCIES = [
    "torch_geometric>=2.6",
    "pymetis>=2023.1",
    "tqdm",
    "numpy",
    "scipy",        # reading Planetoid's raw files
    "cloudpickle",  # pyg_dist.launch ships functions from notebooks/__main__ by value
]
# Commands that build no binary wheel, whatever is installed.
PURE_COMMANDS = ("sdist", "editable_wheel", "develop")


def load_cpu_build():
    """``pyg_dist/runtime/cpu_build.py`` loaded by its path: the package itself needs torch."""
    spec = importlib.util.spec_from_file_location("_pyg_dist_cpu_build",
                                                  ROOT / "pyg_dist" / "runtime" / "cpu_build.py")
    assert spec is not None and spec.loader is not None, "pyg_dist/runtime/cpu_build.py is missing"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def binary_build() -> bool:
    """Whether this build compiles the C++ kernels into the wheel."""
    if os.environ.get(BUILD_ENV, "").strip() == "0":
        return False
    if any(command in sys.argv[1:] for command in PURE_COMMANDS):
        return False
    try:
        import torch.utils.cpp_extension  # noqa: F401
    except Exception:  # not installed (an isolated build), or broken
        return False
    return True


class BuildPyWithCsrc(build_py):
    """``build_py`` that also copies ``csrc/`` to ``pyg_dist/csrc`` (an editable
    install reads ``csrc/`` where it is)."""

    def run(self) -> None:
        super().run()
        if not getattr(self, "editable_mode", False):
            target = Path(self.build_lib) / "pyg_dist" / "csrc"
            shutil.copytree(CSRC, target, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("*.o", "*.so", "build"))


def pure_setup() -> None:
    setup(install_requires=[TORCH_RANGE, *DEPENDENCIES],
          cmdclass={"build_py": BuildPyWithCsrc})


def binary_setup() -> None:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    cpu_build = load_cpu_build()

    class BuildCpuKernels(BuildExtension):
        """Compiles each variant in its own temporary folder (the variants
        compile the same sources with different flags), and writes
        :data:`~pyg_dist.runtime.cpu_build.PREBUILT_INFO` next to the libraries."""

        def build_extension(self, ext) -> None:
            base = self.build_temp
            self.build_temp = os.path.join(base, ext.name)
            try:
                super().build_extension(ext)
            finally:
                self.build_temp = base

        def get_export_symbols(self, ext) -> list[str]:
            return []  # libraries of torch ops, not Python modules: no PyInit_*

        def run(self) -> None:
            super().run()
            info = {"torch": torch.__version__,
                    "libraries": {name: {"capability": cpu_build.VARIANTS[name],
                                         "flags": flags[name]} for name in variants}}
            folder = Path(self.get_ext_fullpath(cpu_build.library_name(variants[0]))).parent
            (folder / cpu_build.PREBUILT_INFO).write_text(json.dumps(info, indent=1) + "\n")

    variants = cpu_build.wheel_variants()
    flags = {name: cpu_build.wheel_flags(cpu_build.VARIANTS[name]) for name in variants}
    extensions = [
        CppExtension(cpu_build.library_name(name),
                     sources=[f"csrc/{source}" for source in cpu_build.SOURCES],
                     extra_compile_args=flags[name],
                     extra_link_args=cpu_build.linker_flags())
        for name in variants
    ]
    minor = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    setup(install_requires=[f"torch=={minor}.*", *DEPENDENCIES],
          ext_modules=extensions,
          cmdclass={"build_py": BuildPyWithCsrc,
                    "build_ext": BuildCpuKernels.with_options(use_ninja=True)})


if binary_build():
    binary_setup()
else:
    pure_setup()
