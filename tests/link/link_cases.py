"""Link-prediction cases shared by the test process (which cuts the graphs and
trains the single-process PyG reference) and the ranks (which train on their
parts). Everything a rank needs travels in the case dicts."""
import copy
import math
import random

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn.models import GCN, GraphSAGE, LightGCN
from torch_geometric.transforms import RandomLinkSplit

import pyg_dist
from pyg_dist.config import GradSync, GraphParallel
from pyg_dist.halo.gather import gather
from pyg_dist.models.link import LinkModel, LinkPredictor
from pyg_dist.nn import to_distributed
from pyg_dist.strategies.link_task import LinkTask
from pyg_dist.tasks import hits_at_k, mrr, recall_ndcg_at_k, roc_auc
from pyg_dist.tasks.negatives import negatives
from pyg_dist.train import train

EPOCHS = 5
LR = 0.01


def graph(num_nodes=48, num_edges=160, isolated=5, undirected=True, seed=0, feats=7):
    """A random graph whose last ``isolated`` nodes have no edge."""
    gen = torch.Generator().manual_seed(seed)
    live = num_nodes - isolated
    edge_index = torch.randint(0, live, (2, num_edges), generator=gen)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    edge_index = torch.unique(edge_index, dim=1)
    if undirected:
        edge_index = torch.unique(torch.cat([edge_index, edge_index.flip(0)], 1), dim=1)
    x = torch.randn(num_nodes, feats, generator=gen)
    return Data(x=x, edge_index=edge_index, num_nodes=num_nodes)


def link_split(data, undirected, seed=0):
    torch.manual_seed(seed)
    random.seed(seed)  # PyG draws the validation and test negatives with Python's random
    split = RandomLinkSplit(num_val=0.15, num_test=0.15, is_undirected=undirected,
                            add_negative_train_samples=False)
    return split(data)


def model(kind, feats):
    torch.manual_seed(1)
    if kind == "lightgcn":
        return LightGCN(feats, 8, 2)  # feats: the number of nodes
    if kind == "gcn-dot":
        return LinkModel(GCN(feats, 16, 2, out_channels=8))
    return LinkModel(GraphSAGE(feats, 16, 2, out_channels=8), LinkPredictor(8, 16, 1, 2, 0.0))


def reference(kind, split, seed=0):
    """Single-process PyG: the encoder on the training graph, the dot product
    (or the MLP) on each training edge and the epoch's negatives, BCE with
    logits, Adam. Returns each step's loss, the last step's gradients and
    the weights after the last step."""
    train_data = split[0]
    if kind == "lightgcn":
        return _lightgcn_reference(split, seed)
    net = model(kind, train_data.x.size(1))
    opt = torch.optim.Adam(net.parameters(), lr=LR)
    pos = train_data.edge_label_index
    losses, num_nodes = [], train_data.num_nodes
    for epoch in range(1, EPOCHS + 1):
        opt.zero_grad()
        z = net(train_data.x, train_data.edge_index)
        neg = negatives(pos, torch.arange(pos.size(1)), num_nodes, seed, epoch)
        index = torch.cat([pos, neg], 1)
        label = torch.cat([torch.ones(pos.size(1)), torch.zeros(neg.size(1))])
        if kind == "gcn-dot":
            score = (z[index[0]] * z[index[1]]).sum(-1)
        else:
            score = net.decoder(z[index[0]], z[index[1]])
        loss = F.binary_cross_entropy_with_logits(score, label)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    grads = {k: p.grad.clone() for k, p in net.named_parameters()}
    net.eval()
    with torch.no_grad():
        z = net(train_data.x, train_data.edge_index)
    grads["embeddings"] = z
    grads["decoder"] = copy.deepcopy(net)
    aucs = {}
    for name, d in zip(("val", "test"), split[1:]):
        i = d.edge_label_index
        s = ((z[i[0]] * z[i[1]]).sum(-1) if kind == "gcn-dot"
             else net.decoder(z[i[0]], z[i[1]]))
        aucs[name] = pairwise_auc(s[d.edge_label > 0], s[d.edge_label == 0])
    return losses, grads, net.state_dict(), aucs


