"""``pyg-dist train`` beyond node labels, each run against the Python API on
the same seed and graph: ``--task recommend`` (LightGCN with BPR on the
synthetic user-item graph: recall@20 and NDCG@20 against their definitions,
and ``pyg-dist embed`` of its checkpoint), ``--decoder mlp`` on OGB's
ogbl-collab (the official split, Hits@50 by its definition, the weights of
Python's ``train``), ogbl-citation2 with LightGCN (MRR among each citation's
own negatives). OGB's folders are written here in OGB's layout. Then, without
ranks: the jobs the flags resolve to and what does not apply, refused in one
line naming the fix."""
import json
import math

import pytest
import torch
from command_line import pyg_dist_command as run
from ogbl_files import random_citation2, random_collab
from tolerances import assert_close
from torch_geometric.nn.models import LightGCN

import pyg_dist
from pyg_dist.cli import build_parser, main, parse_job
from pyg_dist.cli.job import Job, resolve
from pyg_dist.config import Adam
from pyg_dist.datasets import load_dataset
from pyg_dist.models import GNN
from pyg_dist.models.link import LinkModel, LinkPredictor
from pyg_dist.nn import to_distributed
from pyg_dist.strategies.link_task import LinkTask
from pyg_dist.train import train

EPOCHS = 4


def last_line(out):
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def by_definition(z, trained, target, users, k=20):
    """Recall@k and NDCG@k of the (user, item) pairs ``target``: each user's
    items scored by the dot product, its ``trained`` items left out, the
    top k, averaged over the users with targets; one user at a time."""
    items = torch.arange(users, z.size(0))
    recall = ndcg = seen = 0.0
    for u in range(users):
        wanted = set(target[1, target[0] == u].tolist())
        if not wanted:
            continue
        scores = z[items] @ z[u]
        scores[torch.isin(items, trained[1, trained[0] == u])] = float("-inf")
        ranked = items[torch.topk(scores, k).indices].tolist()
        hits = [1.0 if i in wanted else 0.0 for i in ranked]
        recall += sum(hits) / len(wanted)
        ndcg += (sum(h / math.log2(j + 2) for j, h in enumerate(hits))
                 / sum(1 / math.log2(j + 2) for j in range(min(k, len(wanted)))))
        seen += 1
    return recall / seen, ndcg / seen


def test_recommend_reports_recall_and_ndcg_of_the_python_run(tmp_path):
    graph = ["--task", "recommend", "--num-nodes", "150", "--parts", "2", "--recipe", "recsys",
             "--hidden", "8", "--checkpoint", str(tmp_path / "ckpt")]
    out = run("train", *graph, "--epochs", str(EPOCHS), "--checkpoint-every", str(EPOCHS),
              "--no-progress")
    line = last_line(out)
    config = line["config"]
    assert (config["graph"]["dataset"], config["graph"]["task"]) == ("synthetic-rec",
                                                                     "recommend")
    assert config["model"] == {"name": "lightgcn", "recipe": "recsys", "layers": 2,
                               "hidden": 8, "heads": 1, "dropout": 0.0, "edge_dropout": 0.0}
    assert (config["optimizer"]["lr"], line["metric"]) == (0.01, "recall@20")
    assert f"best validation recall@20 {line['val_acc']:.4f}" in out.stderr
    # the Python API on the same seeded graph (100 users, 50 items) and model, one process
    split = load_dataset("synthetic-rec", seed=0, num_nodes=150)
    torch.manual_seed(0)
    model = to_distributed(LightGCN(150, 8, 2))
    task = LinkTask(split, negatives="structured", loss="bpr", features=False,
                    metric="recall@20")
    ref = train(model, task, EPOCHS, optimizer=Adam(lr=0.01, weight_decay=0.0), progress=False)
    assert task.num_users == 100
    assert line["best_epoch"] == ref.best_epoch
    assert line["val_recall@20"] == line["val_acc"] == pytest.approx(ref.val_acc, abs=1e-6)
    assert line["test_recall@20"] == pytest.approx(ref.test_acc, abs=1e-6)
    with torch.no_grad():
        last = model(split[0].edge_index)
        model.load_state_dict(ref.best_state)
        best = model(split[0].edge_index)
    trained = split[0].edge_label_index
    for name, data in (("val", split[1]), ("test", split[2])):
        recall, ndcg = by_definition(best, trained, data.edge_label_index, 100)
        assert line[f"{name}_recall@20"] == pytest.approx(recall, abs=1e-6), name
        assert line[f"{name}_ndcg@20"] == pytest.approx(ndcg, abs=1e-6), name
    # every node's embedding of the checkpointed (last) model, as its ranks hold them
    out = run("embed", *graph, "--out", str(tmp_path / "emb"), "--no-progress")
    assert last_line(out)["epoch"] == EPOCHS
    assert_close(pyg_dist.read_embeddings(tmp_path / "emb").tensor(), last, what="embeddings")


