"""A layer pipeline (GNNPipe) for deep GNNs, on a grid of graph parts × layer
stages: the strategy (:class:`~pyg_dist.config.LayerPipeline`, ``strategy.py``), the schedule
(:class:`Pipeline`, ``pipeline.py``), its chunks, layers and shared dropout
masks, the stage split (``split.py``) and which layout moves the fewest bytes
(``cost.py``).

``world size = parts × stages``: one stage is graph parallelism, one part is a
pure layer pipeline. See :class:`Pipeline` for the schedule and the staleness
it allows.
"""
from pyg_dist.strategies.layer_pipeline.cost import (
    LayoutCost,
    best_layout,
    halo_rows,
    layout_costs,
)
from pyg_dist.strategies.layer_pipeline.grid import Grid, grid
from pyg_dist.strategies.layer_pipeline.pipeline import Pipeline, load
from pyg_dist.strategies.layer_pipeline.split import balance, measure_costs
from pyg_dist.strategies.layer_pipeline.strategy import LayerPipeline

__all__ = ["LayerPipeline", "Pipeline", "load", "Grid", "grid", "balance", "measure_costs",
           "LayoutCost", "layout_costs", "best_layout", "halo_rows"]
