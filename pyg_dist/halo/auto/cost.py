r""":class:`~pyg_dist.halo.Auto`'s cost model: pure arithmetic on halo sizes,
widths and a measured link (see :mod:`pyg_dist.halo.auto`).

``rows`` are halo rows per exchange: ``moved``, the most any rank sends plus
receives (forward and backward); ``fwd``, the most any rank moves forward;
``sent_fwd`` and ``sent_bwd``, the sums sent over ranks. ``link`` holds
``latency`` (s per exchange), ``bandwidth`` (bytes/s) and ``compute`` (s per
step).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from pyg_dist.halo.compress import Codec, get_codec

__all__ = ["CostModel", "row_bytes", "tau"]


def row_bytes(width: int, codec: str | None) -> int:
    """Bytes of one row of ``width`` under compression ``codec``."""
    found = get_codec(codec)
    return 4 * width if found is None else found.row_bytes(width)


def tau(moved_rows: float, nbytes: int, link: dict[str, float], exchanges: int = 2) -> float:
    """Seconds one step's ``exchanges`` (rows forward, gradients backward)
    moving ``moved_rows`` rows of ``nbytes`` each take."""
    return exchanges * link["latency"] + moved_rows * nbytes / link["bandwidth"]


@dataclass
class CostModel:
    """The choices of :class:`~pyg_dist.halo.Auto` with its arguments
    ``negligible``, ``max_staleness`` and compression ``codec``."""

    negligible: float
    max_staleness: int
    codec: Codec | None

    def codec_for(self, width: int) -> str | None:
        """The compression, where it makes rows of ``width`` smaller."""
        if self.codec is None or self.codec.row_bytes(width) >= 4 * width:
            return None
        return self.codec.name

    def static_row(self, width: int) -> int:
        """Bytes of one row of a static input of ``width`` as it is fetched."""
        return row_bytes(width, self.codec_for(width))

    def exchange_plan(self, width: int, rows: dict[str, float],
                      link: dict[str, float]) -> tuple[str | None, int]:
        """The compression and staleness for exchanging rows of ``width``."""
        budget = self.negligible * link["compute"]
        if tau(rows["moved"], row_bytes(width, None), link) <= budget:
            return None, 1
        codec = self.codec_for(width)
        seconds = tau(rows["moved"], row_bytes(width, codec), link)
        needed = max(1, math.ceil(seconds / max(budget, 1e-12)))
        return codec, min(self.max_staleness, 1 << (needed - 1).bit_length())

    def cache_pays(self, static_width: int, width: int, rows: dict[str, float],
                   link: dict[str, float], codec: str | None, every: int, steps: int,
                   spmm: dict[int, float]) -> bool:
        """Whether fetching a static input of ``static_width`` once and
        aggregating it every step beats exchanging transformed rows of
        ``width`` (with ``codec`` every ``every`` steps) for the remaining
        ``steps``; ``spmm`` holds seconds of one aggregation per width. A
        static input no wider than the transformed rows is always cached;
        when both take the same time, within ``negligible`` of the run's
        compute, the one that sends fewer bytes wins."""
        if static_width <= width:
            return True
        static_row = self.static_row(static_width)
        once = tau(rows["fwd"], static_row, link, exchanges=1)
        cache = once + steps * spmm[static_width]
        seconds = tau(rows["moved"], row_bytes(width, codec), link)
        exchange = steps * (seconds / every + 2 * spmm[width])
        if abs(cache - exchange) > self.negligible * link["compute"] * steps:
            return cache < exchange
        # as fast either way, within the negligible share of the run: fewer bytes
        cached_bytes = rows["sent_fwd"] * static_row
        exchanged_bytes = (math.ceil(steps / every) * (rows["sent_fwd"] + rows["sent_bwd"])
                           * row_bytes(width, codec))
        return cached_bytes <= exchanged_bytes

    def predict(self, rows: dict[str, float], width: int, codec: str | None, every: int,
                steps: int, link: dict[str, float], once: bool,
                first: int = 0) -> dict[str, float]:
        """Bytes all ranks will send and seconds the average rank will wait
        over ``steps`` steps whose first refresh is ``first`` steps away
        (``once``: a static input's halo, fetched one time)."""
        if once:
            sent = rows["sent_fwd"] * row_bytes(width, codec)
            seconds = tau(rows["fwd"], row_bytes(width, codec), link, exchanges=1)
            return {"predicted_bytes": int(sent), "predicted_seconds": round(seconds, 6)}
        refreshes = math.ceil(max(0, steps - first) / every)
        row = row_bytes(width, codec)
        sent = refreshes * (rows["sent_fwd"] + rows["sent_bwd"]) * row
        return {"predicted_bytes": int(sent),
                "predicted_seconds": round(refreshes * tau(rows["moved"], row, link), 6)}
