"""Ships the C++ sources of the CPU kernels (the top-level ``csrc/``) inside
the package as ``pyg_dist/csrc``, so that an installed wheel can compile them
on first use. Everything else is configured in pyproject.toml."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

CSRC = Path(__file__).resolve().parent / "csrc"


class BuildPyWithCsrc(build_py):
    """``build_py`` that also copies ``csrc/`` to ``pyg_dist/csrc`` (an editable
    install reads ``csrc/`` where it is)."""

    def run(self) -> None:
        super().run()
        if not getattr(self, "editable_mode", False):
            target = Path(self.build_lib) / "pyg_dist" / "csrc"
            shutil.copytree(CSRC, target, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("*.o", "*.so", "build"))


setup(cmdclass={"build_py": BuildPyWithCsrc})
