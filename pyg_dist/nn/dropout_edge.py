"""``dropout_edge``: DropEdge whose mask every rank draws alike."""
from __future__ import annotations

import torch

from pyg_dist.data.dist_data import Adj, DistEdgeIndex
from pyg_dist.utils.dropout import DropoutState, edge_keep, next_call

__all__ = ["dropout_edge"]


def dropout_edge(edge_index: Adj, p: float = 0.5, training: bool = True,
                 state: DropoutState | None = None) -> Adj:
    r"""Randomly drops edges, as in `"DropEdge: Towards Deep Graph
    Convolutional Networks on Node Classification"
    <https://arxiv.org/abs/1907.10903>`_, with a mask that depends on the
    edges' global endpoints only.

    Edge :math:`\{u, v\}` of call :math:`t` is dropped when a 32-bit hash of
    :math:`(s, t, \min(u, v), \max(u, v))` lies in the lowest fraction
    :math:`p` of its range (:math:`u, v` global node ids, :math:`s` the seed
    shared by every rank, see :func:`pyg_dist.nn.dropout`). Both directions
    of an undirected edge are kept or dropped together (like
    :func:`torch_geometric.utils.dropout_edge` with ``force_undirected=True``,
    so a symmetric graph stays symmetric), and the kept edges do not depend on
    how the graph was cut: training on 1, 2 or 4 ranks drops the same edges.
    Every call draws a new mask; the call count lives in the graph's
    ``registry.dropout`` (checkpointed with the halo state) and is shared with
    :func:`pyg_dist.nn.dropout`. Unlike PyG's function, nothing is rescaled
    and only the graph is returned.

    On a :class:`~pyg_dist.DistEdgeIndex` the result is a
    :class:`~pyg_dist.DistEdgeIndex` of the kept edges on the same halo plan:
    a layer still fetches every halo row, also those no kept edge reads. Its
    halo nodes' in-degrees (which GCN's normalisation reads) are those of the
    kept graph, sent by their owners in one small exchange per call, so every
    rank must call it. On a plain ``[2, num_edges]`` tensor the same hash runs
    on the local ids, which are the global ones: one process with the same
    seed and call keeps exactly the edges the ranks keep.

    Args:
        edge_index (torch.Tensor or DistEdgeIndex): The graph.
        p (float, optional): Probability of dropping an edge. (default: :obj:`0.5`)
        training (bool, optional): Drop only in training; otherwise
            ``edge_index`` is returned as it is. (default: :obj:`True`)
        state (``DropoutState``, optional): Seed and call count for a plain
            ``edge_index`` tensor (a seed drawn from torch's generator when
            :obj:`None`); a :class:`~pyg_dist.DistEdgeIndex` uses its own.
            (default: :obj:`None`)

    Shapes:
        - **input:** :class:`~pyg_dist.DistEdgeIndex` or :math:`(2, |\mathcal{E}|)`
        - **output:** the same kind, with :math:`\approx (1 - p)|\mathcal{E}|` edges
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(
            f"'dropout_edge' needs 0 <= p < 1 (got p={p}); pass the fraction of edges to drop, "
            f"e.g. p=0.3, or p=0 for none")
    if not training or p == 0.0:
        return edge_index
    return _drop(edge_index, p, state)


@torch.compiler.disable
def _drop(edge_index: Adj, p: float, state: DropoutState | None) -> Adj:
    """:func:`dropout_edge` in training: per-graph Python state and an
    exchange, so :func:`torch.compile` breaks here."""
    if isinstance(edge_index, DistEdgeIndex):
        seed, call = next_call(edge_index)
        src, dst = edge_index.global_edges()
        return edge_index.keep_edges(edge_keep(src, dst, seed, call, p), "dropout_edge")
    seed, call = next_call(None, DropoutState() if state is None else state)
    return edge_index[:, edge_keep(edge_index[0], edge_index[1], seed, call, p)]
