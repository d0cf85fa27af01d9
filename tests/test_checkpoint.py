"""Checkpoint and resume: a run interrupted after a checkpoint and resumed, in
new processes, ends with the weights, losses and traffic of the uninterrupted
run, for every deterministic policy."""
import os
import subprocess
import sys

import pytest
import torch
from graphs import awkward_graph
from tolerances import assert_close

import pyg_dist
from pyg_dist.config import Adam, Checkpoint
from pyg_dist.halo import parse_policy
from pyg_dist.models import GNN
from pyg_dist.train import train
from pyg_dist.train.checkpoint import load_checkpoint

POLICIES = ["exact", "stale:3", "pipelined:0.5", "adaptive:0.05", "sampled:0.5",
            "adaptive:0.05,compress=int4"]
EPOCHS, EVERY, FAIL_AT = 7, 2, 5


class Interrupted(Exception):
    pass


def one_run(parts_dir, spec, ckpt=None, fail_at=None, resume=False, init_seed=0):
    data = pyg_dist.DistData.load(parts_dir, halo=parse_policy(spec))
    torch.manual_seed(init_seed)
    model = GNN("gcn", data.x.size(1), 8, 3, dropout=0.5)
    torch.manual_seed(1000 + data.rank)  # rank 0's draws the shared dropout seed

    def stop(stats):
        if stats.epoch == fail_at:
            raise Interrupted(f"stopped at epoch {stats.epoch}")

    result = train(model, data, EPOCHS, progress=False, callback=stop,
                   checkpoint=Checkpoint(ckpt, every=EVERY, resume=resume) if ckpt else None)
    return {k: v.clone() for k, v in model.state_dict().items()}, result


def checkpoint_dir(ckpt_root, spec):
    return f"{ckpt_root}/{spec.replace(':', '_')}"


def straight_and_interrupted(parts_dir, ckpt_root):
    """Every policy: the uninterrupted run, then a run stopped after a checkpoint."""
    out = {}
    for spec in POLICIES:
        straight, result = one_run(parts_dir, spec)
        try:
            one_run(parts_dir, spec, checkpoint_dir(ckpt_root, spec), fail_at=FAIL_AT)
            raise AssertionError("the run was not interrupted")
        except Interrupted:
            pass
        out[spec] = {"state": straight, "losses": [e.loss for e in result.history],
                     "bytes": result.halo_bytes}
    return out


def resumed(parts_dir, ckpt_root):
    """Every policy: the interrupted run resumed from its last checkpoint."""
    out = {}
    for spec in POLICIES:
        state, result = one_run(parts_dir, spec, checkpoint_dir(ckpt_root, spec), resume=True,
                                init_seed=99)
        out[spec] = {"state": state, "losses": [e.loss for e in result.history],
                     "bytes": result.halo_bytes, "epochs": result.epochs}
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Two launches, so the resumed run lives in new processes; each with its
    own hash seed, as after a real restart."""
    root = tmp_path_factory.mktemp("ckpt")
    pyg_dist.partition(awkward_graph(num_nodes=240, num_edges=1400, num_features=6),
                       2, root / "parts", method="metis")
    args = (str(root / "parts"), str(root / "ckpt"))
    out = []
    saved = os.environ.get("PYTHONHASHSEED")
    try:
        for seed, fn in (("1", straight_and_interrupted), ("2", resumed)):
            os.environ["PYTHONHASHSEED"] = seed
            out.append(pyg_dist.launch(fn, 2, args=args, timeout=900))
    finally:
        if saved is None:
            os.environ.pop("PYTHONHASHSEED", None)
        else:
            os.environ["PYTHONHASHSEED"] = saved
    return [{spec: {"straight": a[spec]["state"], "resumed": b[spec]["state"],
                    "losses": (a[spec]["losses"], b[spec]["losses"]),
                    "bytes": (a[spec]["bytes"], b[spec]["bytes"]), "epochs": b[spec]["epochs"]}
             for spec in POLICIES} for a, b in zip(*out)]


@pytest.mark.parametrize("spec", POLICIES)
def test_resume_equals_uninterrupted(results, spec):
    """Weights, losses and halo bytes: a restart that did not recognise layer
    0's static input (whose halo the checkpoint caches) would fetch it again."""
    for rank, res in enumerate(results):
        r = res[spec]
        for name, value in r["straight"].items():
            assert_close(r["resumed"][name], value, what=f"{spec}, rank {rank}: {name}")
        assert r["losses"][1] == pytest.approx(r["losses"][0], rel=1e-5)
        assert r["epochs"] == EPOCHS
        assert r["bytes"][0] == r["bytes"][1]


