"""CSR helpers: building a CSR from an ``edge_index`` and the per-graph
structures backward needs (row of each entry, the transpose), computed once per
graph and cached on the ``col`` tensor that identifies it."""
from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

__all__ = ["to_csr", "csr_row", "csr_transpose", "csr_transpose_values", "cached"]

# id(col) -> (weak reference to col, {key: (col._version, value)}). An entry
# lives as long as the graph's own 'col' tensor does. (Tensors compare
# element-wise, so a WeakKeyDictionary cannot hold them.)
_CACHE: dict[int, tuple[weakref.ref, dict[Any, tuple[int, Any]]]] = {}


def cached(col: Tensor, key: Any, build: Callable[[], Any]) -> Any:
    """Returns ``build()``, remembered for the lifetime of ``col`` (and rebuilt
    if ``col`` is modified in place)."""
    entry = _CACHE.get(id(col))
    if entry is None or entry[0]() is not col:
        key_id = id(col)
        entry = (weakref.ref(col, lambda _: _CACHE.pop(key_id, None)), {})
        _CACHE[key_id] = entry
    slot = entry[1]
    hit = slot.get(key)
    if hit is not None and hit[0] == col._version:
        return hit[1]
    value = build()
    slot[key] = (col._version, value)
    return value


def to_csr(edge_index: Tensor, num_rows: int) -> tuple[Tensor, Tensor, Tensor]:
    r"""Sorts the edges of ``edge_index`` (source in row 0, target in row 1, as in
    PyG) by target and returns ``(rowptr, col, perm)``: row :math:`i` of the CSR
    holds the sources of the edges into node :math:`i`, and ``perm[e]`` is the
    position in ``edge_index`` of the CSR's entry ``e`` (stable, so duplicate
    edges keep their order).

    Args:
        edge_index (torch.Tensor): The edges :obj:`[2, E]`.
        num_rows (int): Nodes (rows of the CSR).

    Shapes:
        - **input:** ``edge_index`` :obj:`[2, E]`
        - **output:** ``rowptr`` :obj:`[num_rows + 1]`, ``col`` and ``perm`` :obj:`[E]`,
          all int64.
    """
    target = edge_index[1]
    perm = torch.sort(target, stable=True).indices
    col = edge_index[0, perm]
    rowptr = ptr_from_sorted(target[perm], num_rows)
    return rowptr, col, perm


def ptr_from_sorted(index: Tensor, size: int) -> Tensor:
    """Pointer vector of length ``size + 1`` for a sorted index vector."""
    counts = torch.bincount(index, minlength=size) if index.numel() else index.new_zeros(size)
    ptr = index.new_zeros(size + 1)
    torch.cumsum(counts, dim=0, out=ptr[1:])
    return ptr


def csr_row(rowptr: Tensor, col: Tensor) -> Tensor:
    """The row of every CSR entry (same dtype as ``col``), cached per graph."""

    def build() -> Tensor:
        num_rows = rowptr.numel() - 1
        deg = (rowptr[1:] - rowptr[:-1]).long()
        row = torch.repeat_interleave(torch.arange(num_rows, device=col.device), deg)
        return row.to(col.dtype)

    return cached(col, ("row", rowptr.numel()), build)


def csr_transpose(rowptr: Tensor, col: Tensor, num_cols: int) -> tuple[Tensor, Tensor, Tensor]:
    """The transpose of an ``[M, num_cols]`` CSR matrix, cached per graph.

    Returns ``(colptr, row, perm)``: the transpose's row pointers
    (:obj:`[num_cols + 1]`), its column indices (:obj:`[nnz]`, rows of the
    original) and ``perm`` (:obj:`[nnz]`, int64) such that ``value[perm]`` are
    the transpose's values. Index dtypes follow ``col``.

    Args:
        rowptr (torch.Tensor): Row pointers :obj:`[M + 1]`.
        col (torch.Tensor): Column of each entry :obj:`[nnz]`; the cache is
            kept with it.
        num_cols (int): Columns of the matrix (rows of the transpose).
    """

    def build() -> tuple[Tensor, Tensor, Tensor]:
        row = csr_row(rowptr, col)
        perm = torch.sort(col, stable=True).indices
        colptr = ptr_from_sorted(col[perm].long(), num_cols).to(col.dtype)
        return colptr, row[perm], perm

    return cached(col, ("transpose", rowptr.numel(), num_cols), build)


def csr_transpose_values(value: Tensor, perm: Tensor) -> Tensor:
    """``value[perm]``: the values of the transpose built by :func:`csr_transpose`,
    cached for the lifetime of ``value`` (and rebuilt if it is modified in
    place), so that a backward pass over fixed edge weights gathers them once."""
    entry = cached(value, ("transpose_values", id(perm)), lambda: (weakref.ref(perm), value[perm]))
    if entry[0]() is not perm:  # the id of a freed 'perm' was reused
        return value[perm]
    return entry[1]
