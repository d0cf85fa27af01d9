r"""Dropout that every rank draws alike, so a static input stays cacheable.

The GCN recipe drops input features before the first layer. With
:func:`torch.nn.functional.dropout` the dropped input is a new tensor every
step, so its halo must cross the network every step although the features
never change. :func:`dropout` instead draws the mask of node :math:`v`,
feature :math:`f`, call :math:`t` from a hash of :math:`(s, t, v, f)` with a
seed :math:`s` shared by all ranks. The rank that owns :math:`v` and every rank
that holds :math:`v` as a halo row get the same mask, so a layer whose input
is ``dropout(x)`` of a static ``x`` fetches the halo of ``x`` once and applies
the mask itself: bit for bit the rows the owner would have sent, at no
per-step traffic.

Users call it as :func:`pyg_dist.nn.dropout`. It lives outside
:mod:`pyg_dist.nn` because the halo layer (:class:`~pyg_dist.halo.LayerHalo`)
recognises a dropped input, and must not import the layers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from pyg_dist.runtime.distributed import broadcast
from pyg_dist.utils.hashing import M32, call_key, entry_hash, mix32

__all__ = [
    "dropout",
    "DroppedInput",
    "dropped_input",
    "DropoutState",
    "shared_scale",
    "next_call",
    "edge_keep",
]

#: Mask entries hashed at a time (a few 4 MB int32 temporaries).
MASK_BLOCK = 1 << 20
_ATTR = "_pyg_dist_dropped"


@dataclass
class DropoutState:
    """The shared seed (drawn at the first call) and the number of calls so far,
    per graph; checkpointed with the halo state."""

    seed: int | None = None
    calls: int = 0


@dataclass
class DroppedInput:
    """What a tensor returned by :func:`dropout` was made of (``columns``:
    the global columns of its entries, :obj:`None` for ``0 .. F - 1``)."""

    source: Tensor
    p: float
    seed: int
    call: int
    edge_index: Any
    columns: Tensor | None = None

    def scale(self, global_id: Tensor, width: int) -> Tensor:
        """``[len(global_id), width]``: 0 for dropped entries, ``1 / (1 - p)`` for
        kept ones; the hashes are drawn a block of rows at a time, so the
        temporaries stay small whatever the number of rows."""
        out = torch.empty(global_id.numel(), width, dtype=self.source.dtype,
                          device=global_id.device)
        rows = max(1, MASK_BLOCK // max(width, 1))
        for start in range(0, global_id.numel(), rows):
            keep = _keep(global_id[start : start + rows], width, self.seed, self.call, self.p,
                         self.columns)
            torch.mul(keep, 1.0 / (1.0 - self.p), out=out[start : start + rows])
        return out

    def keep(self, global_id: Tensor, width: int) -> Tensor:
        """``[len(global_id), width]`` bool: which entries survive (what
        :meth:`scale` scales by ``1 / (1 - p)``), a byte an entry, drawn a
        block of rows at a time."""
        out = torch.empty(global_id.numel(), width, dtype=torch.bool, device=global_id.device)
        rows = max(1, MASK_BLOCK // max(width, 1))
        for start in range(0, global_id.numel(), rows):
            out[start : start + rows] = _keep(global_id[start : start + rows], width, self.seed,
                                              self.call, self.p, self.columns)
        return out

    def apply(self, global_id: Tensor) -> Tensor:
        """The source dropped: entry (row ``global_id[i]``, column) masked and
        scaled; marked as made from the source when the source takes no
        gradient, so that layers fetch the source's halo once
        (:func:`dropped_input`).

        Args:
            global_id (torch.Tensor): ``[len(source)]`` global node id of each row.
        """
        out = self.source * self.scale(global_id.to(self.source.device), self.source.size(-1))
        if not self.source.requires_grad:
            setattr(out, _ATTR, self)
        return out

    def halo(self, rows: Tensor) -> Tensor:
        """The halo rows of the dropped input, from the halo rows of its source."""
        gid = self.edge_index.plan.halo_global_id
        return rows * self.scale(gid.to(rows.device), rows.size(-1))


def dropped_input(x: Tensor, edge_index: Any) -> DroppedInput | None:
    """How ``x`` was dropped, if :func:`dropout` made it for ``edge_index``."""
    made = getattr(x, _ATTR, None)
    if made is None or edge_index is None:
        return None
    # A graph with dropped edges (pyg_dist.nn.dropout_edge) keeps the halo plan
    # of the graph it came from, so inputs dropped on either one match.
    same = getattr(made.edge_index, "origin", made.edge_index) is getattr(
        edge_index, "origin", edge_index)
    return made if same else None


def dropout(x: Tensor, p: float = 0.5, training: bool = True, edge_index: Any = None) -> Tensor:
    r"""Dropout of node features, drawn alike on every rank.

    On a :class:`~pyg_dist.DistEdgeIndex`, entry :math:`(v, f)` of call
    :math:`t` is dropped when a 32-bit hash of :math:`(s, t, v, f)`, read as
    int32, lies in the lowest fraction :math:`p` of its range (:math:`v` the
    global node id; the seed :math:`s` is drawn from rank 0's generator at the
    first call and broadcast). Kept entries are scaled by :math:`1/(1-p)`. A
    Dist layer whose input is ``dropout(x)`` of an unchanged, grad-free ``x``
    reuses the cached halo of ``x`` (see :class:`~pyg_dist.halo.Exact`). Otherwise (plain
    ``edge_index``, evaluation, :math:`p = 0`) it is
    :func:`torch.nn.functional.dropout`.

    Args:
        x (torch.Tensor): ``[num_owned, F]`` features of the owned nodes.
        p (float, optional): Probability of dropping an entry. (default: :obj:`0.5`)
        training (bool, optional): Drop only in training. (default: :obj:`True`)
        edge_index (optional): The graph; a :class:`~pyg_dist.DistEdgeIndex`
            switches to the shared masks. (default: :obj:`None`)
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"'dropout' needs 0 <= p < 1 (got {p})")
    global_id = getattr(edge_index, "global_id", None)
    if not training or p == 0.0 or global_id is None or x.dim() != 2:
        return F.dropout(x, p=p, training=training)
    return _shared_dropout(x, p, edge_index, global_id)


