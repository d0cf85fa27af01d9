"""The one place that reads pyg_dist's environment variables.

=============================  ==================================================
variable                       effect
=============================  ==================================================
``PYG_DIST_TIMEOUT``           seconds a collective may wait (default 600)
``PYG_DIST_TRANSPORT``         halo transport: ``p2p`` or ``all_to_all``
``PYG_DIST_SPMM_BACKEND``      spmm backend: ``triton``, ``cpu`` or ``torch``
``PYG_DIST_DISABLE_CPU_EXT``   ``1``: never build nor load the C++ kernels
``PYG_DIST_VERBOSE_BUILD``     ``1``: show the C++ build's commands and output
``PYG_DIST_TRITON_AUTOTUNE``   ``0``: one default Triton config, no autotuning
``PYG_DIST_LAUNCH_STORE``      set by :func:`pyg_dist.launch` in its ranks
``PYG_DIST_DEBUG``             ``1``: ``pyg-dist`` shows the traceback of an error
=============================  ==================================================
"""
from __future__ import annotations

import os

__all__ = [
    "TIMEOUT", "TRANSPORT", "SPMM_BACKEND", "DISABLE_CPU_EXT", "VERBOSE_BUILD",
    "TRITON_AUTOTUNE", "LAUNCH_STORE", "DEBUG", "TRANSPORTS", "DEFAULT_TIMEOUT",
    "timeout", "transport", "spmm_backend", "cpu_ext_disabled", "verbose_build",
    "triton_autotune", "launch_store", "under_torchrun", "world_size", "debug",
]

TIMEOUT = "PYG_DIST_TIMEOUT"
TRANSPORT = "PYG_DIST_TRANSPORT"
SPMM_BACKEND = "PYG_DIST_SPMM_BACKEND"
DISABLE_CPU_EXT = "PYG_DIST_DISABLE_CPU_EXT"
VERBOSE_BUILD = "PYG_DIST_VERBOSE_BUILD"
TRITON_AUTOTUNE = "PYG_DIST_TRITON_AUTOTUNE"
LAUNCH_STORE = "PYG_DIST_LAUNCH_STORE"
DEBUG = "PYG_DIST_DEBUG"

TRANSPORTS = ("p2p", "all_to_all")
#: Collectives that wait longer than this raise instead of hanging (seconds).
DEFAULT_TIMEOUT = 600.0


def _get(name: str) -> str:
    return os.environ.get(name, "").strip()


def timeout() -> float:
    """``PYG_DIST_TIMEOUT`` in seconds, or :data:`DEFAULT_TIMEOUT`."""
    value = _get(TIMEOUT)
    if not value:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if seconds <= 0:
        raise ValueError(f"{TIMEOUT}='{value}' is not a positive number of seconds; unset it "
                         f"or set e.g. {TIMEOUT}=600")
    return seconds


def transport() -> str | None:
    """``PYG_DIST_TRANSPORT``, or :obj:`None` to choose by backend."""
    value = _get(TRANSPORT)
    if value and value not in TRANSPORTS:
        raise ValueError(f"{TRANSPORT}='{value}' is not a transport; use one of "
                         f"{', '.join(TRANSPORTS)}")
    return value or None


def spmm_backend() -> str | None:
    """``PYG_DIST_SPMM_BACKEND``, or :obj:`None` to choose by device (checked by the caller)."""
    return _get(SPMM_BACKEND) or None


def cpu_ext_disabled() -> str | None:
    """The value of ``PYG_DIST_DISABLE_CPU_EXT`` when it disables the C++ kernels
    (anything but empty or ``0``), else :obj:`None`."""
    value = _get(DISABLE_CPU_EXT)
    return value if value not in ("", "0") else None


def verbose_build() -> bool:
    return _get(VERBOSE_BUILD) == "1"


def triton_autotune() -> bool:
    return _get(TRITON_AUTOTUNE) != "0"


def debug() -> bool:
    """Whether ``PYG_DIST_DEBUG=1``: ``pyg-dist`` shows an error's traceback."""
    return _get(DEBUG) not in ("", "0")


def under_torchrun() -> bool:
    """Whether ``torchrun`` (or another launcher) set ``RANK`` and ``WORLD_SIZE``."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def world_size() -> int:
    """``WORLD_SIZE`` as torchrun (or another launcher) set it; 1 without one."""
    return int(_get("WORLD_SIZE") or 1)


def launch_store() -> str | None:
    """``host:port`` of the store of the :func:`pyg_dist.launch` that spawned this rank."""
    return _get(LAUNCH_STORE) or None
