"""The feature-parallel strategy: its options, checks and predictions."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from torch import nn

from pyg_dist.halo import HaloPolicy
from pyg_dist.strategies.base import Runner, Strategy
from pyg_dist.strategies.cost import Candidate, Probe
from pyg_dist.strategies.feature_parallel.cost import measure, predict
from pyg_dist.strategies.feature_parallel.grid import NAME, grid_parts
from pyg_dist.strategies.feature_parallel.load import FeatureParallelData, load_grid
from pyg_dist.strategies.feature_parallel.program import GNN_REFUSED, MODELS, RUNS
from pyg_dist.strategies.feature_parallel.runner import FeatureParallelRun
from pyg_dist.strategies.options import check_int, check_policy, option
from pyg_dist.strategies.settings import GradSync, Settings
from pyg_dist.strategies.task import Task


@dataclass(frozen=True)
class FeatureParallel(Strategy):
    r"""Feature-parallel training on a grid of world size / ``slices`` graph
    parts × ``slices`` feature slices (see :mod:`~pyg_dist.strategies.feature_parallel`):
    aggregations run on column slices (their halo, with several parts, among
    the ranks of one slice, under the graph's halo policies), dense transforms
    on row blocks, an all-to-all among a part's ranks between the two. Every
    step equals single-process training on the whole graph under exact halos,
    and every rank does the same work whatever the cut. Trains
    :class:`~pyg_dist.models.GNN` (``gcn``, ``sage``, ``gin``), PyG's ``GCN``,
    ``GraphSAGE`` and ``GIN`` converted with :func:`~pyg_dist.nn.to_distributed`,
    or one layer of ``RUNS``; the data comes from :meth:`load` (or, given a
    :class:`~pyg_dist.DistData`, from its folder, whose part count the grid's
    parts divide).

    Args:
        slices (int, optional): :math:`T`, feature slices (ranks per graph
            part). (default: :obj:`2`)
        halo (HaloPolicy or str, optional): The policy of every layer that
            sets none, per slice (as :class:`~pyg_dist.config.GraphParallel`'s);
            :obj:`None` keeps the graph's default. (default: :obj:`None`)
        pre_aggregate (bool, optional): Whether the layers' slices exchange
            partial sums on a minimum vertex cover; :obj:`None` keeps the
            graph's setting. (default: :obj:`None`)
    """

    name: ClassVar[str] = NAME
    summary: ClassVar[str] = "D parts x T feature slices"
    hetero_refusal: ClassVar[str] = ("feature-parallel training slices the features of a "
                                     "homogeneous graph")
    slices: int = option(2, "feature slices (grid: ranks/T parts x T)", metavar="T")
    halo: HaloPolicy | str | None = option(
        None, "a policy spec, per slice", type=str, metavar="POLICY")
    pre_aggregate: bool | None = option(None, "send partial sums on a vertex cover (exact)",
                                        type=bool)

    def check(self) -> None:
        check_int(type(self), "slices", self.slices, 1, "it counts the ranks of a graph part")
        check_policy(type(self), "halo", self.halo)
        if self.pre_aggregate not in (None, True, False):
            raise ValueError(f"FeatureParallel(pre_aggregate={self.pre_aggregate!r}): use "
                             f"True (on), False (off) or None (the graph's setting)")

    def ranks_per_part(self) -> int:
        return self.slices

    def graph_parts(self, world_size: int) -> int:
        return grid_parts(world_size, self.slices)

    def load(self, folder: Any) -> FeatureParallelData:
        return load_grid(folder, self.slices)

    def check_model(self, kind: str, layers: int | None = None,
                    options: dict[str, Any] | None = None) -> None:
        if kind not in MODELS:
            raise ValueError(f"--strategy feature-parallel trains --model {'|'.join(MODELS)} "
                             f"(it runs {RUNS}); got --model {kind}")
        given = [flag for key, flag in GNN_REFUSED
                 if (options or {}).get(key) not in (None, False, 0, 0.0)]
        if given:
            raise ValueError(f"--strategy feature-parallel trains GNN without "
                             f"{', '.join(given)}; leave {'them' if len(given) > 1 else 'it'} "
                             f"out")

    def check_settings(self, settings: Settings) -> None:
        super().check_settings(settings)
        if settings.grad_sync.compress not in (None, "none"):
            raise ValueError(f"'train' with strategy={self} sums plain gradients over the "
                             f"grid (got grad_sync={settings.grad_sync}); leave grad_sync out "
                             f"(CLI: drop --grad-compress)")

    def runner(self, model: nn.Module, task: Task, settings: Settings) -> Runner:
        data = task.data
        if not isinstance(data, FeatureParallelData):
            folder = getattr(data, "folder", None)
            if folder is None:
                raise ValueError(f"'train' with strategy={self} needs the grid's data: pass "
                                 f"strategy.load(folder), or a DistData loaded from a "
                                 f"partition folder")
            registry = task.registry  # the part's own default policy holds on the grid
            data = load_grid(folder, self.slices,
                             halo=registry.default if registry is not None else None)
            task = Task(data)
        return FeatureParallelRun(self, model, task, settings, self.halo, self.pre_aggregate)

    @classmethod
    def measure(cls, model: nn.Module, data: Any) -> Any:
        return measure(model, data)

    @classmethod
    def candidates(cls, probe: Probe, epochs: int) -> list[Candidate]:
        measured = probe.measured.get(cls.name)
        if not measured or "program" not in measured:
            return []
        out = []
        for key, sizes in measured["grids"].items():
            slices = int(key)
            seconds, nbytes = predict(measured["program"], sizes, slices, probe, epochs)
            parts = probe.world_size // slices
            out.append(Candidate(f"feature-parallel {parts}x{slices}", cls(slices=slices),
                                 GradSync(), "exact", seconds, int(nbytes), epochs))
        return out
