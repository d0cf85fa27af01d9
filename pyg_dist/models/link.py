r"""Models of link prediction: an encoder of nodes and a decoder of pairs.

:class:`LinkModel` pairs any node encoder the package distributes (a PyG
model through :func:`~pyg_dist.nn.to_distributed`, a :class:`~pyg_dist.models.GNN`)
with a decoder: the dot product :math:`h_u^\top h_v` (PyG's
``examples/link_pred.py``) or :class:`LinkPredictor`, OGB's MLP on
:math:`h_u \odot h_v`. :func:`~pyg_dist.train.train` calls the model on the
graph (the node embeddings) and :meth:`~pyg_dist.models.link.LinkModel.decode` on the rows of each
scored pair.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["LinkPredictor", "LinkModel", "dot_product"]


def dot_product(h_src: Tensor, h_dst: Tensor) -> Tensor:
    r"""The score :math:`h_u^\top h_v` of each pair (a logit).

    Args:
        h_src (torch.Tensor): The rows of the pairs' sources.
        h_dst (torch.Tensor): The rows of the pairs' targets.

    Shapes:
        - **input:** :math:`(L, F)`, :math:`(L, F)`
        - **output:** :math:`(L)`
    """
    return (h_src * h_dst).sum(dim=-1)


class LinkPredictor(nn.Module):
    r"""OGB's link predictor (``ogb/examples/linkproppred``): an MLP on
    :math:`h_u \odot h_v` with ReLU and dropout between its layers. It
    returns the logit (OGB's applies a sigmoid; train it with
    ``BCEWithLogits``, as :func:`~pyg_dist.train.train` does).

    Args:
        in_channels (int): Width of the node embeddings.
        hidden_channels (int): Width of the hidden layers.
        out_channels (int): Width of the output (1 for a score).
        num_layers (int): Linear layers (at least 1).
        dropout (float): Dropout between layers.

    Shapes:
        - **input:** :math:`(L, F)`, :math:`(L, F)`
        - **output:** :math:`(L)` when ``out_channels`` is 1, else :math:`(L, out)`
    """

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int, dropout: float) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"'LinkPredictor' got num_layers={num_layers}; use at least 1")
        widths = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.lins: list[nn.Linear] = nn.ModuleList(  # type: ignore[assignment]
            nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.dropout = dropout

    def reset_parameters(self) -> None:
        for lin in self.lins:
            lin.reset_parameters()

    def forward(self, x_i: Tensor, x_j: Tensor) -> Tensor:
        x = x_i * x_j
        for lin in self.lins[:-1]:
            x = F.dropout(F.relu(lin(x)), p=self.dropout, training=self.training)
        x = self.lins[-1](x)
        return x.squeeze(-1) if x.size(-1) == 1 else x

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.lins[0].in_features}, "
                f"num_layers={len(self.lins)})")


class LinkModel(nn.Module):
    r"""A node encoder and a pair decoder: ``model(*inputs)`` is the
    encoder's node embeddings, :meth:`~pyg_dist.models.link.LinkModel.decode` the logit of
    each pair.

    Args:
        encoder (torch.nn.Module): Maps the graph to node embeddings.
        decoder (torch.nn.Module, optional): Maps the rows of the pairs'
            ends ``(h_src, h_dst)`` to logits; :obj:`None` for the dot
            product. (default: :obj:`None`)
    """

    def __init__(self, encoder: nn.Module, decoder: nn.Module | None = None) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        return self.encoder(*args, **kwargs)

    def decode(self, h_src: Tensor, h_dst: Tensor) -> Tensor:
        """The logit of each pair, from the rows of its ends."""
        if self.decoder is None:
            return dot_product(h_src, h_dst)
        return self.decoder(h_src, h_dst)


def decode(model: nn.Module, h_src: Tensor, h_dst: Tensor) -> Tensor:
    """``model.decode(h_src, h_dst)`` where the model has one, else the dot product."""
    fn = getattr(model, "decode", None)
    return dot_product(h_src, h_dst) if fn is None else torch.as_tensor(fn(h_src, h_dst))
