"""Halo exchange: fetching the rows of remote neighbours, behind policies."""
from __future__ import annotations

from typing import Any

from torch import Tensor

from pyg_dist.halo.comm import TRANSPORTS, exchange_rows
from pyg_dist.halo.exchange import HaloChannel, exchange_halo
from pyg_dist.halo.ledger import Ledger, LedgerEntry
from pyg_dist.halo.plan import HaloPlan

__all__ = [
    "fetch",
    "exchange_halo",
    "exchange_rows",
    "HaloChannel",
    "HaloPlan",
    "Ledger",
    "LedgerEntry",
    "TRANSPORTS",
]


def fetch(x: Tensor, edge_index: Any, layer: Any) -> Tensor:
    r"""The halo rows of ``x`` that ``layer`` aggregates over ``edge_index``
    (a :class:`~pyg_dist.DistEdgeIndex`), exchanged exactly.

    Shapes:
        - **input:** ``x`` :obj:`[num_owned, F]`
        - **output:** :obj:`[num_halo, F]`
    """
    channel = edge_index.channel
    return exchange_halo(x, channel, channel.ledger.layer_name(layer))
