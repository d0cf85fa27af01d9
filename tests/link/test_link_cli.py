"""``pyg-dist train --task link``: a seeded RandomLinkSplit of the graph is
cut, the job's model encodes, the dot product scores; the JSON line holds the
AUCs and the config (which reruns the job); cutting a link split with
--distributed is refused naming the fix."""
import json
import os
import subprocess
import sys

CLI = [sys.executable, "-m", "pyg_dist.cli"]


def run(*args):
    return subprocess.run(CLI + [*args], capture_output=True, text=True, timeout=300,
                          env=os.environ)


def test_train_task_link(tmp_path):
    out = run("train", "--task", "link", "--dataset", "synthetic", "--num-nodes", "300",
              "--parts", "2", "--epochs", "3", "--no-progress")
    assert out.returncode == 0, out.stderr[-3000:]
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["config"]["graph"]["task"] == "link"
    assert line["epochs"] == 3 and 0.0 <= line["val_auc"] <= 1.0
    assert line["val_auc"] == line["val_acc"] and line["test_auc"] == line["test_acc"]
    assert f"test AUC at the best validation epoch ({line['best_epoch']})" in out.stderr
    meta = json.loads(run("partition", "--task", "link", "--dataset", "synthetic",
                          "--num-nodes", "300", "--parts", "2", "--out",
                          str(tmp_path / "parts")).stdout)
    assert meta["num_parts"] == 2
    assert json.loads((tmp_path / "parts" / "meta.json").read_text())["link_splits"] == [
        "train", "val", "test"]


def test_distributed_cut_of_a_link_split_is_refused(tmp_path):
    out = run("partition", "--task", "link", "--distributed", "--input", str(tmp_path),
              "--out", str(tmp_path / "parts"))
    assert out.returncode != 0
    assert ("pyg-dist partition --distributed cuts node tasks; cut --task link in one process "
            "(leave out --distributed and --input)") in out.stderr
