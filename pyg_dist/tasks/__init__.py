"""What edge-level tasks need below the training loop: supervision edges
(:mod:`pyg_dist.tasks.supervision`), negatives that every world size draws
alike (:func:`~pyg_dist.tasks.negatives`) and link metrics over all ranks
(:func:`~pyg_dist.tasks.roc_auc`, :func:`~pyg_dist.tasks.hits_at_k`,
:func:`~pyg_dist.tasks.mrr`, :func:`~pyg_dist.tasks.recall_ndcg_at_k`). The task the loop
trains is
:class:`~pyg_dist.strategies.link_task.LinkTask`."""
from pyg_dist.tasks.link_metrics import hits_at_k, mrr, recall_ndcg_at_k, roc_auc
from pyg_dist.tasks.negatives import KINDS, negatives
from pyg_dist.tasks.supervision import SPLITS, SupervisionEdges, link_split

__all__ = ["SupervisionEdges", "link_split", "SPLITS", "negatives", "KINDS", "roc_auc",
           "hits_at_k", "mrr", "recall_ndcg_at_k"]