def test_mlp_decoder_on_ogbl_collab_equals_python_train(tmp_path):
    random_collab(tmp_path)
    out = run("train", "--dataset", "ogbl-collab", "--root", str(tmp_path), "--parts", "2",
              "--decoder", "mlp", "--hidden", "8", "--dropout", "0", "--epochs", str(EPOCHS),
              "--no-progress", "--save", str(tmp_path / "model.pt"))
    line = last_line(out)
    assert line["config"]["graph"]["task"] == "link"  # the dataset's own task
    assert line["config"]["model"]["decoder"] == "mlp" and line["metric"] == "hits@50"
    assert f"test Hits@50 at the best validation epoch ({line['best_epoch']})" in out.stderr
    # Python's train() on OGB's (data, split_edge), the same model and settings
    data, split_edge = load_dataset("ogbl-collab", tmp_path)
    torch.manual_seed(0)
    net = LinkModel(GNN("gcn", 4, 8, 8, layers=2, dropout=0.0), LinkPredictor(8, 8, 1, 2, 0.0))
    ref = train(net, LinkTask((data, split_edge), metric="hits@50"), EPOCHS,
                optimizer=Adam(lr=0.01, weight_decay=5e-4), progress=False)
    saved = torch.load(tmp_path / "model.pt", weights_only=True)
    assert saved.keys() == net.state_dict().keys()
    assert any(k.startswith("decoder.lins.") for k in saved)
    for key, weight in net.state_dict().items():
        assert_close(saved[key], weight, what=key)
    assert line["best_epoch"] == ref.best_epoch
    assert line["val_hits@50"] == pytest.approx(ref.val_acc, abs=1e-6)
    assert line["test_hits@50"] == pytest.approx(ref.test_acc, abs=1e-6)
    # Hits@50 by its definition, of the saved (last) model: the share of
    # positives above the 50th highest of the split's 100 official negatives
    net.eval()
    with torch.no_grad():
        h = net(data.x, data.edge_index)
        for key, name in (("valid", "val"), ("test", "test")):
            pos, neg = (net.decode(h[e[:, 0]], h[e[:, 1]])
                        for e in (split_edge[key]["edge"], split_edge[key]["edge_neg"]))
            kth = sorted(neg.tolist(), reverse=True)[49]
            hits = sum(p > kth for p in pos.tolist()) / pos.numel()
            assert 0 < hits < 1, "the case must rank"
            assert line[f"final_{name}_acc"] == pytest.approx(hits, abs=1e-6), name


