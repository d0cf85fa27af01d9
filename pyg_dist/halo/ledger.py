"""The ledger: what every layer sent and received, step by step."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from pyg_dist.halo.choices import HaloChoices

__all__ = ["Ledger", "LedgerEntry", "DIRECTIONS", "GRADIENTS", "REGROUP", "STAGE",
           "ALL_TO_ALL", "GATHER", "KEEP_STEPS", "FOLDED"]

#: Directions of halo traffic.
DIRECTIONS = ("fwd", "bwd", "eval")
#: The direction of the gradient all-reduce (layer ``"gradients"``), counted
#: apart from halo traffic.
GRADIENTS = "grad"
#: The direction of loading a new group of clusters in gradient-only training
#: (layer ``"regroup"``: the bytes read, the seconds).
REGROUP = "regroup"
#: The direction of activations and their gradients crossing from one layer
#: stage to the next in a layer pipeline (layers ``"stages/fwd"``,
#: ``"stages/bwd"``; seconds are the waits for them).
STAGE = "stage"
#: The direction of feature-parallel training's all-to-alls between column
#: slices and row blocks (forward and backward; seconds are the waits).
ALL_TO_ALL = "all_to_all"
#: The direction of rows gathered by global id (:func:`pyg_dist.halo.gather`:
#: layers ``"gather/ids"`` for the ids asked, ``"gather/rows"`` for the rows
#: and ``"gather/grads"`` for their gradients going back to the owners).
GATHER = "gather"
#: Directions counted apart from halo traffic.
APART = (GRADIENTS, REGROUP, STAGE, ALL_TO_ALL, GATHER)
#: The fields of :class:`LedgerEntry` that :meth:`Ledger.fold` sums.
_SUMMED = ("bytes_sent", "bytes_recv", "rows_sent", "partial_sums_sent", "exchanges",
           "skipped", "seconds", "overlapped")


@dataclass
class LedgerEntry:
    """One layer's halo traffic in one step and one direction.

    Attributes:
        step: Training step (the ledger's counter when the exchange happened);
            ``-1`` for the sum of the steps the ledger folded.
        layer: Name of the exchange: the layer's (module path under
            :func:`to_distributed`, else ``layer<k>`` in order of first use),
            ``<layer>/flags`` for Adaptive's announcements, ``degree`` for the
            halo degrees of a weighted GCN, ``cover`` for the setup of a
            pre-aggregated graph, ``stages/fwd`` and ``stages/bwd``
            for a layer pipeline's stage-boundary traffic.
        direction: ``"fwd"`` (halo rows in training), ``"bwd"`` (halo gradients),
            ``"eval"`` (halo rows in evaluation), ``"grad"`` (the parameter
            gradients' all-reduce, layer ``"gradients"``), ``"regroup"``
            (loading clusters in gradient-only training), ``"stage"`` (a
            layer pipeline's activations and gradients between stages) or
            ``"all_to_all"`` (feature-parallel training's all-to-alls between
            column slices and row blocks, ``<layer>/rows`` and ``<layer>/columns``).
        bytes_sent / bytes_recv: Payload bytes this rank sent / received (for
            ``"grad"``: the bytes this rank hands the all-reduce).
        rows_sent: Halo rows this rank sent as they are (node rows forward,
            their gradients backward).
        partial_sums_sent: Partial sums this rank sent (forward) or their
            gradients (backward), on a pre-aggregated graph (see
            :mod:`pyg_dist.halo.cover`).
        exchanges: Exchanges done (0 when the policy reused what it had).
        skipped: Exchanges the policy skipped.
        staleness: Age in steps of the halo values in use (0 = fresh).
        seconds: Wall time spent communicating (waiting included).
        overlapped: Part of ``seconds`` hidden behind computation.
    """

    step: int
    layer: str
    direction: str
    bytes_sent: int = 0
    bytes_recv: int = 0
    rows_sent: int = 0
    partial_sums_sent: int = 0
    exchanges: int = 0
    skipped: int = 0
    staleness: int = 0
    seconds: float = 0.0
    overlapped: float = 0.0


#: Steps whose entries a :class:`Ledger` keeps one by one by default.
KEEP_STEPS = 64
#: The step under which a :class:`Ledger` books the sum of the steps it folded.
FOLDED = -1


@dataclass
class Ledger:
    """Per-rank record of halo traffic, per layer, step and direction.

    The training loop advances ``step`` once per optimisation step
    (:meth:`~pyg_dist.halo.Ledger.next_step`); exchanges add to the entry of
    the current step.

    A ledger keeps the entries of its last ``keep_steps`` steps (at least;
    up to twice as many) one by one and folds older steps into one entry per
    layer and direction, booked at step ``-1``: a long run's
    ledger stays the same size instead of growing by an entry per layer,
    direction and step, and every total over the whole run (:meth:`totals`)
    stays what it was. One step's totals are there for the kept steps only.

    Attributes:
        step (int): The current optimisation step. (default: :obj:`0`)
        entries (dict): The traffic of each ``(step, layer, direction)``, a
            ``LedgerEntry`` (its bytes, exchanges, skipped exchanges, seconds,
            overlapped seconds and staleness).
        notes (dict[str, dict]): What other parts of training decided, for
            printing (the gradient all-reduce's choice, a layer pipeline's
            schedule), by name.
        choices (``HaloChoices``): What a halo policy that chooses for itself
            (:class:`~pyg_dist.halo.Auto`) chose per layer, with its
            predicted bytes and seconds.
        keep_steps (int, optional): Steps kept one by one; :obj:`None` keeps
            every step. (default: :obj:`64`)
        folded_through (int): The last step folded (``-1``: none).
    """

    step: int = 0
    entries: dict[tuple[int, str, str], LedgerEntry] = field(default_factory=dict)
    notes: dict[str, dict[str, Any]] = field(default_factory=dict)
    choices: HaloChoices = field(default_factory=HaloChoices)
    keep_steps: int | None = KEEP_STEPS
    folded_through: int = -1
    #: Per layer with a recorded choice: the training traffic of the folded
    #: steps from the choice's step on (for layer_totals).
    _folded_layers: dict[str, dict[str, float]] = field(default_factory=dict, repr=False,
                                                        init=False)

    def next_step(self) -> int:
        """Advances ``step`` by one and returns it; folds the steps before the
        last ``keep_steps`` once twice as many are kept."""
        self.step += 1
        keep = self.keep_steps
        if keep is not None and self.step - self.folded_through > 2 * keep:
            self.fold(self.step - keep)
        return self.step

    def fold(self, before: int) -> None:
        """Folds the entries of steps ``0 .. before - 1`` into one entry per
        layer and direction at step ``-1`` (bytes, exchanges and
        seconds summed, the largest staleness kept).

        Args:
            before (int): The first step kept one by one.
        """
        old = [k for k in self.entries if 0 <= k[0] < before]
        steps: dict[str, set[int]] = {}
        for key in sorted(old):
            entry = self.entries.pop(key)
            s, layer, direction = key
            into = self.entries.get((FOLDED, layer, direction))
            if into is None:
                into = self.entries[(FOLDED, layer, direction)] = LedgerEntry(
                    FOLDED, layer, direction)
            for name in _SUMMED:
                setattr(into, name, getattr(into, name) + getattr(entry, name))
            into.staleness = max(into.staleness, entry.staleness)
            choice = self.choices.layers.get(layer)
            if choice is not None and direction in ("fwd", "bwd") and s >= choice.from_step:
                acc = self._folded_layers.setdefault(layer, {"bytes_sent": 0.0,
                                                             "seconds": 0.0, "steps": 0.0})
                acc["bytes_sent"] += entry.bytes_sent
                acc["seconds"] += entry.seconds
                steps.setdefault(layer, set()).add(s)
        for layer, seen in steps.items():
            self._folded_layers[layer]["steps"] += len(seen)
        self.folded_through = max(self.folded_through, before - 1)

    def record(self, layer: str, direction: str, **amounts: float) -> LedgerEntry:
        """Adds ``amounts`` (fields of ``LedgerEntry``) to the current step's
        entry; ``staleness`` is kept as the maximum, not summed."""
        assert direction in (*DIRECTIONS, *APART), f"direction must be one of {DIRECTIONS}"
        key = (self.step, layer, direction)
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = LedgerEntry(self.step, layer, direction)
        for name, amount in amounts.items():
            if name == "staleness":
                entry.staleness = max(entry.staleness, int(amount))
            else:
                setattr(entry, name, getattr(entry, name) + amount)
        return entry

    def exchanges(self, layer: str, direction: str) -> int:
        """Exchanges of ``layer`` in ``direction`` booked so far in the current step.

        Args:
            layer (str): The exchange's name.
            direction (str): Its direction.
        """
        entry = self.entries.get((self.step, layer, direction))
        return 0 if entry is None else entry.exchanges

    def rows(self) -> list[dict[str, Any]]:
        """Every entry as a dict, ordered by step, layer and direction (the
        folded steps' sums first, at step ``-1``)."""
        return [asdict(self.entries[k]) for k in sorted(self.entries)]

    def totals(self, step: int | None = None) -> dict[str, float]:
        """Sums over all entries (or one step's): bytes per direction, and of
        the halo traffic exchanges, skipped, seconds, overlapped and the
        largest staleness; the gradient all-reduce's and regrouping's seconds
        as ``seconds_grad``, ``overlapped_grad``, ``seconds_regroup``."""
        if step is not None and 0 <= step <= self.folded_through:
            raise ValueError(f"Ledger.totals(step={step}): steps up to {self.folded_through} "
                             f"were folded into step {FOLDED}; ask for a later step, or keep "
                             f"every step with Ledger(keep_steps=None)")
        out: dict[str, float] = defaultdict(float)
        for (s, _, direction), e in self.entries.items():
            if step is not None and s != step:
                continue
            out[f"bytes_{direction}"] += e.bytes_sent
            out[f"bytes_recv_{direction}"] += e.bytes_recv
            if direction in APART:
                out[f"seconds_{direction}"] += e.seconds
                out[f"overlapped_{direction}"] += e.overlapped
                continue
            out["exchanges"] += e.exchanges
            out["skipped"] += e.skipped
            out["seconds"] += e.seconds
            out["overlapped"] += e.overlapped
            out["staleness"] = max(out["staleness"], e.staleness)
        for d in (*DIRECTIONS, *APART):
            out.setdefault(f"bytes_{d}", 0.0)
            out.setdefault(f"bytes_recv_{d}", 0.0)
        for d in APART:
            out.setdefault(f"seconds_{d}", 0.0)
            out.setdefault(f"overlapped_{d}", 0.0)
        return dict(out)

    def layer_totals(self, layer: str, since: int = 0) -> dict[str, float]:
        """Training traffic of ``layer`` (forward and backward) from step
        ``since`` on: ``bytes_sent``, ``seconds`` (blocked) and ``steps`` seen.
        Of the folded steps, those from the step of the layer's recorded
        choice on count (the one ``since`` a caller passes)."""
        out = {"bytes_sent": 0.0, "seconds": 0.0}
        steps = set()
        for (s, name, direction), e in self.entries.items():
            if name == layer and direction in ("fwd", "bwd") and s >= since and s != FOLDED:
                out["bytes_sent"] += e.bytes_sent
                out["seconds"] += e.seconds
                steps.add(s)
        out["steps"] = float(len(steps))
        folded = self._folded_layers.get(layer)
        if folded is not None and since <= self.folded_through:
            for key in out:
                out[key] += folded[key]
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "rows": self.rows(), "notes": self.notes,
                "choices": self.choices.state_dict(), "folded_through": self.folded_through,
                "folded_layers": {k: dict(v) for k, v in self._folded_layers.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.folded_through = int(state.get("folded_through", -1))
        self._folded_layers = {k: dict(v) for k, v in state.get("folded_layers", {}).items()}
        self.entries = {
            (r["step"], r["layer"], r["direction"]): LedgerEntry(**r) for r in state["rows"]
        }
        self.notes = dict(state.get("notes", {}))
        self.choices = HaloChoices()
        if state.get("choices") is not None:
            self.choices.load_state_dict(state["choices"])
