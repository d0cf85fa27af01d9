"""``DistHGTConv``: PyG's ``HGTConv`` that also runs on a partitioned
heterogeneous graph."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch_geometric.nn import HGTConv

from pyg_dist.data.dist_data import DistEdgeIndex
from pyg_dist.halo import HaloPolicy, LayerHalo
from pyg_dist.nn.twin import DistLayer

__all__ = ["DistHGTConv"]


class DistHGTConv(DistLayer, HGTConv):
    r"""The Heterogeneous Graph Transformer operator from the
    `"Heterogeneous Graph Transformer" <https://arxiv.org/abs/2003.01332>`_
    paper, distributed.

    Takes exactly the arguments of :class:`torch_geometric.nn.HGTConv` and has
    its parameters. Given plain ``edge_index`` tensors it *is* ``HGTConv``.
    Given the :class:`~pyg_dist.data.hetero_data.DistRelationIndex` of a
    :class:`~pyg_dist.DistHeteroData` (``data.edge_index_dict``) it fetches
    each source type's halo rows of ``x_dict`` once (the union over the
    relations reading the type), computes keys and values of
    ``[owned ; halo]`` rows and runs ``HGTConv`` on the local graph: every
    in-edge of an owned node is local, so the attention softmax over a
    node's in-edges of all relations is the whole graph's, and the rows
    gathered from all ranks equal ``HGTConv`` on the whole graph. Queries and
    outputs are computed for owned rows (and, unused, for halo rows).

    Args:
        in_channels (int or dict[str, int]): Size of each input sample of
            every node type, or :obj:`-1`.
        out_channels (int): Size of each output sample.
        metadata (tuple): The graph's ``(node_types, edge_types)``.
        heads (int, optional): Number of attention heads. (default: :obj:`1`)
        halo (HaloPolicy, optional): Halo policy of this layer; :obj:`None`
            uses the graph's default. Policies that leave halo rows out
            (``Sampled``, ``Isolated``) are refused; ``Auto`` keeps every
            row (the layer's ``complete_halo``). (default: :obj:`None`)
        **kwargs (optional): Arguments of
            :class:`~torch_geometric.nn.conv.MessagePassing`.

    Shapes:
        - **input:** node features :obj:`{type: (|V_owned(type)|, F_in(type))}`,
          edge indices :obj:`{edge_type: DistRelationIndex}`
        - **output:** :obj:`{type: (|V_owned(type)|, F_out)}` (:obj:`None` for a
          type no relation targets)
    """

    pyg_class = HGTConv
    complete_halo = True  # every in-edge of a node shares one softmax

    def __init__(self, in_channels: int | dict[str, int], out_channels: int,
                 metadata: tuple[list[str], list[tuple[str, str, str]]], heads: int = 1,
                 halo: HaloPolicy | None = None, **kwargs: Any) -> None:
        super().__init__(in_channels, out_channels, metadata, heads=heads, **kwargs)
        self.halo = halo

    def forward(self, x_dict: dict[str, Tensor],  # type: ignore[override]
                edge_index_dict: dict[Any, Any]) -> dict[str, Tensor | None]:
        relations = {e: r for e, r in edge_index_dict.items() if isinstance(r, DistEdgeIndex)}
        if not relations:
            return super().forward(x_dict, edge_index_dict)
        if len(relations) != len(edge_index_dict):
            raise ValueError("'DistHGTConv' takes every edge type as a DistRelationIndex or "
                             "none; pass data.edge_index_dict of one DistHeteroData")
        halo = _halo_rows(self, x_dict, relations)
        extended = {t: torch.cat([x, halo[t]]) if t in halo else x for t, x in x_dict.items()}
        local = {e: torch.stack([r.col, r.row()]) for e, r in relations.items()}
        out = super().forward(extended, local)
        return {t: None if v is None else v[: x_dict[t].size(0)] for t, v in out.items()}


@torch.compiler.disable
def _halo_rows(layer: DistHGTConv, x_dict: dict[str, Tensor],
               relations: dict[Any, DistEdgeIndex]) -> dict[str, Tensor]:
    """Each source type's halo rows of ``x_dict``, one fetch per type (named
    after the first relation reading it, so the ledger books it per type)."""
    out = {}
    for e, rel in relations.items():
        src = e[0]
        if src in out:
            continue
        name = f"{rel.registry.name(layer)}.{'__'.join(e)}"
        halo = LayerHalo(rel, name, layer.halo, layer.training, layer.complete_halo)
        fetched = halo.fetch(x_dict[src], halo.is_static(x_dict[src]))
        if fetched.mask is not None:
            raise ValueError(f"'DistHGTConv' needs every halo row; its policy "
                             f"{halo.policy!r} leaves some out: use Exact, Cached or Stale")
        out[src] = fetched.rows
    return out
