"""Checkpoint and resume: a run interrupted after a checkpoint and resumed ends
with the weights of the uninterrupted run, for every deterministic policy."""
import pytest
import torch
from graphs import awkward_graph
from tolerances import assert_close

import pyg_dist
from pyg_dist.halo import parse_policy
from pyg_dist.models import GNN
from pyg_dist.train import train

POLICIES = ["exact", "stale:3", "pipelined:0.5", "adaptive:0.05", "sampled:0.5"]
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

    result = train(model, data, epochs=EPOCHS, progress=False, callback=stop,
                   checkpoint=ckpt, checkpoint_every=EVERY if ckpt else 0, resume=resume)
    return {k: v.clone() for k, v in model.state_dict().items()}, result


def body(parts_dir, ckpt_root):
    out = {}
    for spec in POLICIES:
        ckpt = f"{ckpt_root}/{spec.replace(':', '_')}"
        straight, straight_result = one_run(parts_dir, spec)
        try:
            one_run(parts_dir, spec, ckpt, fail_at=FAIL_AT)
            raise AssertionError("the run was not interrupted")
        except Interrupted:
            pass
        resumed, resumed_result = one_run(parts_dir, spec, ckpt, resume=True, init_seed=99)
        out[spec] = {
            "straight": straight, "resumed": resumed,
            "losses": ([e.loss for e in straight_result.history],
                       [e.loss for e in resumed_result.history]),
            "bytes": (straight_result.halo_bytes, resumed_result.halo_bytes),
            "epochs": resumed_result.epochs,
        }
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    pyg_dist.partition(awkward_graph(num_nodes=240, num_edges=1400, num_features=6),
                       2, root / "parts", method="metis")
    return pyg_dist.launch(body, 2, args=(str(root / "parts"), str(root / "ckpt")),
                           timeout=900)


@pytest.mark.parametrize("spec", POLICIES)
def test_resume_equals_uninterrupted(results, spec):
    for rank, res in enumerate(results):
        r = res[spec]
        for name, value in r["straight"].items():
            assert_close(r["resumed"][name], value, what=f"{spec}, rank {rank}: {name}")
        assert r["losses"][1] == pytest.approx(r["losses"][0], rel=1e-5)
        assert r["epochs"] == EPOCHS
        assert r["bytes"][0] == r["bytes"][1]


def test_checkpoint_files_are_complete(tmp_path):
    """A run's folder holds one file per rank and latest.json with the epoch."""
    import json

    pyg_dist.partition(awkward_graph(num_features=4), 1, tmp_path / "parts")
    data = pyg_dist.DistData.load(tmp_path / "parts")
    model = GNN("sage", 4, 4, 3)
    train(model, data, epochs=4, progress=False, checkpoint=tmp_path / "ck",
          checkpoint_every=2)
    assert json.loads((tmp_path / "ck" / "latest.json").read_text()) == {"epoch": 4,
                                                                          "world_size": 1}
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["latest.json", "rank_0.prev.pt",
                                                                 "rank_0.pt"]
    with pytest.raises(ValueError, match="needs checkpoint=<folder>"):
        train(model, data, epochs=1, progress=False, resume=True)
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        train(model, data, epochs=1, progress=False, checkpoint=tmp_path / "none", resume=True)