def test_citation2_ranks_each_citation_among_its_own_negatives(tmp_path):
    random_citation2(tmp_path)
    out = run("train", "--dataset", "ogbl-citation2", "--root", str(tmp_path), "--parts", "2",
              "--model", "lightgcn", "--layers", "2", "--hidden", "8", "--lr", "0.01",
              "--epochs", str(EPOCHS), "--no-progress")
    line = last_line(out)
    assert line["metric"] == "mrr" and line["config"]["graph"]["task"] == "link"
    data, split_edge = load_dataset("ogbl-citation2", tmp_path)
    torch.manual_seed(0)
    model = to_distributed(LightGCN(60, 8, 2))
    task = LinkTask((data, split_edge), negatives="structured", loss="bpr", features=False,
                    metric="mrr")
    ref = train(model, task, EPOCHS, optimizer=Adam(lr=0.01, weight_decay=0.0), progress=False)
    assert line["best_epoch"] == ref.best_epoch
    assert line["val_mrr"] == pytest.approx(ref.val_acc, abs=1e-6)
    # OGB's MRR by its definition, of the best weights: each citation ranked
    # among its own target_node_neg, ties counted half
    model.load_state_dict(ref.best_state)
    with torch.no_grad():
        z = model(data.edge_index)
    for key, name in (("valid", "val"), ("test", "test")):
        raw = torch.load(tmp_path / "ogbl_citation2" / "split" / "time" / f"{key}.pt")
        src, dst, negs = raw["source_node"], raw["target_node"], raw["target_node_neg"]
        pos = (z[src] * z[dst]).sum(-1, keepdim=True)
        neg = (z[src].unsqueeze(1) * z[negs]).sum(-1)
        rank = 1 + ((neg > pos).sum(1) + (neg >= pos).sum(1)).double() / 2
        assert line[f"{name}_mrr"] == pytest.approx(float((1 / rank).mean()), abs=1e-6), name


def job_of(*args):
    return parse_job(build_parser().parse_args(["train", *args]))


def test_tasks_and_datasets_resolve_to_their_jobs():
    rec = job_of("--task", "recommend")
    assert (rec.graph.dataset, rec.model.name, rec.graph.metric) == ("synthetic-rec",
                                                                     "lightgcn", "recall@20")
    # LightGCN's published recipe (He et al.), and the recsys recipe over it
    assert rec.model.sizes() == (3, 64, 1, 0.0) and rec.optimizer.lr == 0.001
    tuned = job_of("--task", "recommend", "--recipe", "recsys")
    assert tuned.model.sizes() == (2, 64, 1, 0.0) and tuned.optimizer.lr == 0.01
    assert job_of("--dataset", "synthetic-rec").graph.task == "recommend"
    for name, metric, model in (("ogbl-collab", "hits@50", "gcn"),
                                ("ogbl-citation2", "mrr", "gcn"),
                                ("ogbl-ddi", "hits@20", "lightgcn")):  # ddi has no features
        job = job_of("--dataset", name, "--root", "ogb")
        assert (job.graph.task, job.graph.metric, job.model.name) == ("link", metric, model)
        assert job.to_dict()["graph"]["task"] == "link"
    assert job_of("--task", "link").graph.metric == "auc"
    ogbl = job_of("--task", "link", "--recipe", "ogbl", "--model", "sage")
    assert ogbl.model.sizes() == (3, 256, 1, 0.0) and ogbl.model.decoder == "mlp"
    assert (ogbl.optimizer.lr, ogbl.optimizer.weight_decay) == (0.001, 0.0)
    for job in (rec, tuned, ogbl, job_of("--task", "link", "--decoder", "mlp")):
        back = json.loads(json.dumps(job.to_dict()))
        assert Job.from_dict(back) == job and resolve(back, {}) == job
    # a node job writes neither a task nor a decoder, as before
    plain = job_of("--model", "sage").to_dict()
    assert "task" not in plain["graph"] and "decoder" not in plain["model"]


