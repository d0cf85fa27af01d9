r"""Feature-parallel training (NeutronTP, Plexus): the ranks form a grid of
:math:`D` graph parts × :math:`T` feature slices (:math:`D T` = world size),
and rank :math:`(d, t)` (global rank :math:`d T + t`) holds part :math:`d`'s
structure and columns :math:`t` of its rows.

A node matrix :math:`\mathbf{H}` (:math:`N \times F`) lives in one of two
layouts: **columns** (rank :math:`(d, t)` holds part :math:`d`'s rows,
columns :math:`\lfloor F t / T \rfloor` to :math:`\lfloor F (t+1) / T
\rfloor`) or **rows** (the same rank holds row block :math:`t` of part
:math:`d`'s rows, every column). Aggregations run on columns: with
:math:`D > 1` each slice's halo crosses among the :math:`D` ranks that hold
slice :math:`t` (the graph's halo policies apply per slice); dense transforms
run on rows. An all-to-all among the :math:`T` ranks of a part turns one
layout into the other. Every layer of a linear aggregation runs in the order
that moves fewer bytes, :math:`\hat{\mathbf{A}}(\mathbf{H}\mathbf{W}) =
(\hat{\mathbf{A}}\mathbf{H})\mathbf{W}`: the plan weighs every order of every
layer (:func:`choose_orders`) with all-to-all rows :math:`a = N (T-1)/T` and
halo rows :math:`h` of the :math:`D`-part cut per unit of width.

Elementwise operations (activations, dropout) run on either layout; dropout
masks come from the graph's hash of (global node, global column), so every
grid draws the masks of one process. Norms run on rows, their statistics over
every rank's row block; accuracies run on rows. The loss runs where the last
layer leaves the logits: on rows, or on columns, where two values per row (the
slices' largest log-sum-exp, then the sum of their exponentials) are summed
over the part's ranks instead of moving the logits. Every parameter's
gradient is summed over all :math:`P` ranks (:attr:`FeatureGrid.gradient_group`).
A layer that aggregates the unchanged features (nothing random before it)
moves their aggregate into rows, and exchanges its halo, at the first step
only, and keeps the rows.

Predicted (``FeatureParallel.candidates``, per grid), from the probe's
exact compute :math:`C` scaled by the grid's largest share of edges and rows,
each all-to-all of width :math:`w` :math:`\alpha + B_a(w)/\beta` (:math:`B_a`:
the busiest rank's bytes sent and received), each halo exchange
:math:`\alpha + R\,4\lceil w/T \rceil/\beta` (:math:`R`: the busiest rank's
rows sent and received), twice when gradients flow back, and the gradients'
all-reduce :math:`G`, and for a loss on columns two all-reduces of the
part's rows, :math:`\alpha + 8 (T-1) n / (T \beta)` each. Bytes are the
ledger's own count.

The folder, by concern: the options and their checks (``strategy.py``), the
grid (``grid.py``), a rank's share of the graph (``load.py``), the model as
a program of layout-aware steps (``program.py``), the order of each layer
(``plan.py``), the autograd operations between layouts and on slices
(``ops.py``), the model on the grid (``model.py``), one run (``runner.py``)
and the planner's predictions (``cost.py``).
"""
from pyg_dist.strategies.feature_parallel.cost import measure, predict
from pyg_dist.strategies.feature_parallel.grid import FeatureGrid, bounds, feature_grid
from pyg_dist.strategies.feature_parallel.load import FeatureParallelData, load_grid
from pyg_dist.strategies.feature_parallel.model import FeatureParallelModel
from pyg_dist.strategies.feature_parallel.plan import (
    Event,
    choose_orders,
    loss_on_columns,
    needs,
    orders_of,
    simulate,
)
from pyg_dist.strategies.feature_parallel.program import (
    AGGREGATE_FIRST,
    COLUMNS,
    GNN_REFUSED,
    MODELS,
    ROWS,
    RUNS,
    TRANSFORM_FIRST,
    Op,
    compile_model,
)
from pyg_dist.strategies.feature_parallel.strategy import FeatureParallel

__all__ = ["FeatureParallel", "FeatureGrid", "FeatureParallelData", "FeatureParallelModel",
           "feature_grid", "load_grid", "compile_model", "choose_orders", "simulate", "needs",
           "orders_of", "measure", "predict", "loss_on_columns", "bounds", "Op", "Event", "RUNS",
           "MODELS", "GNN_REFUSED", "COLUMNS", "ROWS", "AGGREGATE_FIRST", "TRANSFORM_FIRST"]
