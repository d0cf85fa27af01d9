"""The process grid: ``parts`` graph parts × ``stages`` layer stages.

Rank ``r`` holds part ``r % parts`` of the graph and runs the layers of stage
``r // parts``. The ranks of one stage (one per part) form a process group:
they exchange the halos of that stage's layer inputs and sum its gradients.
Between stages, a rank's own rows move to the rank of the same part in the
next stage.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyg_dist.runtime import distributed
from pyg_dist.runtime.grids import process_grid

__all__ = ["Grid", "grid"]


@dataclass(frozen=True)
class Grid:
    """This rank's place in the grid.

    Attributes:
        parts: Graph parts (ranks per stage).
        stages: Layer stages.
        part: The part this rank holds.
        stage: The stage whose layers this rank runs.
        group: The ranks of this stage (:obj:`None`: the default group, when
            there is one stage).
    """

    parts: int
    stages: int
    part: int
    stage: int
    group: Any = None

    @property
    def first(self) -> bool:
        return self.stage == 0

    @property
    def last(self) -> bool:
        return self.stage == self.stages - 1

    def rank_of(self, stage: int) -> int:
        """Global rank holding this rank's part at ``stage``."""
        return stage * self.parts + self.part

    def stage_root(self, stage: int) -> int:
        """Global rank of part 0 at ``stage``."""
        return stage * self.parts


def grid(stages: int = 1) -> Grid:
    """This rank's :class:`Grid` for ``stages`` stages over the world (``world
    size / stages`` parts), on :func:`~pyg_dist.runtime.grids.process_grid`'s
    grid of shape ``(stages, parts)``. Collective the first time per
    ``stages`` (it creates the stage groups).

    Args:
        stages (int, optional): Number of stages. (default: :obj:`1`)

    Raises:
        ValueError: If ``stages`` does not divide the world size.
    """
    world = distributed.world_size()
    if stages < 1 or world % stages:
        divisors = [d for d in range(1, world + 1) if world % d == 0]
        raise ValueError(
            f"stages={stages} does not divide the world size {world}; use one of "
            f"{', '.join(map(str, divisors))} (the graph is cut into world size / stages parts)")
    place = process_grid((stages, world // stages))
    stage, part = place.coords
    return Grid(world // stages, stages, part, stage, place.group(1))
