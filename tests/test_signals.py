"""One signal battery over the strategies that bring their own step (graph
parallel, the layer pipeline, feature parallelism): SIGTERM before the first
epoch (nothing to save: every rank stops at once), mid-run, in the last
epoch and in the epoch a stop rule ends the run on (every rank stops after
the same epoch, saves it where checkpoints are kept, and raises
``Preempted``: the run never returns as if it had finished)."""
import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch
from graphs import awkward_graph

import pyg_dist
from pyg_dist.config import (
    Checkpoint,
    Evaluation,
    FeatureParallel,
    GraphParallel,
    Grid3D,
    LayerPipeline,
)
from pyg_dist.models import GNN, DeepGNN
from pyg_dist.runtime import distributed
from pyg_dist.strategies.layer_pipeline import load as pipeline_load
from pyg_dist.train import loop
from pyg_dist.train.preemption import PREEMPTED, Preempted

EPOCHS = 4
#: Strategies: (strategy, loads its data, makes its model, keeps checkpoints).
STRATEGIES = {
    "graph-parallel": (GraphParallel(), pyg_dist.DistData.load,
                       lambda f: GNN("gcn", f, 8, 3, dropout=0.5), True),
    "layer-pipeline": (LayerPipeline(stages=2), lambda p: pipeline_load(p, 2),
                       lambda f: DeepGNN("gcn2", f, 8, 3, layers=4), False),
    "feature-parallel": (FeatureParallel(slices=2), FeatureParallel(slices=2).load,
                         lambda f: GNN("gcn", f, 8, 3, dropout=0.5), True),
    "grid-3d": (Grid3D(x=1, y=1, z=2), Grid3D(x=1, y=1, z=2).load,
                lambda f: GNN("gcn", f, 8, 3, dropout=0.5), True),
}
#: When the signal comes: (epoch whose callback sends it, 0: before the first
#: epoch; evaluation; the epoch every rank stops after).
MOMENTS = {
    "before the first epoch": (0, Evaluation(), 0),
    "mid-run": (2, Evaluation(), 3),  # after epoch 2's all-reduce: epoch 3's tells
    "in the last epoch": (EPOCHS, Evaluation(), EPOCHS),
    "in the epoch a stop rule ends": (1, Evaluation(target_acc=0.01), 1),
}


def _signalled_runs(root: str) -> dict:
    root = Path(root)
    if distributed.rank() == 0:
        pyg_dist.partition(awkward_graph(num_features=6), 2, root / "parts")
        pyg_dist.partition(awkward_graph(num_features=6), 1, root / "one")
    distributed.barrier()
    out = {}
    sync = loop.sync_parameters
    for name, (strategy, load, make, keeps) in STRATEGIES.items():
        for moment, (at, evaluation, _) in MOMENTS.items():
            data = load(root / ("one" if name == "layer-pipeline" else "parts"))
            torch.manual_seed(0)
            model = make(6)
            folder = root / "ck" / name / moment.replace(" ", "_") if keeps else None

            def send(stats=None, at=at):
                if (stats.epoch if stats is not None else 0) == at:
                    os.kill(os.getpid(), signal.SIGTERM)

            def sync_then_send(model, sync=sync, send=send):
                sync(model)
                send()

            loop.sync_parameters = sync_then_send
            before, start = signal.getsignal(signal.SIGTERM), time.monotonic()
            try:
                train_kwargs = {"checkpoint": Checkpoint(folder, every=100)} if keeps else {}
                loop.train(model, data, EPOCHS, strategy=strategy, evaluation=evaluation,
                           callback=send, progress=False, **train_kwargs)
                out[name, moment] = {"returned": True}
            except Preempted as stop:
                saved = None
                if folder is not None and (folder / "latest.json").exists():
                    saved = json.loads((folder / "latest.json").read_text())["epoch"]
                out[name, moment] = {"epoch": stop.epoch, "saved": stop.saved, "code": stop.code,
                                     "on_disk": saved, "seconds": time.monotonic() - start,
                                     "handler_back": signal.getsignal(signal.SIGTERM) is before}
            finally:
                loop.sync_parameters = sync
            distributed.barrier()
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("signals")
    return pyg_dist.launch(_signalled_runs, 2, args=(str(root),), timeout=600)


@pytest.mark.parametrize("moment", list(MOMENTS))
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_sigterm_stops_every_rank_after_the_same_epoch_and_saves_it(results, name, moment):
    keeps = STRATEGIES[name][3]
    stop_after = MOMENTS[moment][2]
    for rank, res in enumerate(results):
        r = res[name, moment]
        assert "returned" not in r, f"{name}, {moment}, rank {rank}: train returned"
        assert (r["epoch"], r["code"]) == (stop_after, PREEMPTED), (name, moment, rank, r)
        if stop_after == 0:  # nothing trained: nothing saved, and at once
            assert not r["saved"] and r["on_disk"] is None, r
            assert r["seconds"] < 5.0, r
        else:
            assert r["saved"] == keeps and r["on_disk"] == (stop_after if keeps else None), r
        assert r["handler_back"], r  # the handler from before the run is back
        print(f"{name}, {moment}, rank {rank}: stopped after epoch {r['epoch']} "
              f"in {r['seconds']:.2f} s, saved={r['saved']}")
