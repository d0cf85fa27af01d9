"""``pyg-dist plan``'s table: the best few strategies of each accuracy risk,
their predicted epoch time and bytes per epoch each against exact training,
the choice marked, and why each of the others lost (``--json`` prints the
rows as JSON lines instead)."""
from __future__ import annotations

from typing import Any

from pyg_dist.strategies.cost import RISKS

__all__ = ["plan_table", "EXACT", "PER_RISK"]

#: The row every other is measured against: plain exact training.
EXACT = "graph-parallel exact"
#: Rows shown per risk, fastest first (the choice always among them).
PER_RISK = 3
#: Two predictions this close (relative) are equally fast to the planner
#: (:data:`pyg_dist.strategies.planner.TIE`).
_TIE = 0.01


def plan_table(rows: list[dict[str, Any]], choice: dict[str, Any]) -> list[str]:
    """The lines of the table.

    Args:
        rows (list[dict]): Every candidate's row (``Plan.table()``, fastest
            first): ``strategy``, ``risk``, ``predicted_step_s``,
            ``predicted_epoch_s``, ``predicted_bytes_per_epoch``, ``chosen``.
        choice (dict): The plan's summary: ``choice``, ``accept``,
            ``epochs``, ``parts``, ``probe_seconds``, ``probe`` (with
            ``step_seconds`` measured).
    """
    chosen = next(r for r in rows if r["chosen"])
    exact = next((r for r in rows if r["strategy"] == EXACT),
                 next((r for r in rows if r["risk"] == "exact"), None))
    accept = choice["accept"]
    shown: list[dict[str, Any]] = []
    for risk in RISKS:
        of_risk = [r for r in rows if r["risk"] == risk]
        best = of_risk[:PER_RISK]
        if chosen in of_risk and chosen not in best:
            best = of_risk[:PER_RISK - 1] + [chosen]
        if exact in of_risk and exact not in best:
            best = best + [exact]
        shown += best
    table = [["risk", "", "strategy", "epoch", "vs exact", "bytes/epoch", "vs exact",
              "why not chosen"]]
    allowed = [r["predicted_step_s"] for r in rows if RISKS.index(r["risk"]) <= RISKS.index(accept)]
    fastest = min(allowed, default=chosen["predicted_step_s"])
    epoch_ref = exact["predicted_epoch_s"] if exact else None
    bytes_ref = exact["predicted_bytes_per_epoch"] if exact else None
    for row in shown:
        table.append([row["risk"], "*" if row is chosen else "", row["strategy"],
                      _seconds(row["predicted_epoch_s"]),
                      _ratio(row["predicted_epoch_s"], epoch_ref),
                      _bytes(row["predicted_bytes_per_epoch"]),
                      _ratio(row["predicted_bytes_per_epoch"], bytes_ref),
                      "(chosen)" if row is chosen else _why_not(row, chosen, accept, fastest)])
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    right = {3, 4, 5, 6}
    lines = [*_head(choice, len(rows)), ""]
    for line in table:
        cells = [cell.rjust(w) if i in right else cell.ljust(w)
                 for i, (cell, w) in enumerate(zip(line, widths))]
        lines.append(("  ".join(cells[:2]) + " " + "  ".join(cells[2:])).rstrip())
    left = len(rows) - len(shown)
    lines.append("")
    lines.append(f"* chosen at --accept {accept}: {chosen['strategy']}")
    lines.append(f"  'pyg-dist train --strategy auto --accept {accept}' with the same options "
                 f"probes again and trains it")
    if left:
        lines.append(f"{left} more predictions, slower than those shown of their risk; "
                     f"--json prints every one")
    return lines


def _head(choice: dict[str, Any], count: int) -> list[str]:
    probe = choice.get("probe", {})
    return [f"{count} strategies predicted for {choice['epochs']} epochs on {choice['parts']} "
            f"ranks (probe {choice.get('probe_seconds', 0):.1f} s, measured step "
            f"{_seconds(probe.get('step_seconds', 0))})",
            f"epoch: a training step and the evaluations' share; vs exact: against {EXACT}"]


def _why_not(row: dict[str, Any], chosen: dict[str, Any], accept: str, fastest: float) -> str:
    """Why the planner took ``chosen`` over ``row``, as it chose
    (:func:`pyg_dist.strategies.planner.choose`): its risk; its speed against
    ``fastest``, the fastest step at the accepted risk; or, equally fast,
    its bytes, then its speed."""
    if RISKS.index(row["risk"]) > RISKS.index(accept):
        return f"risk {row['risk']} above --accept {accept}"
    slower = 100 * (row["predicted_epoch_s"] / chosen["predicted_epoch_s"] - 1)
    if row["predicted_step_s"] > fastest * (1 + _TIE):
        return f"{slower:.1f}% slower per epoch"
    mine, best = row["predicted_bytes_per_epoch"], chosen["predicted_bytes_per_epoch"]
    if mine > best:
        shown = _bytes(mine), _bytes(best)
        more = f" ({mine:,.0f} B against {best:,.0f} B)" if shown[0] == shown[1] else ""
        return f"as fast (within 1%), more bytes{more}"
    return f"as fast (within 1%) and as many bytes, {max(slower, 0):.2f}% slower per epoch"


def _seconds(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.1f} ms"


def _ratio(value: float, reference: float | None) -> str:
    if not reference:
        return "-"
    return f"{value / reference:.2f}x"


def _bytes(count: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{int(count)} B"
