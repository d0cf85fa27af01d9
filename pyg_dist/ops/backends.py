"""Picks the kernels behind :func:`pyg_dist.ops.spmm` by device and availability."""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any, Protocol

import torch
from torch import Tensor

from pyg_dist import typing as pyg_dist_typing
from pyg_dist.ops import cpu
from pyg_dist.ops import triton as triton_ops
from pyg_dist.ops.gat_ref import GatArgs, GatGrads
from pyg_dist.ops.torch_kernels import TorchKernels
from pyg_dist.runtime import env

__all__ = ["resolve", "resolve_name", "kernels", "available_backends", "default_backend",
           "BACKENDS", "Kernels"]

BACKENDS = ("triton", "cpu", "torch")
_forced: list[str] = []


class Kernels(Protocol):
    """What a backend provides: two kernels from which :func:`~pyg_dist.ops.spmm`
    composes its forward and backward, and the two passes of
    :func:`~pyg_dist.ops.gat`."""

    def spmm_forward(self, rowptr: Tensor, col: Tensor, value: Tensor | None, x: Tensor,
                     x_halo: Tensor | None, reduce: str) -> tuple[Tensor, Tensor | None]:
        """``out [M, F]`` (dtype of ``x``) and, for ``"max"``, ``arg [M, F]`` int64:
        the CSR position of the first maximal entry, ``nnz`` for empty rows."""

    def sddmm(
        self, rowptr: Tensor, col: Tensor, a: Tensor, x: Tensor, x_halo: Tensor | None
    ) -> Tensor:
        """``out[e] = <a[row(e)], s[col[e]]>`` for every entry, float32 ``[nnz]``,
        ``s`` being ``x`` followed by ``x_halo``."""

    def gat_forward(self, args: GatArgs) -> tuple[Tensor, Tensor]:
        """The output of :func:`~pyg_dist.ops.gat` ``[M, H, C]`` (dtype of ``x``)
        and each row's log-sum-exp of its scores ``[M, H]`` float32 (zero for
        empty rows), which backward recomputes the coefficients from."""

    def gat_backward(self, args: GatArgs, lse: Tensor, grad_out: Tensor,
                     transpose: tuple[Tensor, Tensor, Tensor] | None, need_src: bool,
                     need_score: bool, need_alpha_src: bool) -> GatGrads:
        """The gradients of :func:`~pyg_dist.ops.gat` asked for (see
        :func:`~pyg_dist.ops.gat_ref.gat_backward_ref` for the formulas);
        ``transpose`` is :func:`~pyg_dist.ops.csr.csr_transpose` of the graph
        when ``need_src`` or ``need_alpha_src`` is set."""


@contextlib.contextmanager
def default_backend(backend: str | None) -> Iterator[None]:
    """Makes ``backend`` what ``spmm(..., backend=None)`` uses inside the block
    (the layers call it so); :obj:`None` restores the automatic choice. The
    ``PYG_DIST_SPMM_BACKEND`` variable does the same for a whole process.

    Args:
        backend (str, optional): :obj:`"triton"`, :obj:`"cpu"` or
            :obj:`"torch"`; :obj:`None` for the automatic choice.
    """
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"unknown spmm backend '{backend}'; use one of {', '.join(BACKENDS)}")
    _forced.append(backend or "")
    try:
        yield
    finally:
        _forced.pop()


@functools.cache
def _torch_kernels() -> Any:
    return TorchKernels()


@functools.cache
def _cpu_kernels() -> Any:
    """The C++ extension's kernels, or None when it cannot be built or loaded."""
    return cpu.kernels() if cpu.is_available() else None


@functools.cache
def _triton_kernels() -> Any:
    if not pyg_dist_typing.WITH_TRITON:
        return None
    return triton_ops.kernels()


def available_backends(device_type: str = "cpu") -> list[str]:
    """Names of the backends that can run on ``device_type`` here, the one
    ``backend=None`` picks first (Triton runs CPU tensors only when interpreted).

    Args:
        device_type (str, optional): :obj:`"cpu"` or :obj:`"cuda"`.
            (default: :obj:`"cpu"`)
    """
    names = []
    if device_type == "cpu" and _cpu_kernels() is not None:
        names.append("cpu")
    if _triton_kernels() is not None and (
        device_type == "cuda" or pyg_dist_typing.TRITON_INTERPRET
    ):
        names.append("triton")
    names.append("torch")
    return names


def resolve(backend: str | None, x: Tensor, op: str = "spmm") -> Any:
    """The kernels for ``backend`` on ``x``'s device; ``None`` picks the fastest.
    ``op`` names the calling op in errors."""
    return kernels(resolve_name(backend, x.device.type, op))


@torch.compiler.assume_constant_result
def resolve_name(backend: str | None, device_type: str, op: str = "spmm") -> str:
    """The name of the backend :func:`resolve` picks for ``backend`` on
    ``device_type``: what :func:`~pyg_dist.ops.spmm` hands its op. Under
    :func:`torch.compile` it runs when a graph is traced, and its answer is a
    constant of that graph."""
    if backend is None:
        backend = (_forced[-1] if _forced else env.spmm_backend()) or None
    if backend is None:
        if device_type == "cuda" and _triton_kernels() is not None:
            return "triton"
        if device_type == "cpu" and _cpu_kernels() is not None:
            return "cpu"
        return "torch"
    if backend == "cpu":
        if device_type != "cpu":
            raise ValueError(
                f"'{op}' got backend='cpu' for a tensor on '{device_type}'; move it to the CPU "
                f"or use backend='triton'"
            )
        if _cpu_kernels() is None:
            raise RuntimeError(
                f"'{op}' got backend='cpu' but pyg_dist's C++ extension is not available "
                f"({cpu.unavailable_reason()}); use backend='torch', install the binary wheel "
                f"built for your torch, or install a C++ compiler and ninja (pip install ninja)"
            )
    elif backend == "triton":
        if _triton_kernels() is None:
            pyg_dist_typing.require("triton", "backend='triton'")
        if device_type != "cuda" and not pyg_dist_typing.TRITON_INTERPRET:
            raise ValueError(
                f"'{op}' got backend='triton' for a tensor on '{device_type}'; Triton kernels "
                f"need CUDA tensors, or TRITON_INTERPRET=1 set before pyg_dist is imported"
            )
    elif backend != "torch":
        raise ValueError(
            f"'{op}' got backend='{backend}'; use one of {', '.join(BACKENDS)} or None"
        )
    return backend


def kernels(name: str) -> Any:
    """The kernels of backend ``name``, one that :func:`resolve_name` returned."""
    found = {"torch": _torch_kernels, "cpu": _cpu_kernels, "triton": _triton_kernels}[name]()
    assert found is not None, f"backend '{name}' was resolved but is not available"
    return found