def _lightgcn_reference(split, seed):
    """PyG's LightGCN example: the embeddings, per-user negatives, BPR with
    its regularisation over the nodes the pairs name."""
    train_data = split[0]
    num_nodes = train_data.num_nodes
    net = model("lightgcn", num_nodes)
    opt = torch.optim.Adam(net.parameters(), lr=LR)
    pos = train_data.edge_label_index
    losses = []
    for epoch in range(1, EPOCHS + 1):
        opt.zero_grad()
        z = net.get_embedding(train_data.edge_index)
        neg = negatives(pos, torch.arange(pos.size(1)), num_nodes, seed, epoch, "structured")
        pos_rank = (z[pos[0]] * z[pos[1]]).sum(-1)
        neg_rank = (z[neg[0]] * z[neg[1]]).sum(-1)
        loss = net.recommendation_loss(pos_rank, neg_rank,
                                       node_id=torch.cat([pos, neg], 1).unique())
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    grads = {k: p.grad.clone() for k, p in net.named_parameters()}
    with torch.no_grad():
        grads["embeddings"] = net.get_embedding(train_data.edge_index)
    aucs = {"val": float("nan"), "test": float("nan")}  # positives only: no AUC
    return losses, grads, net.state_dict(), aucs


def pairwise_auc(pos, neg):
    """ROC-AUC by counting every pair (the definition, no sorting)."""
    diff = pos.double().view(-1, 1) - neg.double().view(1, -1)
    return float(((diff > 0).double() + 0.5 * (diff == 0).double()).mean())


#: Scores whose metrics are counted by hand in test_link_metrics.py.
POS = [0.9, 0.5, 0.5, 0.1]
NEG = [0.8, 0.5, 0.3, 0.3, 0.0]
MRR_POS = [0.9, 0.5, 0.1]
MRR_NEG = [[0.95, 0.9, 0.1], [0.5, 0.2, 0.6], [0.0, 0.0, 0.0]]


def metrics(rank=0, world=1):
    """The metrics of this rank's share (every ``world``-th score from
    ``rank``) of the hand-counted scores."""
    pos, neg = torch.tensor(POS)[rank::world], torch.tensor(NEG)[rank::world]
    out = {"auc": roc_auc(pos, neg)}
    for k in (1, 2, 3, 6):
        out[f"hits@{k}"] = hits_at_k(pos, neg, k)
    out["mrr"] = mrr(torch.tensor(MRR_POS)[rank::world], torch.tensor(MRR_NEG)[rank::world])
    return out


#: A ranking counted by hand: users 0 and 1 (embedding 1), items 2 to 6
#: scored 1, 2, 2, 2, 0 by both; user 0 trained on item 3. K = 2, ties by
#: item id: user 0 ranks [4, 5] (its test item 5 second: recall 1, NDCG
#: 1 / log2 3), user 1 ranks [3, 4] (its test items 2 and 5 missed: 0, 0).
RANKED = {"z": [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 0.0], "train": [[0], [3]],
          "test": [[0, 1, 1], [5, 5, 2]], "users": 2, "k": 2}
RANKING = (0.5, 0.5 / math.log2(3))


def hand_ranking(rank=0, world=1, **chunks):
    """Recall and NDCG@2 of :data:`RANKED` with this rank's share: the
    nodes ``g`` with ``g % world == rank``, the training pairs of their
    items, the test pairs of their users."""
    z = torch.tensor(RANKED["z"]).view(-1, 1)
    own = torch.arange(rank, z.size(0), world)
    train, test = torch.tensor(RANKED["train"]), torch.tensor(RANKED["test"])
    train = train[:, train[1] % world == rank]
    test = test[:, test[0] % world == rank]
    return recall_ndcg_at_k(z[own], own, (train[0], train[1]), test, RANKED["users"],
                            RANKED["k"], **chunks)


