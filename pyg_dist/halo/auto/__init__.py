r"""``Auto()``: each layer's halo policy chosen by a cost model from what the
first training steps measure.

A graph cut so well that its halo holds under ``isolate_below`` (5%) of the
average node's in-neighbours (over all ranks; known from the partition, before
anything is sent) is trained :class:`Isolated`: every exchange would cost
latency and a wait for the slowest rank for a few percent of each
neighbourhood. (Cora's METIS cuts at 2 and 4 parts leave 2.8% and 4.3% of the
neighbours remote, and isolated training stays within a point of exact.) A
layer that needs every halo row (it declares ``complete_halo = True``, as
:class:`~pyg_dist.nn.DistHGTConv` does) is never isolated, and chooses as
below. Otherwise every layer chooses for itself, as follows.

A layer whose static input (layer 0's features) is no wider than its output
caches that input's halo from the first step: aggregating first costs the
same, and nothing crosses the network after the one fetch. For ``warmup``
steps every other layer runs the most frugal option it may choose: the halo
exchanged at step 0 with the compression, then reused (:class:`Stale` with
``every = min(warmup, max_staleness)``; a layer with a wider static input
exchanges its transformed rows), so measuring costs a short run nothing and
the compute of a step is timed without exchanges in it. Then, at the same step
on every rank and from numbers reduced over all ranks:

* **the link**: latency :math:`\alpha` per exchange and bandwidth
  :math:`\beta`, from timed exchanges of narrow and wide rows along the halo
  plan, all ranks starting together (booked in the ledger as ``auto/probe``);
* **compute**: the wall time of a warm-up step minus what its exchanges take
  by that link model, on the slowest rank;
* **aggregation**: one timed :func:`~pyg_dist.ops.spmm` over the rank's own
  graph per width in question.

For every layer, the exchanges of one step (rows forward, gradients backward)
cost :math:`\tau = 2\alpha + R\, b(F, c) / \beta`: :math:`R` the rows the
busiest rank sends and receives, :math:`b` the bytes of a row of width
:math:`F` under compression :math:`c`. A layer whose :math:`\tau` is under
``negligible`` of the step's compute stays exact. Otherwise it gets the
compression (``compress``, int8 by default, when it makes rows smaller) and the
smallest staleness :math:`k \le` ``max_staleness`` with
:math:`\tau / k` under ``negligible`` of compute (:class:`Stale` with
``every=k``).

A layer with a static input chooses between fetching that input's halo once
(width :math:`F_{in}`) and aggregating it every step, or exchanging its
transformed rows (width :math:`F_{out}`) every step with the staleness and
compression above; over the :math:`E` remaining planned steps:

.. math::
    T_{cache} = \alpha + \frac{R_{fwd} \cdot 4 F_{in}}{\beta} + E\, t_{spmm}(F_{in}),
    \qquad
    T_{exchange} = E \left(\frac{\tau(F_{out})}{k} + 2\, t_{spmm}(F_{out})\right)

and picks the smaller. A chosen staleness continues the warm-up's schedule
(the rows reused at the decision are as old as they would be under the chosen
:class:`Stale` from step 0); a choice that exchanges every step refreshes the
rows at the decision, and the halo gradients collected in warm-up reach their
owners with that step's exchange or the next refresh. The choice, with
predicted bytes (all ranks) and waiting time (average rank), goes into the
graph's record (``data.ledger.choices``, a
:class:`~pyg_dist.halo.choices.HaloChoices`, whose
:meth:`~pyg_dist.halo.choices.HaloChoices.predicted` answers it);
:func:`~pyg_dist.train.train` adds what was measured.

The state machine is :mod:`~pyg_dist.halo.auto.policy`, the cost model
:mod:`~pyg_dist.halo.auto.cost` (pure) and the measurements
:mod:`~pyg_dist.halo.auto.probes`.
"""
from pyg_dist.halo.auto.policy import DEFAULT_EPOCHS, Auto, AutoState

__all__ = ["Auto", "AutoState", "DEFAULT_EPOCHS"]
