"""What every part of :mod:`pyg_dist.runtime.distributed` asks of the process
group: ranks, sizes, backends, devices; no communication."""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from pyg_dist.runtime import env

__all__ = [
    "DEFAULT_TIMEOUT", "Group", "GradBucket", "is_initialized", "rank", "world_size",
    "is_distributed", "default_device", "collective_device", "backend", "group_id",
    "global_rank",
]


#: Collectives that wait longer than this raise instead of hanging (seconds).
DEFAULT_TIMEOUT = env.DEFAULT_TIMEOUT


Group = Any  # a torch.distributed.ProcessGroup, or None for the default group


#: The bucket of gradients a DDP communication hook is handed.
GradBucket = dist.GradBucket


def is_initialized() -> bool:
    """Whether a process group exists (of any size)."""
    return dist.is_initialized()


def rank(group: Group = None) -> int:
    """This process's rank in ``group`` (0 without a process group).

    Args:
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    return dist.get_rank(group) if dist.is_initialized() else 0


def world_size(group: Group = None) -> int:
    """Number of ranks in ``group`` (1 without a process group).

    Args:
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    return dist.get_world_size(group) if dist.is_initialized() else 1


def is_distributed(group: Group = None) -> bool:
    """Whether collectives over ``group`` involve other processes.

    Args:
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    return world_size(group) > 1


def default_device() -> torch.device:
    """The device this rank computes on: its GPU under NCCL, else the CPU."""
    return collective_device()


def collective_device(group: Group = None) -> torch.device:
    """Where tensors of a collective over ``group`` must live: this rank's GPU
    under NCCL, else the CPU.

    Args:
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    if dist.is_initialized() and dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def backend(group: Group = None) -> str:
    """The backend of ``group`` (``"gloo"``, ``"nccl"``).

    Args:
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    return str(dist.get_backend(group))


def group_id() -> int:
    """An id of the default group, new each time a group is initialised (0
    without one): the key of things made per group."""
    return id(dist.group.WORLD) if dist.is_initialized() else 0


def global_rank(q: int, group: Group) -> int:
    """Global rank of rank ``q`` of ``group`` (point-to-point ops address global ranks)."""
    return q if group is None else dist.get_global_rank(group, q)
