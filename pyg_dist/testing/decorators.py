"""Skip markers for tests that need an optional feature, in one place (as
:mod:`torch_geometric.testing` has them). Each is found from the flags of
:mod:`pyg_dist.typing` or the probe that owns the feature, never re-derived in
a test file.

Each marker decorates a test function or class (``@withTriton``), marks a
whole module (``pytestmark = withTriton.mark``) and tells whether the
feature is here (``withTriton.enabled``)::

    from pyg_dist.testing import withCPUExtension

    @withCPUExtension
    def test_kernels():
        ...
"""
from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any

import torch

from pyg_dist import typing as pyg_dist_typing
from pyg_dist.ops import available_backends, cpu

__all__ = [
    "Requirement",
    "withTriton",
    "withTritonBackend",
    "withTritonCompiler",
    "withCPUExtension",
    "withMETIS",
    "withNamespaces",
    "withNetem",
    "onlyCUDA",
]


class Requirement:
    """A feature a test needs: ``reason()`` says why it is missing (``""``
    when it is here), asked once, when first needed."""

    def __init__(self, name: str, reason: Callable[[], str]) -> None:
        self.name = name
        self._reason = reason
        self._known: str | None = None

    def reason(self) -> str:
        if self._known is None:
            self._known = self._reason()
        return self._known

    @property
    def enabled(self) -> bool:
        """Whether the feature is here."""
        return not self.reason()

    @property
    def mark(self) -> Any:
        """A ``pytest.mark.skipif`` that skips where the feature is missing."""
        import pytest  # a test-time dependency only; pyg_dist runs without it

        return pytest.mark.skipif(not self.enabled, reason=f"{self.name}: {self.reason()}")

    def __call__(self, func: Any) -> Any:
        return self.mark(func)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, enabled={self.enabled})"


def _triton_reason() -> str:
    # Skipped only where Triton is not installed: an installed Triton that
    # fails to import (pyg_dist.typing warns and sets WITH_TRITON False) fails
    # the test instead of hiding the breakage.
    if pyg_dist_typing.WITH_TRITON or importlib.util.find_spec("triton") is not None:
        return ""
    return "Triton is not installed"


def _triton_backend_reason() -> str:
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if any("triton" in available_backends(d) for d in devices):
        return ""
    if not pyg_dist_typing.WITH_TRITON:
        return "Triton is not installed or does not import"
    return "the Triton backend does not run here (no CUDA device and TRITON_INTERPRET unset)"


def _ptxas_reason() -> str:
    if not pyg_dist_typing.WITH_TRITON:
        return "Triton is not installed or does not import"
    triton_file = str(getattr(pyg_dist_typing.triton, "__file__", ""))
    root = os.path.dirname(triton_file)
    if os.path.exists(os.path.join(root, "backends", "nvidia", "bin", "ptxas")):
        return ""
    return "Triton's NVIDIA backend (ptxas) is missing"


def _cpu_ext_reason() -> str:
    if pyg_dist_typing.WITH_CPU_EXT:
        return ""
    return f"C++ extension unavailable: {cpu.unavailable_reason()}"


# The testbed module is imported when asked for, not with this package:
# ``python -m pyg_dist.testing.cluster`` must find it not yet imported.


def _namespaces_reason() -> str:
    from pyg_dist.testing.cluster import unavailable_reason

    reason = unavailable_reason()
    return f"no network namespaces: {reason}" if reason else ""


def _netem_reason() -> str:
    from pyg_dist.testing.cluster import netem_reason

    reason = netem_reason()
    return f"no delay or packet loss: {reason}" if reason else ""


#: Triton is installed (its kernels run on CUDA, or interpreted on the CPU).
withTriton = Requirement("withTriton", _triton_reason)
#: pyg_dist's Triton backend runs on some device of this machine.
withTritonBackend = Requirement("withTritonBackend", _triton_backend_reason)
#: Triton can compile kernels for NVIDIA GPUs (its ptxas is shipped), GPU or not.
withTritonCompiler = Requirement("withTritonCompiler", _ptxas_reason)
#: pyg_dist's C++ CPU kernels are built and loaded (``WITH_CPU_EXT``).
withCPUExtension = Requirement("withCPUExtension", _cpu_ext_reason)
#: pymetis is installed (``WITH_METIS``).
withMETIS = Requirement("withMETIS",
                        lambda: "" if pyg_dist_typing.WITH_METIS else "pymetis is not installed")
#: Network namespaces can be made here (root, iproute2): the multi-host testbed.
withNamespaces = Requirement("withNamespaces", _namespaces_reason)
#: The testbed's links can delay and drop packets (the kernel has netem).
withNetem = Requirement("withNetem", _netem_reason)
#: A CUDA device is present.
onlyCUDA = Requirement("onlyCUDA",
                       lambda: "" if torch.cuda.is_available() else "no CUDA device")
