"""The default process group (joined from torchrun's or
:func:`pyg_dist.launch`'s environment, or of one process), new groups beside
it, and the store :func:`pyg_dist.launch` serves its ranks."""
from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from pyg_dist.runtime import env, peers
from pyg_dist.runtime.distributed.base import is_distributed, rank
from pyg_dist.runtime.distributed.collectives import all_gather_objects

__all__ = ["init", "shutdown", "new_group", "host_store"]


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
        timeout = env.timeout()
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    environ = os.environ
    if backend == "nccl":
        torch.cuda.set_device(int(environ.get("LOCAL_RANK", 0)))
    store = _store(timeout)
    if store is not None:
        dist.init_process_group(
            backend, store=store, rank=int(environ["RANK"]),
            world_size=int(environ["WORLD_SIZE"]), timeout=timeout,
        )
    elif env.under_torchrun():
        dist.init_process_group(backend, init_method="env://", timeout=timeout)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1,
                                timeout=timeout)
    if is_distributed():
        peers.publish(all_gather_objects, rank(), timeout.total_seconds(), _default_store())


def _default_store() -> Any:
    """The default group's key-value store (where ranks that give up leave
    their error), or :obj:`None` where torch does not say."""
    try:
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):
        return None


def _store(timeout: timedelta) -> Any:
    """The store of :func:`pyg_dist.launch`'s ranks, or the store of torchrun's
    agent with a prefix per restart (so that the workers of a restart never
    read the addresses of the ones they replace), else :obj:`None`."""
    launch_store = env.launch_store()
    if launch_store is not None:
        host, port = launch_store.rsplit(":", 1)
        return dist.TCPStore(host, int(port), is_master=False, timeout=timeout)
    environ = os.environ
    if environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and "MASTER_ADDR" in environ:
        agent = dist.TCPStore(environ["MASTER_ADDR"], int(environ["MASTER_PORT"]),
                              is_master=False, timeout=timeout)
        restart = environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        return dist.PrefixStore(f"pyg_dist/restart_{restart}", agent)
    return None


def shutdown() -> None:
    """Destroys the default process group if there is one."""
    peers.close()
    if dist.is_initialized():
        dist.destroy_process_group()


def new_group(ranks: Sequence[int] | None = None) -> Any:
    """A new process group of ``ranks`` (global ranks; :obj:`None`: every
    rank) on the default group's backend, so its collectives run beside the
    default group's. Collective: every rank creates its groups in the same
    order, including those it is not part of.

    Args:
        ranks (Sequence[int], optional): The global ranks of the group;
            :obj:`None` for every rank. (default: :obj:`None`)
    """
    with peers.guard("new_group"):
        return dist.new_group(ranks=None if ranks is None else list(ranks),
                              backend=dist.get_backend())


def host_store(host: str = "127.0.0.1") -> Any:
    """A new key-value store served by this process on a free port of ``host``
    (``store.port``), for the ranks :func:`pyg_dist.launch` starts.

    Args:
        host (str, optional): The address to serve on. (default: :obj:`"127.0.0.1"`)
    """
    return dist.TCPStore(host, 0, None, True, wait_for_workers=False)
