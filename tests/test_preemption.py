"""Stopping a run with nothing lost: SIGTERM to one of 4 ranks of
`pyg-dist train` stops every rank after the same epoch, each saving its
checkpoint of that epoch, with exit status 75 and one line on how to resume;
Ctrl-C stops every rank at once, leaves no half-written file, and either
resume ends with the weights of the uninterrupted run. SIGUSR1 (SLURM's
warning before a time limit) does what SIGTERM does, and the launcher passes
both on to its ranks."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
from graphs import awkward_graph

import pyg_dist
from pyg_dist.config import Checkpoint
from pyg_dist.datasets import synthetic
from pyg_dist.models import GNN
from pyg_dist.runtime import distributed
from pyg_dist.train import train
from pyg_dist.train.preemption import PREEMPTED, Preempted, StopSignals

CLI = [sys.executable, "-m", "pyg_dist.cli"]
EPOCHS, EVERY, RANKS = 24, 8, 4
#: Seconds from the signal to the exit of every process.
EXIT_WITHIN = 10.0


def _children(pid):
    children = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            children.extend(map(int, f.read().split()))
    return children


def _ranks(pid):
    """The rank processes of the launcher ``pid``: the children of its
    multiprocessing fork server (not its resource tracker)."""
    found = []
    for child in _children(pid):
        try:
            with open(f"/proc/{child}/cmdline") as cmd:
                if "forkserver" in cmd.read():
                    found.extend(_children(child))
        except OSError:
            pass
    return sorted(found)


def _alive(pids):
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ")[-1][0] != "Z":
                    alive.append(pid)
        except OSError:
            pass
    return alive


def train_cli(parts, ckpt, *extra, stop=None, after=3, timeout=300):
    """`pyg-dist train` on ``RANKS`` local ranks; ``stop(launcher_pid,
    rank_pids)`` is called once rank 0 has logged epoch ``after``. Returns
    the return code, stderr, stdout, the seconds from ``stop`` to the exit of
    the command, and the rank pids."""
    args = CLI + ["train", "--dataset", "synthetic", "--parts-dir", str(parts), "--parts",
                  str(RANKS), "--epochs", str(EPOCHS), "--no-progress", "--log-every", "1",
                  "--eval-every", "4", "--checkpoint", str(ckpt), "--checkpoint-every",
                  str(EVERY), *extra]
    # A session of its own, SIGINT at its default: Ctrl-C reaches the group as
    # from a terminal, even when the tests run in a shell's background.
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    stopped, ranks, err = None, [], []
    try:
        for line in proc.stderr:
            err.append(line)
            if stop is not None and stopped is None and line.startswith(f"epoch {after:4d}"):
                ranks = _ranks(proc.pid)
                assert len(ranks) == RANKS, ranks
                stopped = time.monotonic()
                stop(proc.pid, ranks)
        proc.wait()
    finally:
        timer.cancel()
    took = time.monotonic() - stopped if stopped is not None else None
    return proc.returncode, "".join(err), proc.stdout.read(), took, ranks


def weights(folder, rank):
    return torch.load(folder / f"rank_{rank}.pt", weights_only=True)


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("preempt") / "parts"
    pyg_dist.partition(synthetic(num_nodes=400, seed=0), RANKS, folder)
    return folder


@pytest.fixture(scope="module")
def straight(parts):
    """The uninterrupted run: its last checkpoint holds the final weights."""
    ckpt = parts.parent / "straight"
    rc, err, _, _, _ = train_cli(parts, ckpt)
    assert rc == 0, err[-3000:]
    return ckpt


def assert_same_weights(folder, reference):
    for rank in range(RANKS):
        ours, ref = weights(folder, rank), weights(reference, rank)
        assert ours["epoch"] == ref["epoch"] == EPOCHS
        for key, value in ref["model"].items():
            assert torch.equal(ours["model"][key], value), f"rank {rank}: {key}"


def test_sigterm_to_one_rank_saves_the_same_epoch_everywhere_and_resumes(parts, straight):
    ckpt = parts.parent / "sigterm"
    rc, err, out, took, ranks = train_cli(
        parts, ckpt, stop=lambda pid, ranks: os.kill(ranks[2], signal.SIGTERM))
    assert rc == PREEMPTED == 75, err[-3000:]
    lines = [x for x in err.splitlines() if x.startswith("pyg_dist: stopped")]
    assert len(lines) == 1, err[-3000:]
    epoch = json.loads((ckpt / "latest.json").read_text())["epoch"]
    assert 3 <= epoch < EPOCHS
    assert lines[0].startswith(f"pyg_dist: stopped by SIGTERM (to 1 of {RANKS} ranks) after "
                               f"epoch {epoch} of {EPOCHS}; every rank saved its checkpoint of "
                               f"epoch {epoch} in '{ckpt}': to resume, run the same command "
                               f"with --resume")
    assert [weights(ckpt, r)["epoch"] for r in range(RANKS)] == [epoch] * RANKS
    assert took < EXIT_WITHIN and not _alive(ranks)
    assert not [p for p in ckpt.iterdir() if ".tmp" in p.name]
    print(f"SIGTERM to one rank: stopped after epoch {epoch}, every process gone "
          f"{took:.1f} s after the signal")
    rc, err, out, _, _ = train_cli(parts, ckpt, "--resume")
    assert rc == 0, err[-3000:]
    assert_same_weights(ckpt, straight)


def test_ctrl_c_stops_every_rank_leaves_no_partial_file_and_resumes(parts, straight):
    ckpt = parts.parent / "ctrl-c"
    rc, err, out, took, ranks = train_cli(
        parts, ckpt, stop=lambda pid, ranks: os.killpg(pid, signal.SIGINT), after=EVERY + 1)
    assert rc == 130, err[-3000:]
    assert err.rstrip().splitlines()[-1] == (
        f"pyg-dist train: interrupted (Ctrl-C); every rank was stopped. To continue from the "
        f"last complete checkpoint in '{ckpt}' (none before the first is written), run the "
        f"same command with --resume")
    assert took < EXIT_WITHIN and not _alive(ranks)
    assert not [p for p in ckpt.iterdir() if ".tmp" in p.name]
    epoch = json.loads((ckpt / "latest.json").read_text())["epoch"]
    assert epoch % EVERY == 0 and epoch < EPOCHS
    print(f"Ctrl-C: every process gone {took:.1f} s after the signal, checkpoint of epoch {epoch}")
    rc, err, out, _, _ = train_cli(parts, ckpt, "--resume")
    assert rc == 0, err[-3000:]
    assert_same_weights(ckpt, straight)


def _stop_on_usr1(tmp_path, folder):
    pyg_dist.partition(awkward_graph(num_features=4), 1, tmp_path / "parts", overwrite=True)
    data = pyg_dist.DistData.load(tmp_path / "parts")
    model = GNN("sage", 4, 4, 3)

    def warn(stats):
        if stats.epoch == 2:
            os.kill(os.getpid(), signal.SIGUSR1)  # as SLURM's --signal=USR1@T

    before = signal.getsignal(signal.SIGUSR1)
    with pytest.raises(Preempted) as caught:
        train(model, data, 6, progress=False, callback=warn,
              checkpoint=Checkpoint(folder, every=4) if folder else None)
    assert signal.getsignal(signal.SIGUSR1) is before  # put back
    return caught.value


def test_sigusr1_stops_after_the_epoch_and_says_when_nothing_is_saved(tmp_path, capsys):
    stop = _stop_on_usr1(tmp_path, None)
    # The signal came after epoch 2's all-reduce: epoch 3's tells the ranks.
    assert stop.code == PREEMPTED and stop.epoch == 3 and not stop.saved
    assert str(stop) == (
        "pyg_dist: stopped by SIGUSR1 (to 1 of 1 rank) after epoch 3 of 6; no checkpoint is "
        "configured, so nothing was saved and a rerun starts at epoch 1: give the run a "
        "checkpoint folder (pyg-dist train --checkpoint DIR; Python: "
        "checkpoint=Checkpoint(DIR)) to resume after a stop")
    assert str(stop) in capsys.readouterr().err
    stop = _stop_on_usr1(tmp_path, tmp_path / "ck")
    assert stop.saved and json.loads((tmp_path / "ck" / "latest.json").read_text())["epoch"] == 3


def _wait_for_signal(ready_dir):
    """A rank: notes the stop signals, says it is ready, returns what came."""
    with StopSignals() as signals:
        signals.training()  # noted, not raised at once
        open(os.path.join(ready_dir, str(distributed.rank())), "w").close()
        deadline = time.monotonic() + 60
        while not signals.received and time.monotonic() < deadline:
            time.sleep(0.05)
        return sorted(signals.received)


def test_the_launcher_passes_sigterm_and_sigusr1_on_to_every_rank(tmp_path):
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        ready = tmp_path / sig.name
        ready.mkdir()

        def send(ready=ready, sig=sig):
            deadline = time.monotonic() + 120
            while len(os.listdir(ready)) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            os.kill(os.getpid(), sig)

        sender = threading.Thread(target=send)
        sender.start()
        got = pyg_dist.launch(_wait_for_signal, 2, args=(str(ready),), timeout=180)
        sender.join()
        assert got == [[sig], [sig]]
