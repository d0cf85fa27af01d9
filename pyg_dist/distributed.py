"""The process group: ``pyg_dist.init()`` and small helpers around torch.distributed."""
from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = ["init", "shutdown", "rank", "world_size", "default_device", "DEFAULT_TIMEOUT"]

#: Collectives that wait longer than this raise instead of hanging (seconds).
DEFAULT_TIMEOUT = 600.0

# Set by pyg_dist.launch in the ranks it spawns: the parent hosts the store.
LAUNCH_STORE_ENV = "PYG_DIST_LAUNCH_STORE"


def init(backend: str | None = None, timeout: float | timedelta | None = None) -> None:
    r"""Initialises the default process group from the environment.

    * Under ``torchrun`` (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
      ``MASTER_PORT`` set): joins that group.
    * Under :func:`pyg_dist.launch`: joins the group the launcher hosts.
    * Otherwise: a group of one process, so single-process code runs unchanged.

    Does nothing if a group is already initialised.

    Args:
        backend (str, optional): :obj:`"nccl"` or :obj:`"gloo"`; :obj:`None` picks
            NCCL when CUDA is available and gloo otherwise. (default: :obj:`None`)
        timeout (float or datetime.timedelta, optional): How long a collective may
            wait for the other ranks before raising, in seconds; defaults to the
            ``PYG_DIST_TIMEOUT`` variable or :obj:`600`. (default: :obj:`None`)
    """
    if dist.is_initialized():
        return
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if timeout is None:
        timeout = float(os.environ.get("PYG_DIST_TIMEOUT", DEFAULT_TIMEOUT))
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    env = os.environ
    if backend == "nccl":
        torch.cuda.set_device(int(env.get("LOCAL_RANK", 0)))
    if LAUNCH_STORE_ENV in env:
        host, port = env[LAUNCH_STORE_ENV].rsplit(":", 1)
        store = dist.TCPStore(host, int(port), is_master=False, timeout=timeout)
        dist.init_process_group(
            backend, store=store, rank=int(env["RANK"]), world_size=int(env["WORLD_SIZE"]),
            timeout=timeout,
        )
    elif "RANK" in env and "WORLD_SIZE" in env:
        dist.init_process_group(backend, init_method="env://", timeout=timeout)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1,
                                timeout=timeout)


def shutdown() -> None:
    """Destroys the default process group if there is one."""
    if dist.is_initialized():
        dist.destroy_process_group()


def rank() -> int:
    """This process's rank (0 without a process group)."""
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    """Number of ranks (1 without a process group)."""
    return dist.get_world_size() if dist.is_initialized() else 1


def default_device() -> torch.device:
    """The device this rank computes on: its GPU under NCCL, else the CPU."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
