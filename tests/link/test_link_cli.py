"""``pyg-dist train --task link``: a seeded RandomLinkSplit of the graph is
cut, the job's model encodes, the dot product scores; the JSON line holds the
AUCs and the config (which reruns the job); ``pyg-dist embed`` writes the
checkpointed model's embeddings; ``convert --task link`` writes the split
and ``partition --distributed --task link`` cuts it on the ranks."""
import json

import torch
from command_line import pyg_dist_command as run
from tolerances import assert_close

import pyg_dist
from pyg_dist.datasets import load_dataset
from pyg_dist.models import GNN
from pyg_dist.models.link import LinkModel
from pyg_dist.partitioning import read_meta, read_part
from pyg_dist.tasks.supervision import split_links


def test_train_task_link(tmp_path):
    out = run("train", "--task", "link", "--dataset", "synthetic", "--num-nodes", "300",
              "--parts", "2", "--epochs", "3", "--no-progress")
    assert out.returncode == 0, out.stderr[-3000:]
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["config"]["graph"]["task"] == "link"
    assert line["epochs"] == 3 and 0.0 <= line["val_auc"] <= 1.0
    assert line["gather_bytes"] > 0  # the pairs' rows crossed the cut
    assert line["val_auc"] == line["val_acc"] and line["test_auc"] == line["test_acc"]
    assert f"test AUC at the best validation epoch ({line['best_epoch']})" in out.stderr
    meta = json.loads(run("partition", "--task", "link", "--dataset", "synthetic",
                          "--num-nodes", "300", "--parts", "2", "--out",
                          str(tmp_path / "parts")).stdout)
    assert meta["num_parts"] == 2
    assert json.loads((tmp_path / "parts" / "meta.json").read_text())["link_splits"] == [
        "train", "val", "test"]


def test_embed_writes_the_checkpoint_model_embeddings(tmp_path):
    graph = ["--task", "link", "--dataset", "synthetic", "--num-nodes", "300", "--parts", "2",
             "--checkpoint", str(tmp_path / "ckpt")]
    out = run("train", *graph, "--epochs", "3", "--checkpoint-every", "1", "--no-progress",
              "--save", str(tmp_path / "model.pt"))
    assert out.returncode == 0, out.stderr[-3000:]
    out = run("embed", *graph, "--out", str(tmp_path / "emb"), "--no-progress")
    assert out.returncode == 0, out.stderr[-3000:]
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["epoch"] == 3 and line["num_nodes"] == 300
    # the same model in one process, on the same seeded split's training graph
    train_data = split_links(load_dataset("synthetic", seed=0, num_nodes=300), seed=0)[0]
    model = LinkModel(GNN("gcn", train_data.x.size(1), 16, 16, layers=2, dropout=0.5))
    model.load_state_dict(torch.load(tmp_path / "model.pt", weights_only=True))
    model.eval()
    with torch.no_grad():
        ref = model(train_data.x, train_data.edge_index)
    assert_close(pyg_dist.read_embeddings(tmp_path / "emb").tensor(), ref, what="embeddings")
    again = run("embed", *graph, "--out", str(tmp_path / "emb"), "--no-progress")
    assert again.returncode != 0 and "--overwrite" in again.stderr
    bare = run("embed", "--task", "link", "--dataset", "synthetic", "--out",
               str(tmp_path / "other"))
    assert bare.returncode != 0
    assert "name the trained run's checkpoint folder with --checkpoint DIR" in bare.stderr


def supervision_by_id(folder):
    """Each split's edges of every part of ``folder`` in the split's order,
    after checking that each part holds only edges whose source it owns."""
    meta = read_meta(folder)
    parts = [read_part(folder, p, meta) for p in range(meta.num_parts)]
    owner = torch.empty(meta.num_nodes, dtype=torch.long)
    for p, content in enumerate(parts):
        owner[content["graph"]["global_id"]] = p
    out = {}
    for name in meta.link_splits:
        for p, content in enumerate(parts):
            assert bool((owner[content["link"][name]["index"][0]] == p).all()), (name, p)
        ids = torch.cat([c["link"][name]["id"] for c in parts])
        order = ids.argsort()
        assert torch.equal(ids[order], torch.arange(ids.numel())), f"{name}: each edge once"
        out[name] = (torch.cat([c["link"][name]["index"] for c in parts], 1)[:, order],
                     torch.cat([c["link"][name]["label"] for c in parts])[order])
    return out


def test_distributed_cut_of_a_converted_link_split(tmp_path):
    """``convert --task link`` writes the seeded split that ``partition --task
    link`` cuts in one process; ``partition --distributed --task link`` cuts
    the folder on the ranks: another cut, the same supervision edges."""
    graph = ["--task", "link", "--dataset", "synthetic", "--num-nodes", "300", "--seed", "1"]
    out = run("convert", *graph, "--out", str(tmp_path / "graph"))
    assert out.returncode == 0, out.stderr[-3000:]
    out = run("partition", "--distributed", "--task", "link", "--input", str(tmp_path / "graph"),
              "--parts", "2", "--out", str(tmp_path / "ranks"))
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert summary["method"] == "metis-coarse"
    assert summary["link_splits"] == ["train", "val", "test"]
    out = run("partition", *graph, "--parts", "2", "--out", str(tmp_path / "one"))
    assert out.returncode == 0, out.stderr[-3000:]
    ranks, one = supervision_by_id(tmp_path / "ranks"), supervision_by_id(tmp_path / "one")
    assert ranks.keys() == one.keys()
    for name in one:
        assert torch.equal(ranks[name][0], one[name][0]) and torch.equal(ranks[name][1],
                                                                         one[name][1]), name


def test_distributed_link_cut_of_a_folder_without_a_split_is_refused(tmp_path):
    out = run("convert", "--dataset", "synthetic", "--num-nodes", "300", "--out",
              str(tmp_path / "graph"))
    assert out.returncode == 0, out.stderr[-3000:]
    out = run("partition", "--task", "link", "--distributed", "--input", str(tmp_path / "graph"),
              "--out", str(tmp_path / "parts"))
    assert out.returncode != 0
    assert (f"pyg-dist partition --task link: --input {tmp_path / 'graph'} holds no link split; "
            f"write one with 'pyg-dist convert --task link --dataset NAME --out "
            f"{tmp_path / 'graph'}'") in out.stderr, out.stderr
    assert not (tmp_path / "parts").exists()
    out = run("partition", "--task", "link", "--distributed", "--grid", "1x1x2", "--input",
              str(tmp_path / "graph"), "--out", str(tmp_path / "parts"))
    assert out.returncode != 0
    assert "pyg-dist partition --grid writes the 3D grid's folder, which trains node tasks; " \
           "drop --task link" in out.stderr, out.stderr


def test_plan_and_auto_train_the_link_task():
    graph = ["--task", "link", "--dataset", "synthetic", "--num-nodes", "300", "--parts", "2",
             "--epochs", "3", "--no-progress"]
    out = run("plan", *graph, "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    *rows, plan = [json.loads(line) for line in out.stdout.strip().splitlines()]
    assert rows and all(r["strategy"].startswith("graph-parallel") for r in rows)
    assert len(plan["probe"]["gather_bytes"]) == 3 and min(plan["probe"]["gather_bytes"]) > 0
    out = run("train", *graph, "--strategy", "auto")
    assert out.returncode == 0, out.stderr[-3000:]
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["plan"]["choice"] == plan["choice"]
    assert line["plan"]["measured_bytes_per_epoch"] == line["plan"]["predicted_bytes_per_epoch"]
