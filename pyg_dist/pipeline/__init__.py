"""Layer pipelines for deep GNNs, on a grid of graph parts × layer stages.

``world size = parts × stages``: one stage is today's graph parallelism, one
part is a pure layer pipeline. See :class:`Pipeline` for the schedule and the
staleness it allows, ``pyg_dist.pipeline.cost`` for which layout moves the
fewest bytes.
"""
from pyg_dist.pipeline.cost import LayoutCost, best_layout, halo_rows, layout_costs
from pyg_dist.pipeline.grid import Grid, grid
from pyg_dist.pipeline.pipeline import Pipeline, load
from pyg_dist.pipeline.split import balance, measure_costs

__all__ = ["Pipeline", "load", "Grid", "grid", "balance", "measure_costs", "LayoutCost",
           "layout_costs", "best_layout", "halo_rows"]
