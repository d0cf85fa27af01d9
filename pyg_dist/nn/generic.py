r"""The generic distributed path: any one-hop PyG layer, run on ``[owned ; halo]``.

Every in-edge of a node lives on the node's owner, so a message-passing layer
whose messages depend only on the source row, the target row and the edge's
attributes computes its owned rows exactly once the halo rows of its input are
there: :class:`DistMessagePassing` fetches them through the graph's halo
policy (so every policy, compression and the ledger apply) and calls the PyG
layer on the bipartite local graph (sources ``[owned ; halo]``, targets the
owned nodes). Each node's in-edges come in the input's order and sequence
aggregations (LSTM, GRU, ...) pad them as on the whole graph, so order- and
padding-dependent aggregations are exact too. Layers that need something
global (source degrees as in GCN's normalisation, several hops per call)
cannot run so; they are refused with the alternatives named.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch_geometric.nn import (
    APPNP,
    ARMAConv,
    ChebConv,
    ClusterGCNConv,
    EdgeConv,
    FAConv,
    FastRGCNConv,
    GATConv,
    GATv2Conv,
    GCN2Conv,
    GCNConv,
    GINConv,
    GINEConv,
    GraphConv,
    LEConv,
    LGConv,
    MessagePassing,
    ResGatedGraphConv,
    RGCNConv,
    SAGEConv,
    SGConv,
    SSGConv,
    TAGConv,
    TransformerConv,
)
from torch_geometric.nn.aggr import Aggregation, PatchTransformerAggregation

from pyg_dist.data.dist_data import Adj, DistEdgeIndex
from pyg_dist.halo import HaloPolicy, LayerHalo
from pyg_dist.nn.checks import check_distributed
from pyg_dist.nn.preaggregate import owned_only, pre_aggregates, sum_pre_aggregated
from pyg_dist.nn.twin import DistLayer
from pyg_dist.ops import spmm

__all__ = ["DistMessagePassing", "register_exact", "exactness", "ExactLayer",
           "propagate_with_halo"]


@dataclass(frozen=True)
class ExactLayer:
    """How a layer runs on ``[owned ; halo]``: which of its ``forward``
    arguments hold one row per edge (restricted with the edges when a policy
    drops halo rows)."""

    edge_args: tuple[str, ...] = ()


#: Layers the generic path runs exactly (outputs and gradients equal the
#: single-process layer on the whole graph, up to float rounding; layers that
#: draw random numbers, e.g. attention dropout, only in evaluation); more are
#: declared with :func:`register_exact`, read with :func:`exactness`.
_EXACT_LAYERS: dict[type, ExactLayer] = {
    GATConv: ExactLayer(("edge_attr",)),
    GATv2Conv: ExactLayer(("edge_attr",)),
    GINConv: ExactLayer(),
    GINEConv: ExactLayer(("edge_attr",)),
    GraphConv: ExactLayer(("edge_weight",)),
    TransformerConv: ExactLayer(("edge_attr",)),
    ResGatedGraphConv: ExactLayer(("edge_attr",)),
    SAGEConv: ExactLayer(),
    EdgeConv: ExactLayer(),
    LEConv: ExactLayer(("edge_weight",)),
    RGCNConv: ExactLayer(("edge_type",)),
    FastRGCNConv: ExactLayer(("edge_type",)),
}

#: Layers it cannot run exactly, and what to use instead.
_REFUSED: dict[type, str] = {
    GCNConv: "normalises by source degrees: use pyg_dist.nn.DistGCNConv",
    GCN2Conv: "normalises by source degrees: use pyg_dist.nn.DistGCN2Conv",
    ChebConv: "normalises by source degrees and runs K hops per call",
    ClusterGCNConv: "normalises by source degrees",
    LGConv: "normalises by source degrees",
    FAConv: "normalises by source degrees",
    SGConv: "runs K hops per call: stack K DistGCNConv layers instead",
    SSGConv: "runs K hops per call: stack K DistGCNConv layers instead",
    TAGConv: "runs K hops per call: stack K one-hop layers instead",
    APPNP: "runs K propagation steps per call: stack K one-hop layers instead",
    ARMAConv: "runs several hops per call",
}


def register_exact(cls: type, edge_args: tuple[str, ...] = ()) -> None:
    """Declares that the generic path runs ``cls`` exactly: its output at a
    node depends only on the node's in-edges (their source rows, the target
    row, their attributes) and its ``forward(x, edge_index, ...)`` takes a
    pair ``(x_src, x_dst)`` for bipartite graphs.

    Args:
        cls (type): A :class:`~torch_geometric.nn.conv.MessagePassing` subclass.
        edge_args (tuple[str, ...], optional): The names of the ``forward``
            arguments with one row per edge. (default: :obj:`()`)
    """
    if not (isinstance(cls, type) and issubclass(cls, MessagePassing)):
        raise TypeError(f"'register_exact' needs a MessagePassing subclass (got {cls!r})")
    _REFUSED.pop(cls, None)
    _EXACT_LAYERS[cls] = ExactLayer(tuple(edge_args))


def exactness(cls: type) -> ExactLayer:
    """How the generic path runs ``cls``, or an error naming what runs."""
    if cls in _EXACT_LAYERS:
        return _EXACT_LAYERS[cls]
    supported = ", ".join(sorted(c.__name__ for c in _EXACT_LAYERS))
    reason = _REFUSED.get(cls)
    if reason is not None:
        raise ValueError(f"'{cls.__name__}' cannot run distributed exactly: it {reason}; the "
                         f"generic path runs {supported}")
    raise ValueError(
        f"'{cls.__name__}' is not known to run distributed exactly; the generic path runs "
        f"{supported}. If its output at a node depends only on the node's in-edges and it "
        f"takes (x_src, x_dst) pairs, declare it with pyg_dist.nn.register_exact("
        f"{cls.__name__})"
    )


_CLASSES: dict[type, type] = {}


def dist_class(cls: type) -> type:
    """The generic Dist class of PyG class ``cls`` (``DistGINConv`` for ``GINConv``)."""
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"Dist{cls.__name__}", (DistMessagePassing, cls),
                             {"pyg_class": cls, "__module__": __name__})
    return _CLASSES[cls]


def _rebuild(cls: type, state: dict[str, Any]) -> Any:
    """Unpickles a generic Dist layer of PyG class ``cls``."""
    layer = DistMessagePassing.__new__(dist_class(cls))
    layer.__setstate__(state)
    return layer


class DistMessagePassing(DistLayer, MessagePassing):
    r"""Runs a PyG message-passing layer on a partitioned graph.

    ``DistMessagePassing(conv)`` turns ``conv`` itself into a Dist layer (its
    class becomes ``Dist<Class>``, a subclass of its own class), so parameter
    names, state dicts and ``isinstance`` checks stay as they were. On a plain
    ``edge_index`` it is ``conv``; on a :class:`~pyg_dist.DistEdgeIndex` it
    fetches the halo rows of its input through the halo policy and calls
    ``conv`` on the local bipartite graph: sources ``[owned ; halo]``, targets
    the owned nodes. Exact for ``GATConv``, ``GATv2Conv``, ``GINConv``,
    ``GINEConv``, ``GraphConv``, ``TransformerConv``, ``ResGatedGraphConv``,
    ``SAGEConv``, ``EdgeConv``, ``LEConv``, ``RGCNConv``, ``FastRGCNConv``
    (on ``DistHeteroData.to_homogeneous()``) and any declared with
    :func:`register_exact`; others are refused, naming the alternatives.

    What crosses the network is the layer's input: the specialised twins
    (:class:`DistGCNConv`, :class:`DistSAGEConv`, :class:`DistGATConv`) send
    the narrower transformed rows where that is exact.

    Args:
        conv (MessagePassing): The layer.
        halo (HaloPolicy, optional): Its halo policy; :obj:`None` uses the
            graph's default. (default: :obj:`None`)
        halo_name (str, optional): Its name in the ledger. (default: :obj:`None`)
        pre_aggregate (bool, optional): Exchange partial sums on a minimum
            vertex cover instead of halo rows: ``GINConv`` only (its sum is
            linear with fixed coefficients); on any other layer
            :obj:`True` raises. :obj:`None` uses the graph's default, which
            other layers ignore. (default: :obj:`None`)
    """

    pyg_class = MessagePassing

    def __new__(cls, conv: MessagePassing | None = None, halo: HaloPolicy | None = None,
                halo_name: str | None = None, pre_aggregate: bool | None = None) -> Any:
        if conv is None:  # unpickling and copying make an empty instance first
            return super().__new__(cls)
        if not isinstance(conv, MessagePassing):
            raise TypeError(f"'DistMessagePassing' wraps a MessagePassing layer (got "
                            f"{type(conv).__name__})")
        base = conv.pyg_class if isinstance(conv, DistLayer) else type(conv)
        exactness(base)
        conv.__class__ = dist_class(base)
        conv.halo = halo if halo is not None else getattr(conv, "halo", None)
        conv.halo_name = halo_name or getattr(conv, "halo_name", None)
        if pre_aggregate is not None:
            conv.pre_aggregate = pre_aggregate
        return conv

    def __init__(self, conv: MessagePassing | None = None, halo: HaloPolicy | None = None,
                 halo_name: str | None = None, pre_aggregate: bool | None = None) -> None:
        """Nothing to do: :meth:`__new__` adopted the initialised layer."""

    def __reduce_ex__(self, protocol: Any) -> Any:
        return _rebuild, (self.pyg_class, self.__dict__.copy())

    def forward(self, x: Any, edge_index: Adj, *args: Any, **kwargs: Any) -> Any:
        if isinstance(edge_index, DistEdgeIndex):
            if pre_aggregates(self, edge_index, _linear_reason(self, x, args, kwargs), x):
                return _gin_pre_aggregated(self, x, edge_index)
            return propagate_with_halo(self, super().forward, x, edge_index, *args, **kwargs)
        return super().forward(x, edge_index, *args, **kwargs)


def _linear_reason(layer: Any, x: Any, args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> str | None:
    """Why the generic path cannot pre-aggregate this call of ``layer``
    (:obj:`None`: a ``GINConv`` sum over one feature tensor, which can)."""
    if layer.pyg_class is not GINConv:
        return (f"the generic path runs {layer.pyg_class.__name__}'s own message function, "
                f"which partial sums cannot stand for (GINConv's sum, DistGCNConv, "
                f"DistGCN2Conv and DistSAGEConv with sum or mean can)")
    if layer.aggr not in ("add", "sum"):
        return f"aggr={layer.aggr!r} is not a sum"
    if not isinstance(x, Tensor) or args or any(v is not None for v in kwargs.values()):
        return "it takes one feature tensor and no size"
    return None


def _gin_pre_aggregated(layer: Any, x: Tensor, edge_index: DistEdgeIndex) -> Tensor:
    r"""``GINConv`` on the pre-aggregated graph:
    :math:`\mathrm{nn}((1 + \epsilon)\,\mathbf{x}_i + \sum_j \mathbf{x}_j)`."""
    check_distributed(layer, x)
    graph, value = sum_pre_aggregated(edge_index)
    halo, static = LayerHalo.open(layer, graph, x)
    fetched = halo.fetch(x, static)
    if fetched.mask is None:
        out = spmm(graph.rowptr, graph.col, x, value.to(x.dtype), "sum", x_halo=fetched.rows)
    else:  # the policy isolated the layer: the plain graph's owned edges
        rows = owned_only(fetched, edge_index)
        assert rows.mask is not None, "owned_only masks every halo row"
        owned, _ = edge_index.restrict(rows.mask)
        out = spmm(owned.rowptr, owned.col, x, None, "sum", x_halo=rows.rows)
    return layer.nn(out + (1 + layer.eps) * x)


def propagate_with_halo(layer: Any, forward: Callable[..., Any], x: Any,
                        edge_index: DistEdgeIndex, *args: Any, **kwargs: Any) -> Any:
    """Calls ``forward`` (the PyG layer's, bound) on ``([x ; halo rows of x],
    x)`` (for a pair ``(x_src, x_dst)``: ``([x_src ; halo rows of x_src],
    x_dst)``) and the local bipartite graph: the owned rows of the layer's output.
    Per-edge arguments follow the edges when the policy leaves halo rows out."""
    local_args, local_kwargs = _local_arguments(layer, forward, x, edge_index, args, kwargs)
    with _padded_as_whole_graph(layer, edge_index):
        return forward(*local_args, **local_kwargs)


def sequence_aggregations(layer: Any) -> list[Aggregation]:
    """The aggregations of ``layer`` that read each node's in-edges as one
    padded sequence (LSTM, GRU, set transformers, ...): those whose
    ``forward`` takes ``max_num_elements``."""
    return [m for m in layer.modules() if isinstance(m, Aggregation)
            and "max_num_elements" in inspect.signature(m.forward).parameters]


@contextmanager
def _padded_as_whole_graph(layer: Any, edge_index: DistEdgeIndex) -> Iterator[None]:
    r"""Pads the sequences of ``layer``'s sequence aggregations as on the whole
    graph. They pad every node's in-edges (in order) to the longest sequence
    of the batch, and LSTM and GRU read the padding too (their output is the
    last step's): a rank's batch is its owned nodes, so each call gets
    ``max_num_elements`` = the whole graph's largest in-degree
    (:meth:`~pyg_dist.DistEdgeIndex.max_in_degree`, one all-reduce per graph)."""
    modules = sequence_aggregations(layer)
    if not modules:
        yield
        return
    length = edge_index.max_in_degree()
    handles = [m.register_forward_pre_hook(_pad(length + _PADDING_EXTRA.get(type(m), 0)),
                                           with_kwargs=True) for m in modules]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


#: What an aggregation adds to the longest sequence when it picks its own
#: padding (``max_num_elements=None``).
_PADDING_EXTRA: dict[type, int] = {PatchTransformerAggregation: 1}


def _pad(length: int) -> Callable[..., Any]:
    def hook(module: Any, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if kwargs.get("max_num_elements") is None:
            kwargs["max_num_elements"] = length
        return args, kwargs

    return hook


@torch.compiler.disable
def _local_arguments(layer: Any, forward: Callable[..., Any], x: Any, edge_index: DistEdgeIndex,
                     args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments of ``forward`` on the local bipartite graph: the halo
    exchange and the local graph, one graph break under :func:`torch.compile`
    (the PyG layer itself is traced)."""
    check_distributed(layer, x)
    spec = exactness(layer.pyg_class)
    signature = inspect.signature(forward)
    bound = signature.bind(x, edge_index, *args, **kwargs)
    if bound.arguments.get("size") is not None:
        raise ValueError(f"'{type(layer).__name__}' takes its size from the DistEdgeIndex; "
                         f"leave size=None")
    x_src, x_dst = (x, x) if isinstance(x, Tensor) else x  # bipartite: (x_src, x_dst)
    halo, static = LayerHalo.open(layer, edge_index, x_src)
    fetched = halo.fetch(x_src, static)
    graph, keep = edge_index, None
    if fetched.mask is not None:
        graph, keep = edge_index.restrict(fetched.mask)
        for name in spec.edge_args:
            if isinstance(bound.arguments.get(name), Tensor):
                bound.arguments[name] = bound.arguments[name][keep]
    x_name, edge_name = list(signature.parameters)[:2]
    bound.arguments[x_name] = (torch.cat([x_src, fetched.rows]), x_dst)
    bound.arguments[edge_name] = torch.stack([graph.col, graph.row()])
    return bound.args, bound.kwargs
