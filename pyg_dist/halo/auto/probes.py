""":class:`~pyg_dist.halo.Auto`'s measurements: the partition's halo sizes,
the link, the compute of a warm-up step and the aggregation, each reduced
over all ranks (collective: every rank calls them at the same step)."""
from __future__ import annotations

import math
import time

import torch

from pyg_dist.halo.ledger import APART, Ledger
from pyg_dist.halo.policy import FetchContext
from pyg_dist.ops.spmm import spmm
from pyg_dist.runtime import distributed

__all__ = ["halo_share", "halo_rows", "warmup_steps", "probe_link", "time_spmm",
           "PROBE_BYTES", "PROBE"]

#: Most bytes the busiest rank moves in the wide probe exchange (~8 ms at
#: 1 Gbit/s); below it the probe is one forward exchange of the layer. The
#: probe's traffic counts, and should stay small next to a short run's frugal
#: choice: on Cora's 200 epochs the probes add 5% to ``stale:4`` + int8's bytes.
PROBE_BYTES = 2**20
#: The ledger name of the probe exchanges.
PROBE = "auto/probe"


def halo_share(ctx: FetchContext) -> float:
    """The share of a node's in-neighbours held as halo, averaged over the
    nodes of all ranks that have any (from the graph alone: nothing is
    exchanged but the two sums)."""
    graph = ctx.graph
    remote = (graph.col >= graph.num_owned).to(torch.float64).cumsum(0)
    remote = torch.cat([remote.new_zeros(1), remote])
    halo = remote[graph.rowptr[1:]] - remote[graph.rowptr[:-1]]
    degree = (graph.rowptr[1:] - graph.rowptr[:-1]).to(torch.float64)
    some = degree > 0
    total, nodes = distributed.all_reduce_values(
        [float((halo[some] / degree[some]).sum()), float(some.sum())], "sum", ctx.channel.group)
    return total / max(nodes, 1.0)


def halo_rows(ctx: FetchContext) -> dict[str, float]:
    """Halo rows per exchange: the most any rank moves (sends plus receives,
    forward and backward) or receives forward, and the sum sent over ranks."""
    plan, group = ctx.channel.plan, ctx.channel.group
    top = distributed.all_reduce_values([2.0 * (plan.num_send + plan.num_halo),
                                         float(plan.num_send + plan.num_halo)], "max", group)
    total = distributed.all_reduce_values([float(plan.num_send), float(plan.num_halo)],
                                          "sum", group)
    return {"moved": top[0], "fwd": top[1], "sent_fwd": total[0], "sent_bwd": total[1]}


def warmup_steps(ledger: Ledger, starts: dict[int, float],
                 step: int) -> tuple[float, float, float]:
    """This rank's wall seconds, bytes moved (sent and received) and
    exchanges per step, over the warm-up steps after the first and before
    ``step`` (``starts``: the wall clock at each step's start)."""
    first, last = 1, step
    moved = exchanges = 0.0
    for (s, _, direction), e in ledger.entries.items():
        if first <= s < last and direction not in APART:
            moved += e.bytes_sent + e.bytes_recv
            exchanges += e.exchanges
    steps = last - first
    return (starts[last] - starts[first]) / steps, moved / steps, exchanges / steps


def probe_link(ctx: FetchContext, width: int) -> tuple[float, float]:
    """Latency (s) and bandwidth (bytes/s) of the link, from timed exchanges
    of rows along the halo plan with all ranks starting together: one column
    wide (mostly latency) and as wide as the layer's ``width`` (at most
    :data:`PROBE_BYTES`), the better of two each, the slowest rank's.
    Booked in the ledger as :data:`PROBE`."""
    channel, plan = ctx.channel, ctx.channel.plan
    rows = distributed.all_reduce_values([float(plan.num_send + plan.num_halo)], "max",
                                         channel.group)[0]
    wide = max(2, int(min(width, PROBE_BYTES / (4 * max(rows, 1.0)))))
    seconds = []
    for columns in (1, wide):
        payload = torch.ones(plan.num_send, columns, device=plan.device)  # no RNG drawn
        best = math.inf
        for _ in range(2):
            distributed.barrier(channel.group)
            start = time.perf_counter()
            channel.move(payload, plan.send_counts, plan.recv_counts, PROBE, "fwd")
            best = min(best, time.perf_counter() - start)
        seconds.append(best)
    small, large = distributed.all_reduce_values(seconds, "max", channel.group)
    extra = 4.0 * (wide - 1) * rows
    bandwidth = extra / (large - small) if large > small else 4.0 * wide * rows / large
    return max(small - 4.0 * rows / bandwidth, 0.0), bandwidth


def time_spmm(ctx: FetchContext, widths: list[int]) -> dict[int, float]:
    """Seconds of one forward :func:`~pyg_dist.ops.spmm` over this rank's
    graph per width (the best of two), the slowest rank's."""
    graph = ctx.graph
    seconds = []
    for width in widths:
        x = torch.ones(graph.num_owned, width, device=graph.device)  # no RNG drawn
        halo = torch.ones(graph.num_halo, width, device=graph.device)
        best = math.inf
        for _ in range(2):
            start = time.perf_counter()
            spmm(graph.rowptr, graph.col, x, None, "sum", x_halo=halo)
            best = min(best, time.perf_counter() - start)
        seconds.append(best)
    top = distributed.all_reduce_values(seconds, "max", ctx.channel.group)
    return dict(zip(widths, top))
