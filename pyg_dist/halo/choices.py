"""What a policy that chooses for itself (:class:`~pyg_dist.halo.Auto`) found
and chose on one graph: the record it keeps in the graph's ledger
(:attr:`Ledger.choices <pyg_dist.halo.Ledger.choices>`), checkpointed with it,
and the predictions it answers with (:meth:`HaloChoices.predicted`)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["HaloChoices", "LayerChoice", "Link"]


@dataclass
class LayerChoice:
    """One layer's chosen policy and what it will cost.

    Attributes:
        choice: The chosen policy's spec (``"stale:4,compress=int8"``).
        from_step: The training step it runs from.
        cache_input: Whether the halo of the layer's static input is cached.
        steps: The planned steps it was chosen for.
        predicted_bytes: Bytes all ranks will send over those steps.
        predicted_seconds: Seconds the average rank will wait over them.
        halo_share: For a graph trained isolated, the share of the average
            node's in-neighbours held as halo (:obj:`None` otherwise).
    """

    choice: str
    from_step: int
    cache_input: bool
    steps: int
    predicted_bytes: int
    predicted_seconds: float
    halo_share: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields, ``halo_share`` only where set, after ``steps``."""
        out = asdict(self)
        share = out.pop("halo_share")
        head = {k: out.pop(k) for k in ("choice", "from_step", "cache_input", "steps")}
        return {**head, **({"halo_share": share} if share is not None else {}), **out}


@dataclass
class Link:
    """The link and compute measured once per graph, reduced over the ranks:
    latency (seconds per exchange), bandwidth (bytes per second) and compute
    (seconds per step), at training step ``decided_at``."""

    latency: float
    bandwidth: float
    compute: float
    decided_at: int

    def model(self) -> dict[str, float]:
        """``latency``, ``bandwidth`` and ``compute``, as the cost model takes them."""
        return {"latency": self.latency, "bandwidth": self.bandwidth, "compute": self.compute}


@dataclass
class HaloChoices:
    """The per-graph record of a policy that chooses for itself.

    Attributes:
        layers: Each layer's :class:`LayerChoice`, by ledger name.
        link: The measured :class:`Link` (:obj:`None` until measured).
        halo_share: The share of the average node's in-neighbours held as
            halo, over all ranks (:obj:`None` until asked).
        starts: This rank's wall clock at the start of each training step's
            forward pass, until the link is measured.
    """

    layers: dict[str, LayerChoice] = field(default_factory=dict)
    link: Link | None = None
    halo_share: float | None = None
    starts: dict[int, float] = field(default_factory=dict)

    def predicted(self) -> dict[str, dict[str, Any]]:
        """Per layer (in name order), the choice with its predicted bytes
        (all ranks) and seconds (average rank); once the link is measured,
        under ``"epoch"``, the bandwidth, the compute and the predicted
        seconds of a step after the decision. Empty when nothing was chosen."""
        if not self.layers:
            return {}
        out = {name: self.layers[name].as_dict() for name in sorted(self.layers)}
        if self.link is not None:
            waits = sum(self.layers[name].predicted_seconds / max(self.layers[name].steps, 1)
                        for name in sorted(self.layers))
            out["epoch"] = {"bandwidth": round(self.link.bandwidth),
                            "compute": self.link.compute,
                            "predicted_seconds": round(self.link.compute + waits, 6)}
        return out

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.layers = {k: LayerChoice(**v) for k, v in state["layers"].items()}
        self.link = None if state["link"] is None else Link(**state["link"])
        self.halo_share = state["halo_share"]
        self.starts = dict(state["starts"])