def test_the_best_epoch_s_state_survives_a_resume(tmp_path):
    """TrainResult.best_state is the model at the best validation epoch, also
    when that epoch was trained before the resume (Correct & Smooth starts
    from it); a model that reads labels as input is refused by the planner."""
    pyg_dist.partition(awkward_graph(num_features=4), 1, tmp_path / "parts")
    data = pyg_dist.DistData.load(tmp_path / "parts")
    states = {}

    def run(ckpt=None, stop_at=None, resume=False):
        torch.manual_seed(0)
        model = GNN("sage", 4, 8, 3, dropout=0.0)

        def keep(stats):
            states[stats.epoch] = {k: v.clone() for k, v in model.state_dict().items()}
            if stats.epoch == stop_at:
                raise KeyboardInterrupt

        return train(model, data, 20, progress=False, callback=keep, optimizer=Adam(lr=0.05),
                     checkpoint=Checkpoint(ckpt, every=1, resume=resume) if ckpt else None)

    straight = run()
    best = straight.best_epoch
    assert 1 < best < 20, best  # a best epoch a resume after it does not train again
    expected = states[best]
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "ck", stop_at=best + 1)
    states.clear()
    resumed = run(tmp_path / "ck", resume=True)
    assert best not in states and resumed.best_epoch == best
    for key, value in expected.items():
        assert torch.equal(resumed.best_state[key], value), key
    label_model = GNN("sage", 4, 8, 3, label_input=True)
    with pytest.raises(ValueError, match="its probe runs the model on the graph's features"):
        train(label_model, data, 1, strategy="auto", progress=False)


def test_checkpoint_files_are_complete(tmp_path):
    """A run's folder holds one file per rank (and its previous one) and
    latest.json with the epoch and the sha256 of every rank's file of the
    newest two epochs."""
    import json

    pyg_dist.partition(awkward_graph(num_features=4), 1, tmp_path / "parts")
    data = pyg_dist.DistData.load(tmp_path / "parts")
    model = GNN("sage", 4, 4, 3)
    train(model, data, 4, progress=False, checkpoint=Checkpoint(tmp_path / "ck", every=2))
    from pyg_dist.utils.files import file_sha256

    ck = tmp_path / "ck"
    assert json.loads((ck / "latest.json").read_text()) == {
        "epoch": 4, "world_size": 1, "sha256": {"4": [file_sha256(ck / "rank_0.pt")],
                                                "2": [file_sha256(ck / "rank_0.prev.pt")]}}
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["latest.json", "rank_0.prev.pt",
                                                                 "rank_0.pt"]
    with pytest.raises(ValueError, match="name the folder for checkpoints"):
        train(model, data, 1, progress=False, checkpoint=Checkpoint(None, resume=True))
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        load_checkpoint(tmp_path / "none", model, torch.optim.Adam(model.parameters()))


FINGERPRINT = ("import torch; from pyg_dist.halo.layer import fingerprint; "
               "print(fingerprint(torch.arange(12.0).view(3, 4)))")


def test_fingerprint_is_the_same_in_every_process():
    """What recognises a static input after a restart may not depend on the
    process (Python's str hash is salted per process)."""
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", FINGERPRINT], capture_output=True,
                              text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
