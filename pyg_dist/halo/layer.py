"""The halo of a layer call (:class:`LayerHalo`) and the per-graph registry of
every layer's halo state (:class:`HaloRegistry`)."""
from __future__ import annotations

import copy
import hashlib
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from pyg_dist.halo.cache import HaloCache
from pyg_dist.halo.exact import Exact
from pyg_dist.halo.policy import FetchContext, HaloPolicy, HaloRows, PolicyState
from pyg_dist.utils.dropout import DropoutState, DroppedInput, dropped_input

__all__ = ["LayerHalo", "HaloRegistry", "LayerState", "InputTracker", "fingerprint",
           "registry_of"]

#: The module modes (``model.train()``, ``model.eval()``) a layer keeps its
#: halo state apart for.
MODULE_MODES = ("train", "eval")
#: Entries of an input fingerprinted at a time (8 MB float64 temporaries).
FINGERPRINT_BLOCK = 1 << 20


@dataclass
class LayerState:
    """One layer's halo state on one graph in one mode: its policy, the
    policy's state, the halo of its static input and that input's
    :func:`fingerprint` (to recognise it after a restart), and the halo it was
    made for (``halo_of``)."""

    policy: HaloPolicy
    state: PolicyState
    static: HaloCache = field(default_factory=HaloCache)
    fingerprint: list[float] | None = None
    halo: tuple[bool, int] | None = None

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self.state.state_dict(), "static": self.static.state_dict(),
                "fingerprint": self.fingerprint}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state.load_state_dict(state["policy"])
        self.static.load_state_dict(state["static"])
        self.fingerprint = state["fingerprint"]


def registry_of(data: Any) -> Any:
    """The halo registry of a rank's graph: its own ``registry`` (a
    heterogeneous graph's, every relation's), else its ``edge_index``'s;
    :obj:`None` for a graph without halos (one process).

    Args:
        data: The graph (:class:`~pyg_dist.DistData`, :class:`~pyg_dist.DistHeteroData`,
            or a PyG graph).
    """
    own = getattr(data, "registry", None)
    return own if own is not None else getattr(getattr(data, "edge_index", None), "registry",
                                                None)


