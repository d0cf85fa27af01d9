r"""The GPU regime of the namespace testbed: how much faster one H200 would
run a rank's epoch, and the link rate that gives the testbed the GPU
cluster's communication share.

On a GPU cluster an exact epoch takes :math:`t_{gpu} + B / r` (compute, then
``B`` halo and gradient bytes over a link of rate ``r``); on the testbed it
takes :math:`t_{cpu} + B / r'`. Shaping the testbed's links to

.. math::
    r' = r / f, \qquad f = t_{cpu} / t_{gpu}

makes every term of the testbed's epoch exactly ``f`` times the GPU
cluster's, so communication takes the same share of an epoch, and every
policy's time relative to exact is what it would be on the GPU cluster.
(Latency is not scaled: the kernel has no netem to add delay, and gloo's
per-message cost on the testbed stays as it is.)

:math:`t_{cpu}` is measured: the median epoch of exact training on the
testbed with unshaped links, less the time it waited for halo rows. The GPU's
epoch is

.. math::
    t_{gpu} = t_{floor} + \sum_{k} \max\left(\frac{\text{bytes}_k}{\text{HBM}},
    \frac{\text{flops}_k}{\text{peak}}\right)

over the kernels of one training step on the rank's part (the roofline of
each kernel), where :math:`t_{floor}` is the per-epoch cost that does not
shrink with the graph (Python, dispatch, kernel launches, tiny exchanges):
measured on the testbed as the median epoch of the same model and policy on
a graph of a few hundred nodes, and assumed the same on the GPU host's CPU.
The H200's figures: 4.8 TB/s of HBM3e, 67 TFLOP/s fp32 (PyTorch's default
for fp32 matmuls, TF32 off). A kernel's bytes count every byte it reads and
writes once, with no cache reuse of gathered rows (more bytes than the GPU
moves, so :math:`t_{gpu}` is if anything too large, ``f`` too small and the
regime's communication share too low: the figures understate what the
policies save).

Kernels per GCN layer (``a -> b`` features, ``n`` owned rows, ``m`` entries of
the local adjacency with self-loops, aggregating at width ``g``: ``a`` when
the input is a static, cached layer-0 input or no wider than ``b``, else ``b``,
as :class:`~pyg_dist.nn.DistGCNConv` does):

=====================  ===============================  ======================
kernel                 bytes                            flops
=====================  ===============================  ======================
SpMM (fwd; bwd unless  ``m (8 + 4 + 4g) + 8n + 4ng``    ``2 m g``
static input)
matmul (fwd, grad W,   ``4 (n a + a b + n b)``          ``2 n a b``
grad x unless layer 0)
bias, ReLU, dropout    ``3 · 2 · 4 n b`` fwd, as much   ``3 n b``
                       bwd (hidden layers)
halo gather/scatter    ``2 · 4 (s + h) g`` fwd, as      --
                       much bwd (unless static)
loss                   ``4 · 4 n C``                     ``8 n C``
=====================  ===============================  ======================

(``s`` rows sent, ``h`` halo rows; Adam's update of a few thousand parameters
is left out.)
"""
from __future__ import annotations

from dataclasses import dataclass

#: The H200 SXM's HBM3e bandwidth (bytes/s) and fp32 (non-tensor-core) peak.
H200 = {"hbm": 4.8e12, "fp32": 67e12}

#: The regimes: the GPU cluster's link rate in bits/s.
REGIMES = {"gpu-10gbe": 10e9, "gpu-100gbit": 100e9}


@dataclass
class Part:
    """The sizes of one rank's part a roofline needs.

    Attributes:
        owned: Owned rows ``n``.
        entries: Entries of the local adjacency with one self-loop per row ``m``.
        halo: Halo rows ``h``.
        sent: Rows sent ``s``.
    """

    owned: int
    entries: int
    halo: int
    sent: int


def kernel_seconds(nbytes: float, flops: float, gpu: dict[str, float] = H200) -> float:
    """One kernel's roofline time: the larger of its memory and its arithmetic time."""
    return max(nbytes / gpu["hbm"], flops / gpu["fp32"])


def gcn_step_seconds(part: Part, widths: list[int], cached_input: bool = True,
                     gpu: dict[str, float] = H200) -> dict[str, float]:
    """Roofline seconds of one training step of a GCN with ``widths``
    (``[in, hidden..., classes]``) on ``part``, per kind of kernel."""
    n, m, h, s = part.owned, part.entries, part.halo, part.sent
    out = {"spmm": 0.0, "matmul": 0.0, "elementwise": 0.0, "halo": 0.0, "loss": 0.0}
    last = len(widths) - 2
    for layer, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        static = layer == 0 and cached_input
        g = a if static or a <= b else b
        spmm = kernel_seconds(m * (8 + 4 + 4 * g) + 8 * n + 4 * n * g, 2 * m * g, gpu)
        out["spmm"] += spmm if static else 2 * spmm
        matmul = kernel_seconds(4 * (n * a + a * b + n * b), 2 * n * a * b, gpu)
        out["matmul"] += matmul * (2 if layer == 0 else 3)
        if layer < last:
            out["elementwise"] += 2 * kernel_seconds(3 * 2 * 4 * n * b, 3 * n * b, gpu)
        if not static:
            out["halo"] += 2 * kernel_seconds(2 * 4 * (s + h) * g, 0, gpu)
    classes = widths[-1]
    out["loss"] = kernel_seconds(4 * 4 * n * classes, 8 * n * classes, gpu)
    return out


def speedup(cpu_compute: float, floor: float, roofline: float) -> float:
    """``f``: the testbed's compute per epoch over the GPU's (``floor`` plus
    the ``roofline`` seconds of the kernels)."""
    return cpu_compute / (floor + roofline)


def shaped_rate(regime: str, factor: float) -> str:
    """The testbed's link rate for ``regime`` at speedup ``factor``, in tc's
    spelling (whole kbit/s)."""
    if regime not in REGIMES:
        raise SystemExit(f"unknown regime '{regime}'; use one of {', '.join(REGIMES)}")
    return f"{max(1, round(REGIMES[regime] / factor / 1e3))}kbit"
