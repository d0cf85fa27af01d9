"""Parameters whose rows are this rank's own nodes: a module that holds them
(:class:`OwnsRows`, e.g. :class:`~pyg_dist.nn.DistLightGCN` once its
embedding table is cut to the rank's nodes) keeps and updates them alone, so
they are neither copied from rank 0 nor summed over the ranks (each row's
gradient is already whole on its owner)."""
from __future__ import annotations

from torch import Tensor, nn

__all__ = ["OwnsRows", "own_rows", "owned_parameters"]


class OwnsRows:
    """A module that can keep only the rows of the nodes one rank owns."""

    def own(self, global_id: Tensor) -> None:
        """Keeps only the rows of the nodes ``global_id`` (this rank's), in place.

        Args:
            global_id (torch.Tensor): ``[num_owned]`` the global ids of this rank's nodes.
        """
        raise NotImplementedError

    def owned_parameters(self) -> list[nn.Parameter]:
        """The parameters that hold this rank's rows alone (none until :meth:`own`)."""
        return []


def own_rows(model: nn.Module, global_id: Tensor) -> None:
    """Cuts every :class:`OwnsRows` module of ``model`` to the rows of this
    rank's nodes ``global_id``.

    Args:
        model (torch.nn.Module): The model.
        global_id (torch.Tensor): ``[num_owned]`` the global ids of this rank's nodes.
    """
    for module in model.modules():
        if isinstance(module, OwnsRows):
            module.own(global_id)


def owned_parameters(model: nn.Module) -> set[int]:
    """The ids (``id(p)``) of ``model``'s parameters that hold this rank's rows alone.

    Args:
        model (torch.nn.Module): The model.
    """
    return {id(p) for module in model.modules() if isinstance(module, OwnsRows)
            for p in module.owned_parameters()}