@pytest.mark.parametrize("args, message", [
    (["--task", "recommend", "--model", "gcn"],
     "--task recommend trains --model lightgcn (LightGCN with BPR, PyG's "
     "examples/lightgcn.py), not --model gcn; leave --model out"),
    (["--task", "recommend", "--dataset", "cora"],
     "--task recommend trains a bipartite user-item graph, which --dataset cora is not; use "
     "--dataset synthetic-rec (its default) or --parts-dir of a user-item split, or --task "
     "link to predict cora's edges"),
    (["--task", "recommend", "--strategy", "gradient-only"],
     "--strategy gradient-only cannot train --task recommend: its steps train node labels "
     "only; use --strategy graph-parallel or --strategy auto"),
    (["--task", "link", "--strategy", "layer-pipeline"],
     "--strategy layer-pipeline cannot train --task link: its steps train node labels only; "
     "use --strategy graph-parallel or --strategy auto"),
    (["--dataset", "ogbl-collab", "--task", "node"],
     "--dataset ogbl-collab is OGB's link prediction on its official split, which trains "
     "--task link (its default), not --task node; leave --task out"),
    (["--dataset", "synthetic-rec", "--task", "link"],
     "--dataset synthetic-rec is a user-item graph without features, which trains --task "
     "recommend (its default), not --task link; leave --task out"),
    (["--dataset", "ogbl-ddi", "--model", "sage"],
     "--dataset ogbl-ddi has no node features for --model sage to read; train an embedding "
     "per node with --model lightgcn"),
    (["--model", "lightgcn"],
     "--model lightgcn learns node embeddings for --task recommend|link, not --task node; add "
     "--task recommend (a user-item graph) or --task link, or use --model gcn|sage|gat|gin"),
    (["--decoder", "mlp"],
     "--decoder scores the pairs of --task link, not --task node; add --task link, or leave "
     "--decoder out"),
    (["--task", "link", "--model", "lightgcn", "--decoder", "mlp"],
     "--decoder mlp scores the embeddings of a GNN encoder, --model gcn|sage|gat|gin; --model "
     "lightgcn is scored by the dot product (leave --decoder out)"),
    (["--recipe", "ogbl"],
     "--recipe ogbl is made for --task link, not --task node; add --task link, or leave "
     "--recipe out for gcn's published recipe"),
    (["--task", "link", "--recipe", "ogbl", "--model", "gat"],
     "--recipe ogbl is made for --model gcn|sage, not gat; leave --recipe out for gat's "
     "published recipe"),
    (["--task", "recommend", "--save", "model.pt"],
     "--save writes rank 0's weights, but each rank of --model lightgcn holds its own rows of "
     "the embedding table; write every node's embedding with 'pyg-dist embed' from the run's "
     "--checkpoint DIR"),
    (["--task", "link", "--post", "cs"],
     "--post cs reads node labels, which --task link has none of; leave it out"),
    (["--task", "link", "--model", "gcn2"],
     "--task link trains --model gcn|sage|gat|gin|lightgcn (the encoder), not --model gcn2"),
])
def test_what_does_not_apply_is_refused_in_one_line(args, message):
    with pytest.raises(SystemExit) as exc:
        main(["train", *args])
    assert str(exc.value) == f"pyg-dist train: {message}"


def test_ogbl_partitions_on_its_official_split_and_convert_refuses_it(tmp_path, capsys):
    random_collab(tmp_path)
    main(["partition", "--dataset", "ogbl-collab", "--root", str(tmp_path), "--parts", "2",
          "--out", str(tmp_path / "parts")])
    meta = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert meta["num_nodes"] == 80 and meta["num_edges"] == 480  # each edge and its reverse
    data = pyg_dist.DistData.load(tmp_path / "parts", rank=0)
    other = pyg_dist.DistData.load(tmp_path / "parts", rank=1)
    val = [d.supervision("val") for d in (data, other)]
    assert sorted(torch.cat([v.id for v in val]).tolist()) == list(range(30 + 100))
    with pytest.raises(SystemExit) as exc:
        main(["convert", "--dataset", "ogbl-collab", "--root", str(tmp_path), "--out",
              str(tmp_path / "folder")])
    assert str(exc.value) == (
        "pyg-dist convert takes graphs of node labels; --dataset ogbl-collab comes split into "
        "edges to predict: cut it with 'pyg-dist partition --dataset ogbl-collab --out DIR', "
        "or train it with 'pyg-dist train --dataset ogbl-collab'")
    with pytest.raises(SystemExit) as exc:
        main(["train", "--dataset", "ogbl-citation2"])
    assert "--dataset ogbl-citation2 reads OGB's downloaded folder ogbl_citation2/ under " \
           "--root DIR; pass --root" in str(exc.value)