def rank_body(cases):
    """Every case on this rank; returns what the test compares, per case,
    and the hand-counted metrics (first) and ranking (last)."""
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    out = [metrics(rank, world)]
    for case in cases:
        data = pyg_dist.DistData.load(case["parts"])
        found = {"global_id": data.global_id.clone(),
                 "supervision": {s: data.supervision(s) for s in data.link_splits}}
        src, dst = data.edge_index.global_edges()
        found["edges"] = torch.stack([src, dst])
        found["gather"] = _gather_check(data, case)
        light = case["kind"] == "lightgcn"
        task = LinkTask(data, negatives="structured" if light else "uniform",
                        features=not light)
        found["negatives"] = task.edges("train", epoch=3)
        feats = data.meta.num_nodes if light else data.x.size(1)
        net = to_distributed(model(case["kind"], feats))
        net.load_state_dict(case["state"])
        opt = torch.optim.Adam(net.parameters(), lr=LR)
        result = train(net, data, EPOCHS, optimizer=opt, progress=False)
        found["losses"] = [s.loss for s in result.history]
        found["aucs"] = {"val": result.history[-1].val_acc, "test": result.history[-1].test_acc}
        found["grads"] = {k: p.grad.clone() for k, p in net.named_parameters()}
        found["state"] = copy.deepcopy(net.state_dict())
        pyg_dist.save_embeddings(net, data, case["emb"])
        found["policies"] = {} if light else _policies(data, case)
        if light:
            found["recall_ndcg"] = _recall_ndcg(net, data)
            found["compressed"] = _compressed(case)
        else:
            found["hits@3"] = LinkTask(data, metric="hits@3").evaluate(net)
            found["mrr"] = LinkTask(data, metric="mrr", eval_negatives=5).evaluate(net)
        out.append(found)
    out.append({"whole": hand_ranking(rank, world),
                "blocks": hand_ranking(rank, world, user_chunk=1, item_chunk=2)})
    return out


def _gather_check(data, case):
    """Rows of ``case["index"]``'s ids of this rank (repeats, isolated nodes,
    own rows) of a matrix made from the global ids, and the gradient of
    sum(weight * rows) on this rank's rows; the ledger's gather bytes."""
    rank = data.rank
    index = case["index"][rank]
    h = (data.global_id.double().view(-1, 1) * torch.tensor([1.0, -2.0, 0.5])).float()
    h.requires_grad_(True)
    rows = gather(h, index, data.edge_index)
    weight = case["weight"][rank]
    (rows * weight).sum().backward()
    ledger = data.ledger.totals()
    rows_bytes = sum(e.bytes_recv for e in data.ledger.entries.values()
                     if e.layer == "gather/rows")
    return {"rows": rows.detach(), "grad": h.grad.clone(),
            "bytes_gather": ledger["bytes_gather"], "rows_bytes": rows_bytes}


def _compressed(case):
    """LightGCN with fp16 gradient compression: its only parameter holds the
    rank's own rows, so nothing is summed (DDP is never built for it) and
    the run is the uncompressed one's, with no gradient bytes."""
    data = pyg_dist.DistData.load(case["parts"])
    net = to_distributed(model("lightgcn", data.meta.num_nodes))
    net.load_state_dict(case["state"])
    opt = torch.optim.Adam(net.parameters(), lr=LR)
    result = train(net, data, EPOCHS, grad_sync=GradSync(compress="fp16"), optimizer=opt,
                   progress=False)
    return {"losses": [s.loss for s in result.history],
            "grad_bytes": sum(s.grad_bytes for s in result.history),
            "state": copy.deepcopy(net.state_dict())}


#: Every halo policy trains the link task (two steps each, from the same weights).
POLICIES = ("adaptive:0.01", "auto", "cached", "exact", "isolated", "pipelined",
            "sampled:0.5", "stale:2", "exact,compress=fp16")


def _policies(data, case):
    """Each policy's two losses, from the case's initial weights."""
    out = {}
    for spec in POLICIES:
        data = pyg_dist.DistData.load(case["parts"])  # a run's ledger and halo state of its own
        net = to_distributed(model(case["kind"], data.x.size(1)))
        net.load_state_dict(case["state"])
        opt = torch.optim.Adam(net.parameters(), lr=LR)
        result = train(net, data, 2, strategy=GraphParallel(halo=spec), optimizer=opt,
                       progress=False)
        out[spec] = [s.loss for s in result.history]
    return out


#: Users of the recommendation case, and the K of its recall and NDCG.
USERS, K = 60, 5


