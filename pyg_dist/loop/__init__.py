"""A PyG training loop of one's own, distributed:
:class:`~pyg_dist.DistributedModel` sums gradients over the ranks,
:func:`~pyg_dist.cross_entropy` and :func:`~pyg_dist.accuracy` count the nodes
of all ranks, :func:`~pyg_dist.save_predictions` writes every node's
prediction in global order and :func:`~pyg_dist.save_model` the weights, for
PyG's model; :func:`~pyg_dist.save_embeddings` writes every node's embedding
with its global id, which :func:`~pyg_dist.read_embeddings` maps back."""
from pyg_dist.loop.embeddings import read_embeddings, save_embeddings, write_embeddings
from pyg_dist.loop.evaluate import accuracy
from pyg_dist.loop.loss import cross_entropy, global_mean
from pyg_dist.loop.model import DistributedModel, LocalLossWarning
from pyg_dist.loop.predictions import save_predictions
from pyg_dist.loop.save import save_model

__all__ = ["DistributedModel", "LocalLossWarning", "cross_entropy", "global_mean", "accuracy",
           "save_predictions", "save_model", "save_embeddings", "write_embeddings",
           "read_embeddings"]