class HaloRegistry:
    """Everything halo-related one graph keeps on one rank: the default
    policy, every layer's ``LayerState`` per mode, the tracker of static
    inputs, layer names, and the shared dropout seed. It flushes exchanges in
    flight and is what checkpoints save (:meth:`state_dict`).

    Args:
        default (HaloPolicy, optional): Policy of the layers that set none;
            :obj:`None` is :class:`Exact`. (default: :obj:`None`)
        eval_default (HaloPolicy, optional): Policy of every layer in
            evaluation; :obj:`None` is :class:`Exact` (with the input caching
            of the layer's training policy). (default: :obj:`None`)
        fixed (bool, optional): ``default`` applies to every layer in training,
            whatever policy the layer sets (a graph without halo rows, as a
            gradient-only group). (default: :obj:`False`)
    """

    def __init__(self, default: HaloPolicy | None = None,
                 eval_default: HaloPolicy | None = None, fixed: bool = False) -> None:
        assert default is not None or not fixed, "a fixed registry needs its policy"
        self.default = default
        self.eval_default = eval_default
        self.fixed = fixed
        #: Training steps planned in all (set by :func:`pyg_dist.train.train`).
        self.planned_steps: int | None = None
        self.layers: dict[tuple[str, str], LayerState] = {}
        self.tracker = InputTracker()
        self.dropout = DropoutState()
        self._names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._restored: dict[str, dict[str, Any]] = {}

    def policy(self, own: HaloPolicy | None) -> HaloPolicy:
        """The training policy of a layer that sets ``own``: its own, else
        the default, else :class:`Exact` (the default alone when ``fixed``)."""
        return (self.default if self.fixed else own) or self.default or Exact()

    def name(self, layer: Any) -> str:
        """A stable name for ``layer``: its ``halo_name`` if set (module paths
        under :func:`~pyg_dist.nn.to_distributed`), else ``layer<k>`` in order
        of first use (the same on every rank, which runs the same layers in
        the same order). Names label the ledger and derive message tags."""
        name = getattr(layer, "halo_name", None)
        if name:
            return str(name)
        if layer not in self._names:
            self._names[layer] = f"layer{len(self._names)}"
        return str(self._names[layer])

    def layer(self, name: str, mode: str, policy: HaloPolicy,
              halo: tuple[bool, int] | None = None) -> LayerState:
        """The state of layer ``name`` in ``mode`` under ``policy`` on the
        halo ``halo`` (``halo_of`` its graph); a new one when the policy or
        the halo changed (the old one's exchanges are completed first): rows
        kept for one halo mean nothing on another, as when a later run of the
        same graph pre-aggregates and this one did not."""
        assert mode in MODULE_MODES, f"mode must be one of {MODULE_MODES}"
        key = (name, mode)
        layer = self.layers.get(key)
        if layer is None or layer.policy != policy or layer.halo != halo:
            if layer is not None:
                layer.policy.flush(layer.state)
            layer = self.layers[key] = LayerState(policy, policy.init_state(), halo=halo)
            restored = self._restored.pop(_key(name, mode), None)
            if restored is not None:
                layer.load_state_dict(restored)
        return layer

    def flush(self) -> None:
        """Completes halo exchanges still in flight (pipelined policies)."""
        for layer in self.layers.values():
            layer.policy.flush(layer.state)

    @contextmanager
    def using(self, **settings: Any) -> Iterator[HaloRegistry]:
        """Sets ``default``, ``eval_default``, ``fixed`` or ``planned_steps``
        as given for the block, and gives the old values back after it (a run
        of :func:`~pyg_dist.train.train` sets what its strategy says, and
        leaves the graph as it found it).

        Args:
            **settings: The settings and their values for the block.
        """
        unknown = sorted(set(settings) - _SETTINGS)
        assert not unknown, f"HaloRegistry has no setting {unknown}"
        before = {name: getattr(self, name) for name in settings}
        for name, value in settings.items():
            setattr(self, name, value)
        try:
            yield self
        finally:
            for name, value in before.items():
                setattr(self, name, value)

    @contextmanager
    def trial(self, **settings: Any) -> Iterator[HaloRegistry]:
        """A block that starts with no layer state and whose layer state,
        tracked inputs and dropout calls are forgotten after it, with
        ``settings`` as :meth:`using` takes them (a probe's steps, which the
        run then starts without).

        Args:
            **settings: The settings and their values for the block.
        """
        kept = (self.layers, self.tracker, copy.deepcopy(self.dropout))
        self.layers, self.tracker = {}, InputTracker()
        try:
            with self.using(**settings):
                yield self
        finally:
            self.flush()
            self.layers, self.tracker, self.dropout = kept

    def state_dict(self) -> dict[str, Any]:
        """Every layer's halo state (cached rows, ages, pending gradients) and
        the dropout state, for checkpoints; flushes first."""
        self.flush()
        layers = dict(self._restored)
        layers.update({_key(*key): layer.state_dict() for key, layer in self.layers.items()})
        return {"layers": layers, "dropout": asdict(self.dropout)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`; a layer not called yet gets its state
        at its first call."""
        self.dropout = DropoutState(**state["dropout"])
        for key, layer_state in state["layers"].items():
            name, mode = key.rsplit("|", 1)
            if (name, mode) in self.layers:
                self.layers[name, mode].load_state_dict(layer_state)
            else:
                self._restored[key] = layer_state


def halo_of(edge_index: Any) -> tuple[bool, int]:
    """What a layer's halo state is made for: whether ``edge_index`` is
    pre-aggregated, and its halo rows.

    Args:
        edge_index (DistEdgeIndex): The graph.
    """
    return edge_index.base is not edge_index, int(edge_index.num_halo)


#: What :meth:`HaloRegistry.using` may set for a block.
_SETTINGS = {"default", "eval_default", "fixed", "planned_steps"}


def _key(name: str, mode: str) -> str:
    return f"{name}|{mode}"


class LayerHalo:
    r"""The halo of one layer call: the layer's policy (its own, else the
    graph's default, else :class:`Exact`; in evaluation the graph's
    ``eval_default``, else exact, whatever trained the weights), its state on
    this graph, and whether its input is static.

    Layers use it in two steps: :meth:`open` (the layer's halo and whether its
    raw input is static, which decides whether to aggregate before
    transforming), then :meth:`fetch`. An input made by
    :func:`~pyg_dist.nn.dropout` from a static tensor counts as static: the
    halo of the source is cached and the shared mask applied to it.

    Both steps run communication and per-graph Python state (policy state,
    caches, the ledger), which :func:`torch.compile` does not trace: a compiled
    layer's graph breaks at each of them, and its graphs hold the dense
    transforms and the aggregation on either side.

    Args:
        edge_index (DistEdgeIndex): The graph.
        name (str): The layer's name (:meth:`HaloRegistry.name`).
        policy (HaloPolicy, optional): The layer's own policy.
        training (bool): Whether the layer is in training mode.
        complete (bool, optional): Whether the layer needs every halo row
            (its ``complete_halo``; :class:`~pyg_dist.halo.Auto` then never
            leaves rows out). (default: :obj:`False`)
    """

    def __init__(self, edge_index: Any, name: str, policy: HaloPolicy | None,
                 training: bool, complete: bool = False) -> None:
        registry: HaloRegistry = edge_index.registry
        policy = self.policy_of(edge_index, policy, training)
        self.policy, self.name, self.edge_index = policy, name, edge_index
        self.mode = "train" if training else "eval"
        self.direction = "fwd" if training else "eval"
        self.layer = registry.layer(name, self.mode, policy, halo_of(edge_index))
        self.tracker = registry.tracker
        channel = edge_index.channel
        self.ctx = FetchContext(channel, name, self.layer.state, self.layer.static,
                                channel.ledger.step, self.direction, edge_index,
                                registry.planned_steps, complete)
        self.dropped: DroppedInput | None = None

    @staticmethod
    def policy_of(edge_index: Any, own: HaloPolicy | None, training: bool) -> HaloPolicy:
        """The policy a layer that sets ``own`` runs on ``edge_index`` in
        training (``training``) or evaluation (see the class)."""
        registry: HaloRegistry = edge_index.registry
        policy = registry.policy(own)
        if not training:
            policy = registry.eval_default or Exact(compress=None,
                                                    cache_inputs=policy.cache_inputs)
        return policy

    @classmethod
    @torch.compiler.disable
    def open(cls, layer: Any, edge_index: Any, x: Tensor,
             out_width: int | None = None) -> tuple[LayerHalo, bool]:
        """The halo of this call of ``layer`` (a Dist layer: its ``halo``
        policy, its name in ``edge_index``'s registry, its training flag) and
        whether its input ``x`` is static (:meth:`is_static`)."""
        halo = cls(edge_index, edge_index.registry.name(layer), layer.halo, layer.training,
                   getattr(layer, "complete_halo", False))
        return halo, halo.is_static(x, out_width)

    def is_static(self, x: Tensor, out_width: int | None = None) -> bool:
        """Whether ``x`` is the unchanged, grad-free input of this layer's
        previous call (or, right after a restart, has the content of the input
        whose halo the restored state caches) and the policy caches such inputs
        (``out_width``, the layer's output width, helps it decide)."""
        dropped = dropped_input(x, self.edge_index)
        if self.edge_index.base is not self.edge_index:
            dropped = None  # partial sums of a dropped input are not the source's, masked
        source = x if dropped is None else dropped.source
        seen = self.tracker.is_static((self.name, self.mode), source)
        if seen is None and self.layer.fingerprint is not None:
            seen = self.layer.fingerprint == fingerprint(source)
        static = bool(seen) and self.policy.caches_input(source, self.ctx, out_width)
        if not static:
            self.layer.static.reset()
            self.layer.fingerprint = None
        self.dropped = dropped if static else None
        return static

    @torch.compiler.disable
    def fetch(self, x: Tensor, static: bool = False) -> HaloRows:
        """The halo rows of ``x`` (``[num_owned, F]``) under the policy."""
        if not static:
            return self.policy.fetch(x, self.ctx)
        source = x if self.dropped is None else self.dropped.source
        filling = not self.layer.static.matches(source)
        fetched = self.policy.fetch_static(source, self.ctx)
        if filling:
            self.layer.fingerprint = fingerprint(source)
        if self.dropped is not None:
            fetched = replace(fetched, rows=self.dropped.halo(fetched.rows))
        return fetched


class InputTracker:
    """Tells whether a layer's input is the same unchanged tensor as at the
    layer's previous call (held by weak reference; never checkpointed)."""

    def __init__(self) -> None:
        self._last: dict[Any, tuple[weakref.ref, int]] = {}

    def is_static(self, key: Any, x: Tensor) -> bool | None:
        """True/False for a seen key, :obj:`None` the first time a key is seen."""
        if x.requires_grad:
            self._last.pop(key, None)
            return False
        last = self._last.get(key)
        self._last[key] = (weakref.ref(x), x._version)
        if last is None:
            return None
        return last[0]() is x and last[1] == x._version


def fingerprint(x: Tensor) -> list[float]:
    """A content fingerprint of ``x`` (size, rank, dtype and two weighted sums)
    that is the same in every process: recognises a static input again after
    a restart, where identity cannot. Summed in float64 a block at a time, so
    it never holds a float64 copy of ``x``."""
    flat = x.detach().reshape(-1)
    dtype = int.from_bytes(hashlib.sha256(str(x.dtype).encode()).digest()[:4], "little")
    total = weighted = 0.0
    for start in range(0, flat.numel(), FINGERPRINT_BLOCK):
        block = flat[start : start + FINGERPRINT_BLOCK].double()
        weights = torch.arange(start + 1, start + block.numel() + 1, device=flat.device,
                               dtype=torch.float64).remainder_(9973)
        total += float(block.sum())
        weighted += float((block * weights).sum())
    return [float(flat.numel()), float(x.dim()), float(dtype), total, weighted]
