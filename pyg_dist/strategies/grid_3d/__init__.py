r"""Training on a 3D grid of ranks (Plexus, arXiv 2505.04083): every rank
holds a block of the adjacency, of each weight and of each node matrix.

The ranks form a grid :math:`X \times Y \times Z`. The nodes are put in one
order by a double permutation (``permute.py``: random, then dealt by
degree) that balances every block's edges. A node matrix lies in a layout
``(rows, cols)`` of two axes (:class:`Layout`): rank
:math:`(c_x, c_y, c_z)` holds its rows' run :math:`c_{rows}` and its
columns' block :math:`c_{cols}`; of the run, the piece :math:`c_{spare}`
of the third (spare) axis when the sum that made it is kept scattered
(``Grid3D(sums="scatter")``, the default: :math:`N W / P` a rank), all of
it, replicated over that axis, when it is kept whole (``sums="whole"``;
the input features, which no sum made, too).

One layer :math:`\mathbf{H}' = \hat{\mathbf{A}}\mathbf{H}\mathbf{W}` that
starts in layout :math:`(a, b)`, spare axis :math:`e`:

1. aggregate: :math:`\hat{\mathbf{A}}_{e a}\mathbf{H}_{a b}` with this
   rank's adjacency block (targets' run on :math:`e`, sources' run on
   :math:`a`), summed over axis :math:`a` (a reduce-scatter, or an
   all-reduce): layout :math:`(e, b)`, spare :math:`a`; scattered, a chunk
   of columns at a time (the chunk of :math:`\mathbf{H}` gathered over
   :math:`e`, multiplied, its sums reduce-scattered, then the next);
2. transform: :math:`(\hat{\mathbf{A}}\mathbf{H})_{e b}\mathbf{W}_{b a}`
   with this rank's block of :math:`\mathbf{W}` (input columns' block on
   :math:`b`, output columns' on :math:`a`), summed over axis :math:`b`:
   layout :math:`(e, a)`, spare :math:`b`; scattered, a range of rows at a
   time (gathered over :math:`a`, multiplied, reduced into the pieces of
   :math:`b` that hold them; gathered again in the backward).

The output is laid out as the next layer's input, with the axes' roles
rotated: the input starts in ``yz`` (rows over y, columns over z), layer 0
aggregates with the block of rows over x and columns over y and ends in
``xy``, layer 1 uses the block ``zx`` and ends in ``zx``, layer 2 the block
``yz`` and ends in ``yz``, and so on. A rank holds one adjacency block per
layout its model uses (at most three for GCN and SAGE; GIN's two-layer
MLP turns the roles the other way, and uses the mirrored blocks), each about
:math:`E / (XY)`, :math:`E / (ZX)` or :math:`E / (YZ)` edges: :math:`E /
P^{2/3}` on a cube.

A scattered sum's backward gathers its pieces' gradients and a gather's
sums the gradients of every rank's copy (each copy is used with another
block), chunk by chunk as the forward; a whole sum's is the same all-reduce
of the gradients (``ops.py``). Elementwise steps run on any layout and on pieces;
dropout masks come from the hash of (global node, global column), so every
grid draws the masks of one process. The loss and the accuracies run where
the logits end: their column blocks are gathered along the cols axis (an
all-reduce of zero-padded blocks; its backward gives each block its
gradient) and one rank of each piece (or row run) counts it. A rank's gradient is
nonzero only in its blocks of the weights, from its rows: every parameter's
gradient is summed over all ranks.

The folder, by concern: the grid and its layouts (``grid.py``), the node
order (``permute.py``), a rank's share of the graph (``load.py``) and what
reads it in chunks (``readers.py``), the model
as steps (``program.py``), the autograd sums and the adjacency's entries
(``ops.py``), the model on the grid (``model.py``), one run (``runner.py``),
a grid folder written by the grid's ranks (``folder.py``),
the planner's predictions (``cost.py``) and the options (``strategy.py``).
"""
from pyg_dist.strategies.grid_3d.cost import (
    axis_costs,
    axis_key,
    collectives,
    measure,
    predict,
    program_of,
    step_bytes,
    step_calls,
    step_work,
)
from pyg_dist.strategies.grid_3d.folder import (
    GRID_FILE,
    grid_ranks,
    is_grid_folder,
    read_grid_folder,
    write_grid_folder,
)
from pyg_dist.strategies.grid_3d.grid import (
    INPUT,
    NAME,
    Grid3DPlace,
    Layout,
    grid_place,
    parse_grid,
)
from pyg_dist.strategies.grid_3d.load import Block, Grid3DData, NodeSums, load_grid_3d
from pyg_dist.strategies.grid_3d.model import Grid3DModel, Output
from pyg_dist.strategies.grid_3d.permute import balance, block_nonzeros, node_order
from pyg_dist.strategies.grid_3d.program import MODELS, RUNS, Step, compile_model, layouts
from pyg_dist.strategies.grid_3d.strategy import Grid3D, grids

__all__ = ["Grid3D", "Grid3DData", "Grid3DModel", "Grid3DPlace", "Layout", "Block", "NodeSums",
           "Output", "Step", "INPUT", "NAME", "MODELS", "RUNS", "load_grid_3d", "grid_place",
           "parse_grid", "grids", "compile_model", "layouts", "node_order", "balance",
           "block_nonzeros", "program_of", "collectives", "step_bytes", "step_calls", "step_work",
           "axis_key", "axis_costs", "measure", "predict",
           "GRID_FILE", "write_grid_folder", "read_grid_folder", "is_grid_folder",
           "grid_ranks"]