@torch.compiler.disable
def _shared_dropout(x: Tensor, p: float, edge_index: Any, global_id: Tensor) -> Tensor:
    """:func:`dropout` on a :class:`~pyg_dist.DistEdgeIndex`: its seed and call
    count are per-graph Python state, so :func:`torch.compile` breaks here."""
    seed, call = next_call(edge_index)
    return DroppedInput(x, p, seed, call, edge_index).apply(global_id)


@torch.compiler.disable
def shared_scale(key: Tensor, width: int, p: float, edge_index: Any,
                 dtype: torch.dtype = torch.float32) -> Tensor:
    """``[len(key), width]`` dropout scales (0 for dropped entries, ``1 / (1 - p)``
    for kept ones) of entries keyed by ``key`` (int64 ids that name the same
    entry on every rank, e.g. an edge's), drawn like :func:`dropout`'s masks:
    from the graph's shared seed and the next call number, so every rank
    draws the same scale for the same key. A graph break under
    :func:`torch.compile` (per-graph Python state)."""
    seed, call = next_call(edge_index)
    made = DroppedInput(key.new_empty(0, dtype=dtype), p, seed, call, edge_index)
    return made.scale(key, width)


def next_call(edge_index: Any, state: DropoutState | None = None) -> tuple[int, int]:
    """The graph's shared seed (drawn on rank 0 and broadcast at the first
    call) and the number of this call; counts the call in ``state``
    (default: the graph's ``registry.dropout``). Without a graph (``edge_index``
    :obj:`None`) the seed is drawn from this process's generator."""
    if state is None:
        state = edge_index.registry.dropout
    assert state is not None, "a dropout state or a graph that has one"
    if state.seed is None:
        seed = torch.randint(0, 2**31 - 1, (1,), dtype=torch.int64)
        if edge_index is not None:
            seed = broadcast(seed, edge_index.channel.group)
        state.seed = int(seed)
    call = state.calls
    state.calls += 1
    return state.seed, call


def _keep(global_id: Tensor, width: int, seed: int, call: int, p: float,
          columns: Tensor | None = None) -> Tensor:
    """``[len(global_id), width]`` bool: which entries survive (an entry's
    :func:`~pyg_dist.utils.hashing.entry_hash`, read as int32, lies above the lowest
    fraction ``p`` of its range); ``columns``: the global columns of the
    entries (:obj:`None` for ``0 .. width - 1``)."""
    salt = call_key(seed, call, global_id.device)
    return entry_hash(global_id, width, salt, columns) >= int(p * 2**32) - 2**31


def edge_keep(src: Tensor, dst: Tensor, seed: int, call: int, p: float) -> Tensor:
    """``[num_edges]`` bool: which edges (global ``src -> dst`` ids, int64)
    survive call ``call`` of edge dropout with rate ``p`` (ids below 2**32).
    The hash reads the unordered pair, so ``u -> v`` and ``v -> u`` (and
    duplicates) share one fate: two lowbias32 rounds, the first on the smaller
    endpoint and the call's key, the second on that and the larger endpoint."""
    lo, hi = torch.minimum(src, dst).to(torch.int64), torch.maximum(src, dst).to(torch.int64)
    salt = call_key(seed, call, src.device)
    h = mix32(((lo & M32) * 0x85EBCA6B + salt) & M32)
    return mix32(h ^ (((hi & M32) * 0xC2B2AE35) & M32)) >= int(p * 2**32)
