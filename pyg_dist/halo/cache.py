"""One typed cache of halo rows, shared by every policy that reuses rows."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["HaloCache"]


class HaloCache:
    r"""Rows kept from one step to a later one, with the step at which each row
    arrived (in the spirit of pyg_autoscale's ``History``).

    Policies keep halo rows in it (``Cached``, ``Stale``, ``Pipelined``,
    ``Adaptive``, the halo of static inputs); ``Adaptive`` also keeps the rows
    it last sent, ``Pipelined`` the halo gradients it last received. Rows are
    stored detached: a cache never holds an autograd graph.

    Shapes:
        - **rows:** :obj:`[R, *]`
        - **steps:** :obj:`[R]` int64, the step each row arrived
    """

    def __init__(self) -> None:
        self.rows: Tensor | None = None
        self.steps: Tensor | None = None

    def matches(self, x: Tensor) -> bool:
        """Whether the cache holds rows of ``x``'s row shape and dtype."""
        return (self.rows is not None and self.rows.shape[1:] == x.shape[1:]
                and self.rows.dtype == x.dtype)

    def pull(self) -> Tensor:
        """The cached rows."""
        assert self.rows is not None, "pull() of an empty HaloCache"
        return self.rows

    def push(self, rows: Tensor, step: int, fresh: Tensor | None = None) -> None:
        """Stores ``rows`` (``[R, *]``); ``fresh`` (``[R]`` bool, default all)
        marks the rows that arrived at ``step``, the others keep their step."""
        rows = rows.detach()
        if self.steps is None or self.steps.numel() != rows.size(0):
            self.steps = torch.full((rows.size(0),), step, dtype=torch.long, device=rows.device)
        elif fresh is None:
            self.steps.fill_(step)
        else:
            self.steps[fresh] = step
        self.rows = rows

    def ages(self, step: int) -> Tensor:
        """``[R]`` steps since each row arrived."""
        assert self.steps is not None, "ages() of an empty HaloCache"
        return step - self.steps

    def age(self, step: int) -> int:
        """Steps since the oldest row arrived (0 for no rows)."""
        if self.steps is None or self.steps.numel() == 0:
            return 0
        return int(self.ages(step).max())

    def reset(self) -> None:
        self.rows = self.steps = None

    def state_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rows, self.steps = state["rows"], state["steps"]

    def __repr__(self) -> str:
        shape = None if self.rows is None else list(self.rows.shape)
        return f"HaloCache(rows={shape})"
