"""What every Dist layer shares with the PyG layer it extends: the halo policy
attributes, and TorchScript, which compiles the PyG layer itself."""
from __future__ import annotations

from typing import Any, ClassVar

from pyg_dist.halo import HaloPolicy
from pyg_dist.nn.checks import halo_repr

__all__ = ["DistLayer"]


class DistLayer:
    """Mixin of the Dist layers (specialised twins and the generic path).

    A Dist layer *is* its PyG class on a plain ``edge_index``; on a
    :class:`~pyg_dist.DistEdgeIndex` it runs distributed. It adds two
    attributes, ``halo`` (the layer's :class:`~pyg_dist.halo.HaloPolicy`;
    :obj:`None` uses the graph's default), ``halo_name`` (its name in the
    ledger; :obj:`None` numbers layers in order of first use) and
    ``pre_aggregate`` (exchange partial sums on a minimum vertex cover where
    the aggregation allows; :obj:`None` uses the graph's default).

    :func:`torch.jit.script` compiles the single-process path only: it
    scripts the PyG class, sharing this layer's parameters and buffers.
    """

    #: The PyG layer this Dist layer extends.
    pyg_class: ClassVar[Any]
    #: Whether the layer needs every halo row: policies that choose
    #: (:class:`~pyg_dist.halo.Auto`) then keep them all.
    complete_halo: ClassVar[bool] = False
    halo: HaloPolicy | None = None
    halo_name: str | None = None
    pre_aggregate: bool | None = None

    def __prepare_scriptable__(self) -> Any:
        twin = self.pyg_class.__new__(self.pyg_class)
        twin.__dict__.update(self.__dict__)  # the same parameter and buffer dicts
        twin._set_jittable_templates()
        return twin

    def __repr__(self) -> str:
        extra = "" if self.pre_aggregate is None else f", pre_aggregate={self.pre_aggregate}"
        return super().__repr__()[:-1] + halo_repr(self.halo) + extra + ")"  # type: ignore[misc]