def _recall_ndcg(net, data):
    """Recall and NDCG of the trained model's embeddings, at once and in
    blocks of 7 users x 13 items (neither divides the users or the items)."""
    net.eval()
    with torch.no_grad():
        h = net(data.edge_index)
    src, dst = data.edge_index.global_edges()
    args = (h, data.global_id, (src, dst), data.supervision("test").index, USERS, K)
    return {"whole": recall_ndcg_at_k(*args, user_chunk=10**6, item_chunk=10**6),
            "blocks": recall_ndcg_at_k(*args, user_chunk=7, item_chunk=13)}


def recommended_recall_ndcg(net, split, users=USERS, k=K):
    """Recall and NDCG@k from PyG's ``LightGCN.recommend`` on the training
    graph, one user at a time over every item but its training ones,
    counted against its test items."""
    train, test = split[0].edge_label_index, split[2].edge_label_index
    items = torch.arange(users, split[0].num_nodes)
    recall = ndcg = seen = 0.0
    for u in range(users):
        wanted = set(test[1, test[0] == u].tolist())
        if not wanted:
            continue
        allowed = items[~torch.isin(items, train[1, train[0] == u])]
        with torch.no_grad():
            ranked = net.recommend(split[0].edge_index, src_index=torch.tensor([u]),
                                   dst_index=allowed, k=k)[0].tolist()
        one_recall, one_ndcg = user_recall_ndcg(ranked, wanted, k)
        recall, ndcg, seen = recall + one_recall, ndcg + one_ndcg, seen + 1
    return recall / seen, ndcg / seen


def user_recall_ndcg(ranked: list[int], wanted: set[int], k: int) -> tuple[float, float]:
    """One user's recall and NDCG@k of the items ``ranked`` against the test
    items ``wanted`` (the definitions)."""
    hits = [1.0 if i in wanted else 0.0 for i in ranked]
    dcg = sum(h / math.log2(j + 2) for j, h in enumerate(hits))
    ideal = sum(1 / math.log2(j + 2) for j in range(min(k, len(wanted))))
    return sum(hits) / len(wanted), dcg / ideal


def brute_recall_ndcg(z, split, users=USERS, k=K):
    """Every user's scores over every item, its training items left out, the
    top k against its test items: recall and NDCG averaged over users with
    test items (the definitions, one user at a time)."""
    train, test = split[0].edge_label_index, split[2].edge_label_index
    items = torch.arange(users, z.size(0))
    recall = ndcg = seen = 0.0
    for u in range(users):
        wanted = set(test[1, test[0] == u].tolist())
        if not wanted:
            continue
        scores = z[items] @ z[u]
        scores[torch.isin(items, train[1, train[0] == u])] = float("-inf")
        ranked = items[torch.topk(scores, k).indices].tolist()
        one_recall, one_ndcg = user_recall_ndcg(ranked, wanted, k)
        recall, ndcg, seen = recall + one_recall, ndcg + one_ndcg, seen + 1
    return recall / seen, ndcg / seen


def hand_hits_mrr(kind, net, z, split, k=3, m=5, seed=0):
    """Hits@k and MRR of the validation edges counted by their definitions,
    one positive at a time (OGB's, with per-source negatives of epoch 0)."""
    def score(i):
        with torch.no_grad():
            if kind == "gcn-dot":
                return (z[i[0]] * z[i[1]]).sum(-1)
            return net.decoder(z[i[0]], z[i[1]])

    d = split[1]
    s = score(d.edge_label_index)
    pos, neg = s[d.edge_label > 0].tolist(), s[d.edge_label == 0].tolist()
    kth = sorted(neg, reverse=True)[k - 1]
    hits = sum(1 for p in pos if p > kth) / len(pos)
    edges = d.edge_label_index[:, d.edge_label > 0]
    ids = torch.nonzero(d.edge_label > 0).view(-1)
    total = 0.0
    for j in range(edges.size(1)):
        one = edges[:, j:j + 1]
        p = float(score(one))
        negs = score(negatives(one, ids[j:j + 1], z.size(0), seed, 0, "structured", m)).tolist()
        rank = 1 + (sum(n > p for n in negs) + sum(n >= p for n in negs)) / 2
        total += 1 / rank
    return hits, total / edges.size(1)
