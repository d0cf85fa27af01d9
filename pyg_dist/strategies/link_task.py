r"""Link prediction as :func:`~pyg_dist.train.train` trains it.

A :class:`LinkTask` reads a graph that carries supervision edges (a
:class:`~pyg_dist.DistData` of a partitioned link split, or in one process
the ``(train_data, val_data, test_data)`` of ``RandomLinkSplit``). Each
training step:

1. the model (the encoder) gives the node embeddings :math:`h` of this
   rank's nodes;
2. this rank's training edges (those whose source it owns) and their
   negatives of the epoch (:func:`~pyg_dist.tasks.negatives`, a
   hash of seed, epoch and edge: the same on every world size) fetch the
   rows of their ends (:func:`~pyg_dist.gather`);
3. the decoder (``model.decode``, else the dot product) scores each pair,
   and the loss is the binary cross entropy with logits averaged over the
   pairs of all ranks (PyG's ``examples/link_pred.py``).

The rows are gathered once per distinct node; the pairs are scored
:data:`PAIR_CHUNK` at a time, each chunk's rows, products and decoder
activations recomputed in the backward instead of kept
(:func:`~pyg_dist.tasks.chunked.chunked_sum`), so a rank's memory grows
with its distinct nodes, not with its pairs.

Evaluation reports the global ROC-AUC of the training, validation and test
edges (:func:`~pyg_dist.tasks.roc_auc`; or OGB's Hits@K or MRR, or a
recommendation's recall@K, ``metric=``); the training edges are scored
against the negatives of epoch 0. Its gathers are booked as evaluation
traffic (ledger direction ``"eval"``), those of the training steps in
direction ``"gather"``, whose bytes per epoch :meth:`LinkTask.gather_bytes`
predicts before training.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.models import LightGCN

from pyg_dist.halo.gather import count, directory_bytes, gather, gather_bytes, referenced
from pyg_dist.halo.layer import registry_of
from pyg_dist.halo.ledger import GATHER
from pyg_dist.metrics import data_keys, mean_over_ranks
from pyg_dist.models.link import decode
from pyg_dist.nn.lightgcn import DistLightGCN
from pyg_dist.runtime import distributed
from pyg_dist.strategies.task import Task, task_of
from pyg_dist.tasks.chunked import Chunk, chunked_sum
from pyg_dist.tasks.link_metrics import hits_at_k, mrr, recall_ndcg_at_k, roc_auc
from pyg_dist.tasks.negatives import KINDS, negatives
from pyg_dist.tasks.supervision import SPLITS, SupervisionEdges, is_link_split, link_split

__all__ = ["LinkTask", "task_for", "carries_links", "LOSSES", "PAIR_CHUNK"]

#: The losses of a link task.
LOSSES = ("bce", "bpr")
#: Pairs scored at a time (the default of ``LinkTask(pair_chunk=)``).
PAIR_CHUNK = 16_384


def carries_links(data: Any) -> bool:
    """Whether ``data`` carries supervision edges (a partitioned link split,
    or a link split in one process).

    Args:
        data (Any): What ``train`` was given as its data.
    """
    return is_link_split(data) or bool(getattr(data, "link_splits", None))


def task_for(data: Any, model: nn.Module) -> Task:
    """The task ``train`` trains on ``data``: a :class:`LinkTask` when it
    carries supervision edges (recommendation with BPR and per-user negatives
    for a :class:`~pyg_dist.nn.DistLightGCN`), else
    :func:`~pyg_dist.strategies.task_of`'s.

    Args:
        data: The graph (or a task).
        model (torch.nn.Module): The model.
    """
    if isinstance(data, Task) or not carries_links(data):
        return task_of(data, model)
    if isinstance(model, LightGCN):
        if not isinstance(model, DistLightGCN):
            raise ValueError("'train' scores LightGCN's embeddings; convert the model first "
                             "with pyg_dist.nn.to_distributed(model) (also in one process)")
        return LinkTask(data, negatives="structured", loss="bpr", features=False)
    return LinkTask(data)


class LinkTask(Task):
    r"""Link prediction on ``data``'s supervision edges.

    Args:
        data (DistData or tuple): A :class:`~pyg_dist.DistData` of a
            partitioned link split, or in one process a link split
            (``RandomLinkSplit``'s three graphs or OGB's ``(data, split_edge)``).
        negatives (str, optional): ``"uniform"`` or ``"structured"``
            negatives of the training positives, drawn anew each epoch.
            (default: :obj:`"uniform"`)
        num_negatives (int, optional): Negatives per positive; 0 trains on
            the supervision edges as given. (default: :obj:`1`)
        seed (int, optional): The negatives' seed. (default: :obj:`0`)
        loss (str, optional): :obj:`"bce"`, binary cross entropy with
            logits over the edges and negatives; or :obj:`"bpr"`, PyG's
            ``BPRLoss`` (LightGCN's recommendation loss): :math:`-\log
            \sigma(s_{ui} - s_{uj})` averaged over the pairs of each training
            edge :math:`(u, i)` and its negatives :math:`(u, j)`, plus
            ``lambda_reg`` times the squared norm of the layer-0 embeddings
            (``model.embedding.weight``) of the nodes any pair names, over
            the number of pairs. (default: :obj:`"bce"`)
        lambda_reg (float, optional): The BPR regularisation. (default: :obj:`1e-4`)
        features (bool, optional): Whether the model reads ``data.x``
            (``model(x, edge_index)``; else ``model(edge_index)``).
            (default: :obj:`True`)
        metric (str, optional): What evaluation reports for each split:
            :obj:`"auc"` (ROC-AUC of its positives against its negatives),
            :obj:`"hits@K"` (OGB's Hits@K, e.g. :obj:`"hits@50"`),
            :obj:`"mrr"` (OGB's MRR: each positive ranked among its own
            negatives where the split holds them per source, as OGB's
            ogbl-citation2 does, else among ``eval_negatives`` per-source
            negatives of epoch 0) or :obj:`"recall@K"` (a recommendation's
            Recall@K, e.g. :obj:`"recall@20"`: each user's items ranked by
            the dot product over every item but its training ones,
            :func:`~pyg_dist.tasks.recall_ndcg_at_k`; nan for the training
            split). (default: :obj:`"auc"`)
        eval_negatives (int, optional): Per-source negatives of each positive
            for :obj:`"mrr"` on a split without its own. (default: :obj:`100`)
        num_users (int, optional): Users of a user-item graph (nodes
            :math:`0, \dots, U - 1`; items after them), for
            :obj:`"recall@K"`; :obj:`None` for one more than the highest
            source of a positive supervision edge. Every positive must go
            from a user to an item. (default: :obj:`None`)
        pair_chunk (int, optional): Pairs scored at a time; in training each
            chunk's activations are recomputed in the backward, so memory
            holds one chunk's (a chunk's sum enters the loss in its turn, so
            the loss may differ from one sum in the last bits).
            (default: :data:`PAIR_CHUNK`)

    Attributes:
        splits (dict[str, SupervisionEdges]): This rank's supervision edges.
        num_nodes (int): Nodes of the whole graph.
        epoch (int): The epoch whose negatives :meth:`loss` draws.
    """

    links = True

    def __init__(self, data: Any, negatives: str = "uniform", num_negatives: int = 1,
                 seed: int = 0, loss: str = "bce", lambda_reg: float = 1e-4,
                 features: bool = True, metric: str = "auc", eval_negatives: int = 100,
                 num_users: int | None = None, pair_chunk: int = PAIR_CHUNK) -> None:
        if isinstance(pair_chunk, bool) or not isinstance(pair_chunk, int) or pair_chunk < 1:
            raise ValueError(f"'LinkTask' got pair_chunk={pair_chunk!r}; pass an int >= 1 "
                             f"(pairs scored at a time)")
        if metric not in ("auc", "mrr") and not (_at_k(metric, "hits")
                                                 or _at_k(metric, "recall")):
            raise ValueError(f"'LinkTask' got metric='{metric}'; use 'auc', 'mrr', "
                             f"'hits@K' or 'recall@K' with K >= 1 (e.g. 'hits@50')")
        if loss not in LOSSES:
            raise ValueError(f"'LinkTask' got loss='{loss}'; use one of {', '.join(LOSSES)}")
        if loss == "bpr" and num_negatives < 1:
            raise ValueError("'LinkTask' with loss='bpr' pairs each edge with its negatives; "
                             "draw num_negatives >= 1")
        if negatives not in KINDS:
            raise ValueError(f"'LinkTask' got negatives='{negatives}'; use one of "
                             f"{', '.join(KINDS)}")
        if is_link_split(data):
            data, self.splits = link_split(data)
            self.num_nodes = int(data.num_nodes)
        else:
            self.splits = {s: data.supervision(s) for s in data.link_splits}
            self.num_nodes = int(data.meta.num_nodes)
        if "train" not in self.splits:
            raise ValueError("'train' trains link prediction on 'train' supervision edges; "
                             "partition a link split that has them")
        if features and "x" not in data_keys(data):
            raise ValueError("'train' needs node features data.x for link prediction; "
                             "partition a graph that has them")
        self.data = data
        self.inputs = (data.x, data.edge_index) if features else (data.edge_index,)
        self.loss_kind, self.lambda_reg = loss, lambda_reg
        self.metric, self.eval_negatives = metric, eval_negatives
        self.pair_chunk = pair_chunk
        self.y = None  # type: ignore[assignment]
        self.train_mask = self.val_mask = self.test_mask = None  # type: ignore[assignment]
        self._keys = []
        self.ledger = getattr(data, "ledger", None)
        self.registry = registry_of(data)
        self.kind, self.num_negatives, self.seed = negatives, num_negatives, seed
        self.epoch = 0
        self._own_negatives: dict[str, tuple[SupervisionEdges, int] | None] = {}
        self.num_users = num_users
        if _at_k(metric, "recall"):
            self.num_users = self._users(num_users)

    @property
    def graph(self) -> Any:
        """The graph the rows of the pairs' ends come from (``data.edge_index``)."""
        return self.data.edge_index

    def for_epoch(self, epoch: int) -> Task:
        view = copy.copy(self)
        view.epoch = epoch
        return view

    def edges(self, split: str, epoch: int | None = None) -> SupervisionEdges:
        """This rank's scored edges of ``split``: the supervision edges and,
        for ``"train"``, the negatives of the epoch (label 0, ids after the
        positives': :math:`L + i \\cdot K + k`... of the negatives' counter).

        Args:
            split (str): The split.
            epoch (int, optional): The negatives' epoch; :obj:`None` for
                :attr:`epoch`. (default: :obj:`None`)
        """
        edges = self.splits[split]
        if split != "train" or self.num_negatives == 0:
            return edges
        pos = edges.label > 0
        neg = negatives(edges.index[:, pos], edges.id[pos], self.num_nodes, self.seed,
                        self.epoch if epoch is None else epoch, self.kind, self.num_negatives)
        return SupervisionEdges(torch.cat([edges.index, neg], 1),
                                torch.cat([edges.label, edges.label.new_zeros(neg.size(1))]),
                                torch.cat([edges.id, edges.id.new_full((neg.size(1),), -1)]))

    def scores(self, model: nn.Module, h: Tensor, edges: SupervisionEdges,
               direction: str = GATHER) -> Tensor:
        """The logit of each edge: its ends' rows gathered from their owners
        (booked in ``direction``), then decoded, ``pair_chunk`` edges at
        a time. Collective."""
        rows, src, dst = self._rows(h, edges, direction)
        return torch.cat([decode(model, rows.index_select(0, src[lo:hi]),
                                 rows.index_select(0, dst[lo:hi]))
                          for lo, hi in _chunks(src.numel(), self.pair_chunk)])

    def _rows(self, h: Tensor, edges: SupervisionEdges,
              direction: str = GATHER) -> tuple[Tensor, Tensor, Tensor]:
        """The rows of the edges' distinct ends (gathered from their owners,
        each once), and each edge's source and target among them. Collective."""
        if h.dim() != 2:
            raise ValueError(f"'LinkTask' scores node embeddings [nodes, width]; the model gave "
                             f"shape {tuple(h.shape)}. A model that scores pairs itself (PyG's "
                             f"LightGCN) goes through pyg_dist.nn.to_distributed(model) first")
        unique, inverse = torch.unique(_ends(edges), return_inverse=True)
        num = edges.num_edges
        return gather(h, unique, self.graph, direction), inverse[:num], inverse[num:]

    def gather_bytes(self, epochs: range, row_bytes: int) -> list[int]:
        """Bytes the training steps of ``epochs`` book gathering rows (ledger
        direction ``"gather"``), all ranks, one entry per epoch, worked out
        from the epochs' pairs without moving a row
        (``pyg_dist.halo.gather.gather_bytes``); the first of them
        also builds the graph's directory unless it is built. Collective.

        Args:
            epochs (range): The epochs (their negatives), in training order.
            row_bytes (int): Bytes of one row of the model's output.
        """
        if getattr(self.graph, "channel", None) is None:
            return [0 for _ in epochs]
        world = self.graph.channel.plan.world_size
        directory = directory_bytes(self.graph)  # before count() builds it
        counted = count(self.graph, [_ends(self.edges("train", e)) for e in epochs])
        mine = [gather_bytes(c, world, row_bytes)
                + (gather_bytes(c, world, rows=False) if self._regularised() else 0)
                for c in counted]
        if mine:
            mine[0] += directory
        return [int(v) for v in distributed.all_reduce_values(mine, "sum")] if mine else []

    def _regularised(self) -> bool:
        """Whether the loss names the pairs' nodes again (BPR's regularisation)."""
        return self.loss_kind == "bpr" and bool(self.lambda_reg)

    def loss(self, out: Tensor, model: nn.Module) -> tuple[Tensor, float]:
        """The loss (``loss``) over the training edges and the epoch's
        negatives of all ranks: this rank's share and the global value.
        Collective."""
        edges = self.edges("train")
        rows, src, dst = self._rows(out, edges)
        if self.loss_kind == "bpr":
            return self._bpr(model, rows, src, dst, edges)
        label = edges.label.to(out.dtype)

        def bce(lo: int, hi: int) -> Chunk:
            def part(h_src: Tensor, h_dst: Tensor) -> Tensor:
                score = decode(model, h_src, h_dst)
                return F.binary_cross_entropy_with_logits(score, label[lo:hi], reduction="sum")
            return (src[lo:hi], dst[lo:hi]), part

        local = self._summed(bce, rows, model, edges.num_edges)
        return mean_over_ranks(local, edges.num_edges)

    def _summed(self, chunk: Callable[[int, int], Chunk], rows: Tensor, model: nn.Module,
                total: int, per: int = 1) -> Tensor:
        """The sum of the chunks ``chunk(lo, hi)`` over ``total`` items of
        ``per`` pairs each, ``pair_chunk`` pairs a chunk, each recomputed in
        the backward (:func:`~pyg_dist.tasks.chunked.chunked_sum`)."""
        spans = _chunks(total, max(1, self.pair_chunk // per))
        return chunked_sum([chunk(lo, hi) for lo, hi in spans], rows, list(model.parameters()))

    def _bpr(self, model: nn.Module, rows: Tensor, src: Tensor, dst: Tensor,
             edges: SupervisionEdges) -> tuple[Tensor, float]:
        num, k = self.splits["train"].num_edges, self.num_negatives

        def bpr(lo: int, hi: int) -> Chunk:
            a, b = num + lo * k, num + hi * k  # the negatives of positives lo..hi

            def part(pos_src: Tensor, pos_dst: Tensor, neg_src: Tensor, neg_dst: Tensor
                     ) -> Tensor:
                pos = decode(model, pos_src, pos_dst)
                neg = decode(model, neg_src, neg_dst).view(hi - lo, k)
                return -F.logsigmoid(pos.view(-1, 1) - neg).sum()
            return (src[lo:hi], dst[lo:hi], src[a:b], dst[a:b]), part

        local = self._summed(bpr, rows, model, num, 1 + k)
        if self.lambda_reg:
            embedding = model.get_submodule("embedding")
            assert isinstance(embedding, nn.Embedding), "BPR regularises an embedding table"
            weight = embedding.weight
            gid = getattr(self.graph, "global_id", None)
            cut = getattr(model, "owned", None) is not None  # the table holds this rank's rows
            rows = weight if gid is None or cut else weight[gid]
            named = referenced(_ends(edges), self.graph, rows.size(0))
            local = local + self.lambda_reg * rows[named].pow(2).sum()
        return mean_over_ranks(local, num * k)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> tuple[float, float, float]:
        """The global ``metric`` of the training, validation and test
        edges (nan for a split the data lacks). Collective."""
        model.eval()
        h = model(*self.inputs)
        out = []
        for split in SPLITS:
            if split not in self.splits:
                out.append(float("nan"))
                continue
            out.append(self._metric(model, h, split))
        return out[0], out[1], out[2]

    def _metric(self, model: nn.Module, h: Tensor, split: str) -> float:
        recall = _at_k(self.metric, "recall")
        if recall is not None:
            return float("nan") if split == "train" else self.ranking(h, split, recall)[0]
        if self.metric == "mrr":
            own = self.own_negatives(split)
            if own is None:
                edges = self.splits[split].select(self.splits[split].label > 0)
                neg = negatives(edges.index, edges.id, self.num_nodes, self.seed, 0,
                                "structured", self.eval_negatives)
                both = SupervisionEdges(
                    torch.cat([edges.index, neg], 1),
                    torch.cat([edges.label, edges.label.new_zeros(neg.size(1))]),
                    torch.cat([edges.id, edges.id.new_full((neg.size(1),), -1)]))
                per = self.eval_negatives
            else:
                both, per = own
            score = self.scores(model, h, both, "eval")
            num = both.num_edges // (per + 1)
            return mrr(score[:num], score[num:].view(num, per))
        edges = self.edges(split, epoch=0)
        score = self.scores(model, h, edges, "eval")
        pos, neg = score[edges.label > 0], score[edges.label <= 0]
        k = _at_k(self.metric, "hits")
        return roc_auc(pos, neg) if k is None else hits_at_k(pos, neg, k)

    def own_negatives(self, split: str) -> tuple[SupervisionEdges, int] | None:
        """The split's positives, then each one's own negatives in turn, and
        how many each has, :math:`M`, where the split holds :math:`M`
        negatives per positive that share its source (OGB's
        ogbl-citation2: negative :math:`m` of positive :math:`i` is edge
        :math:`P + iM + m` of the split's :math:`P` positives and
        :math:`PM` negatives, on the rank of its positive); :obj:`None`
        where it does not. Collective.

        Args:
            split (str): The split.
        """
        if split not in self._own_negatives:
            self._own_negatives[split] = self._pair_negatives(self.splits[split])
        return self._own_negatives[split]

    def _pair_negatives(self, edges: SupervisionEdges) -> tuple[SupervisionEdges, int] | None:
        is_pos = edges.label > 0
        pos, neg = edges.select(is_pos), edges.select(~is_pos)
        counts = [float(pos.num_edges), float(neg.num_edges)]
        num_pos, num_neg = (distributed.all_reduce_values(counts)
                            if distributed.is_distributed() else counts)
        per = int(num_neg // num_pos) if num_pos and num_neg % num_pos == 0 else 0
        paired = per > 0 and neg.num_edges == pos.num_edges * per
        if paired and neg.num_edges:
            pos = pos.select(torch.argsort(pos.id))
            neg = neg.select(torch.argsort(neg.id))
            owner = torch.div(neg.id - int(num_pos), per, rounding_mode="floor")
            paired = (torch.equal(owner, pos.id.repeat_interleave(per))
                      and torch.equal(neg.index[0], pos.index[0].repeat_interleave(per)))
        if distributed.is_distributed():
            paired = distributed.all_reduce_values([float(not paired)])[0] == 0
        if not paired:
            return None
        both = SupervisionEdges(torch.cat([pos.index, neg.index], 1),
                                torch.cat([pos.label, neg.label]), torch.cat([pos.id, neg.id]))
        return both, per

    def ranking(self, h: Tensor, split: str, k: int) -> tuple[float, float]:
        """Recall@``k`` and NDCG@``k`` of the positives of ``split`` over
        every item, from the embeddings ``h`` of this rank's nodes: each
        user's items ranked by the dot product, its training items left out
        (:func:`~pyg_dist.tasks.recall_ndcg_at_k`). Collective.

        Args:
            h (torch.Tensor): ``[N_own, F]`` the model's output.
            split (str): The split whose interactions are the targets.
            k (int): :math:`K`.
        """
        if self.num_users is None:
            raise ValueError("'LinkTask.ranking' ranks items for users; make the task with "
                             "metric='recall@K' or num_users=U")
        edges = self.splits[split]
        graph = self.graph
        gid = getattr(self.data, "global_id", None)
        if gid is None:  # one process: every node, in global order
            gid = torch.arange(h.size(0), device=h.device)
        trained = (graph.global_edges() if hasattr(graph, "global_edges")
                   else (graph[0], graph[1]))
        return recall_ndcg_at_k(h, gid, trained, edges.index[:, edges.label > 0],
                                self.num_users, k)

    def _users(self, given: int | None) -> int:
        """The users of a user-item graph: ``given``, or one more than the
        highest source of a positive supervision edge; raises, naming the
        fix, unless every positive goes from a user to an item. Collective."""
        index = torch.cat([e.index[:, e.label > 0] for e in self.splits.values()], 1)
        high = float(index[0].max()) if index.numel() else -1.0
        low = float(index[1].min()) if index.numel() else float(self.num_nodes)
        if distributed.is_distributed():
            high, low = distributed.all_reduce_values([high, -low], "max")
            low = -low
        users = int(high) + 1 if given is None else given
        if high >= users or low < users or users >= self.num_nodes:
            raise ValueError(f"'LinkTask' with metric='{self.metric}' ranks items for users, "
                             f"but the supervision edges do not all go from a user (ids 0 to "
                             f"{users - 1}) to an item (ids {users} to {self.num_nodes - 1}): "
                             f"sources reach {int(high)}, targets start at {int(low)}; pass a "
                             f"user-item graph, users first (num_users=U), or use "
                             f"metric='auc' for link prediction")
        return users


def _chunks(total: int, size: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` spans of ``size`` covering ``range(total)`` (one, empty, for 0)."""
    return [(lo, min(lo + size, total)) for lo in range(0, total, size)] or [(0, 0)]


def _ends(edges: SupervisionEdges) -> Tensor:
    """The global ids of the edges' sources, then their targets."""
    return torch.cat([edges.index[0], edges.index[1]])


def _at_k(metric: str, name: str) -> int | None:
    """K of ``"<name>@K"`` (``"hits@50"``, ``"recall@20"``); :obj:`None` for
    another metric."""
    head, _, k = metric.partition("@")
    return int(k) if head == name and k.isdigit() and int(k) >= 1 else None
