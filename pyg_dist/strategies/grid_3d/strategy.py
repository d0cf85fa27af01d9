"""The 3D grid strategy: its options, checks and predictions."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import nn

from pyg_dist.runtime import distributed
from pyg_dist.strategies.base import Runner, Strategy
from pyg_dist.strategies.cost import Candidate, Probe
from pyg_dist.strategies.grid_3d.cost import measure, predict
from pyg_dist.strategies.grid_3d.folder import is_grid_folder, read_grid_folder
from pyg_dist.strategies.grid_3d.grid import NAME, SUMS, parse_grid
from pyg_dist.strategies.grid_3d.load import Grid3DData, load_grid_3d
from pyg_dist.strategies.grid_3d.program import MODELS, RUNS
from pyg_dist.strategies.grid_3d.runner import Grid3DRun
from pyg_dist.strategies.options import check_choice, check_int, option
from pyg_dist.strategies.settings import GradSync, Settings
from pyg_dist.strategies.task import Task

#: :class:`~pyg_dist.models.GNN`'s options the grid refuses, with their CLI flags.
GNN_REFUSED = (("residual", "--residual"), ("edge_dropout", "--edge-dropout"),
               ("norm", "--norm"), ("skip", "--skip"), ("jk", "--jk"))


@dataclass(frozen=True)
class Grid3D(Strategy):
    r"""Training on a 3D grid of :math:`X \times Y \times Z` ranks (Plexus,
    arXiv 2505.04083; see :mod:`~pyg_dist.strategies.grid_3d`): every rank
    holds one block of the adjacency per layout (about :math:`E /
    (XY)`, :math:`E / (ZX)`, :math:`E / (YZ)` edges, balanced on any graph
    by a double permutation of the nodes), one block of each weight and one
    block of each node matrix; every step equals single-process training on
    the whole graph. Trains :class:`~pyg_dist.models.GNN` (``gcn``, ``sage``,
    ``gin``), PyG's ``GCN``, ``GraphSAGE`` and ``GIN`` converted with
    :func:`~pyg_dist.nn.to_distributed`, or one layer of ``RUNS``; the data
    comes from :meth:`load` (a graph folder or a partition folder of any
    part count, read in chunks), or a graph in memory given to
    :func:`~pyg_dist.train.train` on every rank.

    Args:
        x (int, optional): :math:`X`; :obj:`None` with ``y`` and ``z``: the
            most cubic grid of the world. (default: :obj:`None`)
        y (int, optional): :math:`Y`. (default: :obj:`None`)
        z (int, optional): :math:`Z`. (default: :obj:`None`)
        grid (str, optional): ``"XxYxZ"``, instead of ``x``, ``y``, ``z``.
            (default: :obj:`None`)
        seed (int, optional): The node order's random permutation's seed.
            (default: :obj:`0`)
        edge_weight (bool, optional): Whether GCN layers read the graph's
            edge weights. (default: :obj:`False`)
        sums (str, optional): How each layer's sums are kept:
            ``"scatter"``, reduce-scattered over their axis (a rank keeps
            :math:`N W / P` of a node matrix, gathered where it is read and
            gathered again in the backward) or ``"whole"``, all-reduced and
            replicated over their axis (:math:`P^{1/3}` times that on a cube,
            and a third fewer backward bytes). (default: :obj:`"scatter"`)
    """

    name: ClassVar[str] = NAME
    summary: ClassVar[str] = "XxYxZ grid, adjacency blocks per rank"
    hetero_refusal: ClassVar[str] = "the 3D grid trains homogeneous graphs"
    x: int | None = None
    y: int | None = None
    z: int | None = None
    grid: str | None = option(None, "the grid, e.g. 2x2x1 (product: the ranks)",
                              type=str, metavar="XxYxZ")
    seed: int = 0
    edge_weight: bool = False
    sums: str = option("scatter", "keep each sum as a piece of its rows a rank (scatter, "
                       "less memory) or all-reduced whole (fewer bytes)", choices=SUMS,
                       metavar="|".join(SUMS))

    def check(self) -> None:
        if self.grid is not None:
            if not isinstance(self.grid, str) or any(v is not None for v in
                                                     (self.x, self.y, self.z)):
                raise ValueError(f"Grid3D(grid={self.grid!r}, x={self.x}, y={self.y}, "
                                 f"z={self.z}): give the grid as grid='XxYxZ' or as x, y, z, "
                                 f"not both")
            x, y, z = parse_grid(self.grid)
            object.__setattr__(self, "x", x)
            object.__setattr__(self, "y", y)
            object.__setattr__(self, "z", z)
            object.__setattr__(self, "grid", None)
        given = [v is not None for v in (self.x, self.y, self.z)]
        if any(given) and not all(given):
            raise ValueError(f"Grid3D(x={self.x}, y={self.y}, z={self.z}): give all three "
                             f"sizes (or none, for the most cubic grid of the ranks)")
        for name in ("x", "y", "z"):
            if getattr(self, name) is not None:
                check_int(type(self), name, getattr(self, name), 1,
                          "it counts the ranks along one axis")
        check_choice(type(self), "sums", self.sums, SUMS)

    def shape(self, world_size: int) -> tuple[int, int, int]:
        """The grid on ``world_size`` ranks: the given one, else the most
        cubic (the smallest largest axis, then the largest x)."""
        if self.x is not None:
            return (self.x, self.y, self.z)  # type: ignore[return-value]
        return min(grids(world_size), key=lambda g: (max(g), -g[0], -g[1]))

    def graph_parts(self, world_size: int) -> int:
        """A part per rank (each rank reads one part's edges for the degrees
        that order the nodes, then every part a chunk at a time for its
        blocks); raises naming the grids of ``world_size`` ranks when this
        one holds another number."""
        shape = self.shape(world_size)
        if math.prod(shape) != world_size:
            raise ValueError(f"--grid {'x'.join(map(str, shape))} holds {math.prod(shape)} "
                             f"ranks, not {world_size}; use one of "
                             f"{', '.join('x'.join(map(str, g)) for g in grids(world_size))}")
        return world_size

    def load(self, folder: Any) -> Grid3DData:
        shape = self.shape(distributed.world_size())
        if is_grid_folder(folder):  # written for one grid: this rank's file alone
            return read_grid_folder(folder, shape, self.seed)
        return load_grid_3d(folder, shape, self.seed)

    def check_model(self, kind: str, layers: int | None = None,
                    options: dict[str, Any] | None = None) -> None:
        if kind not in MODELS:
            raise ValueError(f"--strategy grid-3d trains --model {'|'.join(MODELS)} (it runs "
                             f"{RUNS}); got --model {kind}")
        given = [flag for key, flag in GNN_REFUSED
                 if (options or {}).get(key) not in (None, False, 0, 0.0)]
        if given:
            raise ValueError(f"--strategy grid-3d trains GNN without {', '.join(given)}; "
                             f"leave {'them' if len(given) > 1 else 'it'} out")

    def check_settings(self, settings: Settings) -> None:
        super().check_settings(settings)
        if settings.grad_sync.compress not in (None, "none"):
            raise ValueError(f"'train' with strategy={self} sums plain gradients over the "
                             f"grid (got grad_sync={settings.grad_sync}); leave grad_sync out "
                             f"(CLI: drop --grad-compress)")

    def runner(self, model: nn.Module, task: Task, settings: Settings) -> Runner:
        data = task.data
        if not isinstance(data, Grid3DData):
            # a rank's part (DistData) is read again as blocks from its folder
            source = getattr(data, "folder", None) if hasattr(data, "global_id") else data
            if source is None or not (hasattr(source, "edge_index") or isinstance(source, str)
                                      or hasattr(source, "__fspath__")):
                raise ValueError(f"'train' with strategy={self} needs the grid's data: pass "
                                 f"strategy.load(folder) (a graph or partition folder), a "
                                 f"DistData loaded from a partition folder, or the whole "
                                 f"graph (a torch_geometric Data) on every rank")
            data = self.load(source)
            task = Task(data)
        return Grid3DRun(self, model, task, settings, self.edge_weight, self.sums)

    @classmethod
    def measure(cls, model: nn.Module, data: Any) -> Any:
        return measure(model, data)

    @classmethod
    def candidates(cls, probe: Probe, epochs: int) -> list[Candidate]:
        measured = probe.measured.get(cls.name)
        if not measured:
            return []
        out = []
        for shape in grids(probe.world_size):
            seconds, nbytes = predict(measured, shape, probe, epochs)
            x, y, z = shape
            out.append(Candidate(f"grid-3d {x}x{y}x{z}", cls(x=x, y=y, z=z), GradSync(),
                                 "exact", seconds, int(nbytes), epochs))
        return out


def grids(world_size: int) -> list[tuple[int, int, int]]:
    """Every grid :math:`(X, Y, Z)` of ``world_size`` ranks.

    Args:
        world_size (int): The ranks.
    """
    return [(x, y, world_size // (x * y)) for x in range(1, world_size + 1)
            if world_size % x == 0 for y in range(1, world_size // x + 1)
            if (world_size // x) % y == 0]
