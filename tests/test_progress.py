"""What a person reads while ``pyg-dist train`` runs: log lines above the
bar, a time left that leaves out the first epoch, a summary in words on
stderr while stdout keeps the one JSON line, no warning at exit."""
import io
import json
import subprocess
import sys
from types import SimpleNamespace

from pyg_dist.train import progress
from pyg_dist.train.progress import Progress, summary_lines

STATS = SimpleNamespace(loss=1.0, val_acc=0.5, test_acc=0.5)


def test_time_left_leaves_out_the_first_epoch(monkeypatch):
    """10 epochs; the first takes 30 s (a compile, caches filling), the next
    two 0.5 s each: 2 epochs/s, so 7 epochs left are 3.5 s, not the 72 s an
    average since the start (3 epochs in 31 s) predicts."""
    clock = iter([30.0, 30.5, 31.0])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    bar = Progress(10, file=io.StringIO())
    bar.update(STATS, 0)
    assert "?epoch/s" in str(bar.bar)  # one epoch: no rate yet
    bar.update(STATS, 0)
    bar.update(STATS, 2_000_000)
    shown = str(bar.bar)
    assert " 3/10 " in shown and "2.00epoch/s" in shown, shown
    assert "<00:03," in shown, shown  # 3.5 s left, tqdm shows whole seconds
    assert "halo 2.0 MB" in shown
    bar.close()


def test_a_line_written_during_the_bar_gets_a_line_of_its_own(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    bar = Progress(4, file=out)
    bar.update(STATS, 0)
    progress.write("epoch    1  loss 1.0000")
    bar.update(STATS, 0)
    bar.close()
    pieces = out.getvalue().replace("\r", "\n").split("\n")
    assert "epoch    1  loss 1.0000" in pieces  # whole, not glued to the bar's text
    after = out.getvalue().split("epoch    1  loss 1.0000\n", 1)[1]
    assert after.lstrip("\r").startswith("train:")  # the bar drawn again below it


def line(**changes):
    base = {"best_epoch": 81, "epochs": 100, "val_acc": 0.933, "test_acc": 0.907875,
            "final_test_acc": 0.9106, "seconds": 46.04, "training_seconds": 18.2,
            "parts": 4, "stopped": "epochs", "halo_bytes": 274_271_872,
            "halo_bytes_fwd": 93_695_360, "halo_bytes_bwd": 86_881_152,
            "halo_bytes_eval": 93_695_360, "grad_bytes": 1_881_600}
    return {**base, **changes}


def test_the_summary_names_the_test_accuracy_at_the_best_validation_epoch():
    assert summary_lines(line(), "run.json") == [
        "done: 100 epochs on 4 ranks in 46.0 s, training 18.2 s (all epochs trained)",
        "best validation accuracy 0.9330 at epoch 81",
        "test accuracy at the best validation epoch (81): 0.9079 (the last epoch, 100, had "
        "0.9106)",
        "sent by all ranks: 274.3 MB of halo rows (training 180.6 MB, evaluation 93.7 MB) and "
        "1.9 MB of gradients",
        "the JSON line went to run.json; 'pyg-dist train --config FILE' reruns the job it "
        "holds"]
    best_last = summary_lines(line(best_epoch=100, seconds=75, stopped="target"), "x")
    assert best_last[0] == ("done: 100 epochs on 4 ranks in 1 min 15 s, training 18.2 s "
                            "(target accuracy reached)")
    assert best_last[2] == "test accuracy at the best validation epoch (100): 0.9079"


def test_a_run_redirected_keeps_stdout_one_json_line_and_ends_without_a_warning(tmp_path):
    out, err = tmp_path / "run.json", tmp_path / "err.txt"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        code = subprocess.run(
            [sys.executable, "-m", "pyg_dist.cli", "train", "--dataset", "synthetic",
             "--num-nodes", "300", "--parts", "2", "--epochs", "3", "--log-every", "1"],
            stdout=stdout, stderr=stderr, timeout=300, cwd=tmp_path).returncode
    text = err.read_text()
    assert code == 0, text[-3000:]
    lines = out.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["epochs"] == 3
    assert "leaked semaphore" not in text and "resource_tracker" not in text
    assert "Warning" not in text, text
    assert "\r" not in text  # a file gets plain lines, not a bar's redraws
    said = text.splitlines()
    assert said[0].startswith("cut synthetic (300 nodes, ")
    assert said[1] == ("starting 2 ranks on this machine (each imports torch, joins the process "
                       "group and loads its own part)")
    assert said[2] == "ranks ready; training gcn (2 layers, 16 hidden) for 3 epochs, graph-parallel"
    for epoch in (1, 2, 3):
        assert any(s.startswith(f"epoch    {epoch}  loss ") for s in said), epoch
    assert said[-5].startswith("done: 3 epochs on 2 ranks in ")
    assert said[-1] == ("the JSON line went to run.json; 'pyg-dist train --config FILE' reruns "
                        "the job it holds")


def test_a_compile_is_announced_on_its_own_line_before_the_bar(monkeypatch, capsys):
    """The kernels load (a first use compiles them, which says so) before the
    bar is drawn: the announcement stands alone on the first line, the bar's
    first drawing below it, never on one line together."""
    import torch

    from pyg_dist.ops import backends
    from pyg_dist.runtime import cpu_ext

    loaded = []

    def first_use():  # what a first use does: announce, compile (here nothing), load
        cpu_ext._announce_compile(None)
        loaded.append(True)
        return None

    monkeypatch.setattr(backends, "_cpu_kernels", first_use)
    monkeypatch.setattr(progress, "_is_terminal", lambda stream: True)  # a bar, not lines
    bar = progress.start_progress(torch.nn.Linear(2, 2), total=5)
    bar.update(STATS, 0)
    bar.close()
    lines = capsys.readouterr().err.replace("\r", "\n").splitlines()
    assert loaded == [True]
    assert lines[0] == cpu_ext.COMPILE_MESSAGE, lines
    drawn = [line for line in lines[1:] if line.strip()]
    assert drawn[0].startswith("train:   0%|"), drawn
    assert not any(cpu_ext.COMPILE_MESSAGE in line for line in drawn), drawn


def test_a_bar_that_is_no_terminal_prints_plain_lines(monkeypatch):
    """20 epochs into a file: a line at each tenth of the run, whole lines,
    a log line on its own between them, and no carriage return."""
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    bar = Progress(20)
    assert bar.plain
    for epoch in range(1, 21):
        bar.update(STATS, epoch * 100_000)
        if epoch == 3:
            progress.write("epoch    3  loss 1.0000")
    bar.close()
    text = out.getvalue()
    assert "\r" not in text and "|" not in text, text
    lines = text.splitlines()
    assert len(lines) == 11 and lines[1] == "epoch    3  loss 1.0000", lines
    counts = [line.split()[1] for line in lines if line.startswith("train: ")]
    assert counts == [f"{n}/20" for n in range(2, 21, 2)], lines
    assert lines[-1].startswith("train: 20/20 epochs [") and "halo 2.0 MB]" in lines[-1]


def test_a_run_stopped_early_ends_its_plain_lines_where_it_stopped():
    out = io.StringIO()
    bar = Progress(100, file=out)
    for _ in range(13):
        bar.update(STATS, 0)
    bar.close()
    assert [line.split()[1] for line in out.getvalue().splitlines()] == ["10/100", "13/100"]
