"""Faults that lose nothing: a filesystem that fills while a partition
folder, a graph folder or a checkpoint is written (a small tmpfs) fails with
an error naming the folder and the room needed, keeps the previous folder or
checkpoint whole and loadable, and leaves no temporary file; a part or a
checkpoint file with flipped bytes, cut short or taken from another run is
refused on every rank together, naming the file, before any training step."""
import contextlib
import gc
import io
import json
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from graphs import awkward_graph

import pyg_dist
from pyg_dist.config import Checkpoint
from pyg_dist.datasets import open_graph_folder, synthetic, write_graph_folder
from pyg_dist.models import GNN
from pyg_dist.runtime import distributed
from pyg_dist.train import train

ROOM = r"no space left on the device of '{}' while writing {} \(it needs about [\d.]+ \w+, " \
       r"[\d.]+ \w+ are free\); nothing was written; free space there"


@contextmanager
def small_disk(folder: Path, size: int):
    """A tmpfs of ``size`` bytes mounted on ``folder``, unmounted after."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(folder)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        gc.collect()  # parts are memory-mapped while loaded
        if subprocess.run(["umount", str(folder)]).returncode != 0:
            subprocess.run(["umount", "--lazy", str(folder)], check=True)


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _page_up(size: int) -> int:
    return (size + 4095) // 4096 * 4096


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if ".tmp" in p.name or ".old" in p.name)


def test_a_partition_folder_that_does_not_fit_keeps_the_one_before(tmp_path):
    graph = synthetic(num_nodes=600, seed=0)
    pyg_dist.partition(graph, 4, tmp_path / "measure")
    size = _size(tmp_path / "measure")
    with small_disk(tmp_path / "disk", _page_up(size * 3 // 2)) as disk:
        pyg_dist.partition(graph, 4, disk / "parts")  # fits once, not twice
        before = (disk / "parts" / "meta.json").read_text()
        with pytest.raises(OSError, match=ROOM.format(disk, r"part_\d.pt")) as caught:
            pyg_dist.partition(graph, 4, disk / "parts", overwrite=True, seed=1)
        print(caught.value)
        assert (disk / "parts" / "meta.json").read_text() == before
        for rank in range(4):  # whole: every checksum matches
            assert pyg_dist.DistData.load(disk / "parts", rank=rank).num_nodes > 0
        assert _leftovers(disk) == []


def test_a_graph_folder_that_does_not_fit_keeps_the_one_before(tmp_path):
    graph = synthetic(num_nodes=2000, seed=0)
    write_graph_folder(graph, tmp_path / "measure")
    size = _size(tmp_path / "measure")
    # Room for the folder and a tenth: the next one's first array does not fit.
    with small_disk(tmp_path / "disk", _page_up(size * 11 // 10)) as disk:
        write_graph_folder(graph, disk / "graph")
        # A memory map filled past a full disk would end this process (SIGBUS).
        with pytest.raises(OSError, match=ROOM.format(disk / "graph", r"\S+")) as caught:
            write_graph_folder(graph, disk / "graph", overwrite=True)
        print(caught.value)
        folder = open_graph_folder(disk / "graph")
        assert torch.equal(folder.to_data().edge_index.long(), graph.edge_index.long())
        assert _leftovers(disk) == []


def _run(parts, folder, epochs, init_seed=0):
    data = pyg_dist.DistData.load(parts, rank=0 if distributed.world_size() == 1 else None)
    torch.manual_seed(init_seed)
    model = GNN("sage", data.x.size(1), 32, 3)
    steps = []
    result = train(model, data, epochs, progress=False, callback=lambda s: steps.append(s.epoch),
                   checkpoint=Checkpoint(folder, every=1, resume=True))
    return model, result, steps


def test_a_checkpoint_that_does_not_fit_keeps_the_one_before(tmp_path):
    pyg_dist.partition(awkward_graph(num_features=16), 1, tmp_path / "parts")
    _run(tmp_path / "parts", tmp_path / "measure", 1)
    size = (tmp_path / "measure" / "rank_0.pt").stat().st_size
    # Room for two files and a half: the third save (a new file beside the
    # current and the previous one) does not fit.
    with small_disk(tmp_path / "disk", _page_up(size * 5 // 2)) as disk:
        with pytest.raises(OSError, match=ROOM.format(disk / "ck", r"rank_0.pt.tmp")) as caught:
            _run(tmp_path / "parts", disk / "ck", 3)
        print(caught.value)
        assert json.loads((disk / "ck" / "latest.json").read_text())["epoch"] == 2
        assert _leftovers(disk) == []
        model, result, steps = _run(tmp_path / "parts", disk / "ck", 2)  # loads, nothing to do
        assert steps == [] and len(result.history) == 2
        saved = torch.load(disk / "ck" / "rank_0.pt", weights_only=True)["model"]
        assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())


def _damage(path: Path, how: str, other: Path) -> None:
    blob = bytearray(path.read_bytes())
    if how == "flipped":
        blob[len(blob) // 2] ^= 0xFF
        path.write_bytes(bytes(blob))
    elif how == "truncated":
        path.write_bytes(bytes(blob[: len(blob) // 2]))
    else:  # swapped with another run's
        shutil.copyfile(other, path)


HOW = ("flipped", "truncated", "swapped")


def _refusals(root: str) -> dict:
    """A rank of 2: damages rank 1's part, then rank 1's checkpoint file,
    each way of :data:`HOW` (rank 0 does, between barriers, and puts the
    file back), and records the error every rank got and whether any
    training step ran."""
    root = Path(root)
    rank = distributed.rank()
    if rank == 0:
        pyg_dist.partition(awkward_graph(num_features=16), 2, root / "parts", seed=1)
        pyg_dist.partition(awkward_graph(num_features=16), 2, root / "other", seed=2)
    distributed.barrier()
    _run(root / "parts", root / "ck", 2)
    _run(root / "parts", root / "ck-other", 2, init_seed=1)
    got = {}
    # A checkpoint is refused when rank 1's files of both epochs are damaged
    # (with the one before intact, the ranks fall back to it: see below).
    for kind, victims in (("part", ["part_1.pt"]),
                          ("checkpoint", ["rank_1.pt", "rank_1.prev.pt"])):
        folder, other = ("parts", "other") if kind == "part" else ("ck", "ck-other")
        for how in HOW:
            if rank == 0:
                for victim in victims:
                    shutil.copyfile(root / folder / victim, root / f"backup-{victim}")
                    _damage(root / folder / victim, how, root / other / victim)
            distributed.barrier()
            steps = []
            try:
                _, _, steps = _run(root / "parts", root / "ck", 3)
                got[kind, how] = ("trained", steps)
            except Exception as exc:  # noqa: BLE001 - what each rank got is the result
                got[kind, how] = (type(exc).__name__, str(exc), steps)
            distributed.barrier()
            if rank == 0:
                for victim in victims:
                    shutil.copyfile(root / f"backup-{victim}", root / folder / victim)
            distributed.barrier()
    got["fallback"] = _fallback(root, rank)
    return got


def _fallback(root: Path, rank: int) -> dict:
    """Rank 1's newest checkpoint file flipped, its previous one intact: the
    ranks resume from epoch 1, rank 0 warns once; the weights after epoch 3
    are those of a run never resumed."""
    if rank == 0:
        shutil.copytree(root / "ck", root / "ck-fallback")
        _damage(root / "ck-fallback" / "rank_1.pt", "flipped", root / "ck-other" / "rank_1.pt")
    distributed.barrier()
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        model, _, steps = _run(root / "parts", root / "ck-fallback", 3)
    reference, _, _ = _run(root / "parts", root / "ck-reference", 3)
    same = all(torch.equal(v, reference.state_dict()[k]) for k, v in model.state_dict().items())
    return {"steps": steps, "stderr": stderr.getvalue(), "same_weights": same}


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    root = tmp_path_factory.mktemp("refusals")
    return root, pyg_dist.launch(_refusals, 2, args=(str(root),), timeout=300)


@pytest.mark.parametrize("how", HOW)
def test_a_damaged_part_is_refused_on_every_rank(refusals, how):
    root, got = refusals
    results = [g["part", how] for g in got]
    assert results[0] == results[1]  # the same error, on both ranks
    kind, message, steps = results[0]
    assert kind == "ValueError" and steps == []
    assert message.startswith(f"'DistData.load' of '{root / 'parts'}' failed on 1 of 2 ranks:")
    assert (f"ValueError: part 1 in '{root / 'parts'}' is corrupted or from another "
            f"partitioning (part_1.pt does not match the checksum in meta.json)") in message


def test_a_damaged_newest_checkpoint_falls_back_to_the_intact_one_before(refusals):
    """Every rank holds epoch 1 intact, rank 1's file of epoch 2 is flipped:
    both ranks resume from epoch 1 (epochs 2 and 3 run again), one warning
    names the file, and the weights equal those of a run never resumed."""
    root, got = refusals
    ck = root / "ck-fallback"
    assert [g["fallback"]["steps"] for g in got] == [[2, 3], [2, 3]]
    assert [g["fallback"]["same_weights"] for g in got] == [True, True]
    warnings = [line for line in got[0]["fallback"]["stderr"].splitlines()
                if line.startswith("warning:")]
    assert len(warnings) == 1
    start, damaged = warnings[0].split(" (127.0.0.1): ")  # rank 1 on <this machine's name>
    assert start.startswith(f"warning: the checkpoint of epoch 2 in '{ck}' is damaged (rank 1 on ")
    assert damaged == (
        f"'{ck / 'rank_1.pt'}' (epoch 2) does not match the sha256 latest.json records for rank "
        f"1 at epoch 2: its bytes changed after it was written (flipped or cut off) or it comes "
        f"from another run, '{ck / 'rank_1.prev.pt'}' holds epoch 1); every rank holds the one "
        f"of epoch 1 intact: resuming from it")
    assert "warning:" not in got[1]["fallback"]["stderr"]


@pytest.mark.parametrize("how", HOW)
def test_a_damaged_checkpoint_is_refused_on_every_rank_before_training(refusals, how):
    root, got = refusals
    results = [g["checkpoint", how] for g in got]
    assert results[0] == results[1]
    kind, message, steps = results[0]
    assert kind == "ValueError" and steps == []
    assert message.startswith(f"the checkpoint of epoch 2 in '{root / 'ck'}' is incomplete: "
                              f"rank 1")
    if how == "truncated":
        assert f"'{root / 'ck' / 'rank_1.pt'}' cannot be read" in message
    else:
        assert (f"'{root / 'ck' / 'rank_1.pt'}' (epoch 2) does not match the sha256 latest.json "
                f"records for rank 1 at epoch 2: its bytes changed after it was written "
                f"(flipped or cut off) or it comes from another run") in message


#: The communication timeout of the fault worlds: a peer must learn of the
#: failure long before its collective would time out.
COMM_TIMEOUT = 30.0
#: How soon every rank knows of one rank's error (seconds).
AT_ONCE = 5.0
PHASES = ("loading", "first exchange", "training", "evaluation", "checkpointing", "callback")
#: The failure battery: every strategy, in each phase it has (feature
#: parallelism, the layer pipeline and the 3D grid load their grids themselves).
BATTERY = [("graph-parallel", phase) for phase in PHASES] + [
    ("layer-pipeline", phase) for phase in ("training", "evaluation", "checkpointing",
                                            "callback")] + [
    ("feature-parallel", phase) for phase in ("training", "evaluation", "checkpointing",
                                              "callback")] + [
    ("gradient-only", phase) for phase in ("training", "checkpointing")] + [
    ("grid-3d", phase) for phase in ("training", "evaluation", "checkpointing", "callback")]


class Injected(Exception):
    """The fault a test puts into one rank."""


def _strategy(name: str):
    from pyg_dist.config import FeatureParallel, GradientOnly, GraphParallel, Grid3D, LayerPipeline
    from pyg_dist.models import DeepGNN
    from pyg_dist.strategies.layer_pipeline import load

    return {"graph-parallel": (GraphParallel(), pyg_dist.DistData.load,
                               lambda f: GNN("sage", f, 16, 3)),
            "layer-pipeline": (LayerPipeline(stages=2), lambda p: load(p.parent / "one", 2),
                               lambda f: DeepGNN("gcn2", f, 8, 3, layers=4)),
            "feature-parallel": (FeatureParallel(slices=2), pyg_dist.DistData.load,
                                 lambda f: GNN("gcn", f, 16, 3)),
            "gradient-only": (GradientOnly(regroup_every=2), pyg_dist.DistData.load,
                              lambda f: GNN("sage", f, 16, 3)),
            "grid-3d": (Grid3D(x=1, y=1, z=2), pyg_dist.DistData.load,
                        lambda f: GNN("gcn", f, 16, 3))}[name]


def _own_step(name: str):
    """The runner class of a strategy whose step runs the layers itself."""
    from pyg_dist.strategies.feature_parallel.runner import FeatureParallelRun
    from pyg_dist.strategies.grid_3d.runner import Grid3DRun
    from pyg_dist.strategies.layer_pipeline.strategy import _PipelineRun

    return {"layer-pipeline": _PipelineRun, "feature-parallel": FeatureParallelRun,
            "grid-3d": Grid3DRun}.get(name)


def _faulty(root: str, phase: str, linger: float = 0.0, name: str = "graph-parallel") -> dict:
    """A rank of 2 training under strategy ``name``, rank 1 failing in
    ``phase``: each rank's error (type, message) and when it came
    (``time.monotonic``, one clock for the machine); rank 1 also when its
    fault struck. Rank 1 then waits ``linger`` seconds (its connections
    open, as a process stuck in clean-up) and returns, which closes its
    connections as the end of its process would."""
    import time

    from pyg_dist.runtime import distributed as dist_mod
    from pyg_dist.train import checkpoint as ckpt_mod

    root = Path(root)
    rank = distributed.rank()
    if rank == 0:
        pyg_dist.partition(awkward_graph(num_features=16), 2, root / "parts", seed=1,
                           clusters_per_part=2)
        pyg_dist.partition(awkward_graph(num_features=16), 1, root / "one", seed=1)
    distributed.barrier()
    struck = {}

    def fault(what):
        def raise_it(*args, **kwargs):
            struck["at"] = time.monotonic()
            raise Injected(f"injected fault in {what}")
        return raise_it

    failing = rank == 1
    if failing and phase == "loading":
        import pyg_dist.data.dist_data as dist_data
        dist_data.read_part = fault("read_part")
    if failing and phase == "first exchange":
        dist_mod.batch_send_recv = fault("the halo exchange")
    if failing and phase == "checkpointing":
        ckpt_mod.torch.save = fault("torch.save")
    strategy, load, make = _strategy(name)
    own_step = _own_step(name)  # a runner that calls layers, not the model's forward
    if failing and own_step is not None and phase == "training":
        take = own_step.step

        def step_with_fault(self, epoch, optimizer):
            if epoch == 3:
                fault("the training step")()
            return take(self, epoch, optimizer)

        own_step.step = step_with_fault
    if failing and own_step is not None and phase == "evaluation":
        own_step.evaluate = lambda self, step: fault("the evaluation")()

    def callback(stats):
        if failing and phase == "callback" and stats.epoch == 2:
            fault("the callback")()

    out = {}
    try:
        data = load(root / "parts")
        torch.manual_seed(0)
        model = make(data.x.size(1))
        forward = model.forward

        def forward_with_fault(*args, **kwargs):
            if failing and phase == "training" and model.training and forward_with_fault.calls == 2:
                fault("the model's forward")()
            if failing and phase == "evaluation" and not model.training:
                fault("the model's forward")()
            forward_with_fault.calls += model.training
            return forward(*args, **kwargs)

        forward_with_fault.calls = 0
        model.forward = forward_with_fault
        train(model, data, 4, strategy=strategy, progress=False, evaluation=None,
              callback=callback,
              checkpoint=Checkpoint(root / "ck", every=2))
        out["error"] = None
    except Exception as exc:  # noqa: BLE001 - what each rank got is the result
        out.update(error=(type(exc).__name__, str(exc)), at=time.monotonic())
    if failing:
        time.sleep(linger)
    out["struck"] = struck.get("at")
    return out


@pytest.mark.parametrize("name,phase", BATTERY, ids=[f"{n}-{p}" for n, p in BATTERY])
def test_one_rank_failing_is_known_to_every_rank_at_once_naming_it(tmp_path, name, phase):
    """A world of its own per case (a failure leaves no group to reuse)."""
    other, mine = pyg_dist.launch(_faulty, 2, args=(str(tmp_path), phase, 0.0, name),
                                  timeout=240, comm_timeout=COMM_TIMEOUT)
    assert mine["struck"] is not None, f"{name}: the fault in {phase} never struck"
    assert mine["error"][0] == "Injected" or "Injected: injected fault" in mine["error"][1]
    assert other["error"] is not None, "rank 0 finished as if nothing happened"
    kind, message = other["error"]
    assert kind != "PeerLost", message
    assert "rank 1 on " in message and "Injected: injected fault in " in message, message
    took = other["at"] - mine["struck"]
    assert took < AT_ONCE, f"{name}, {phase}: rank 0 knew after {took:.1f} s: {message[:300]}"
    print(f"{name}, {phase}: rank 0 knew after {took:.2f} s: {kind}: {message[:200]}")


def test_a_failing_rank_that_lingers_is_named_at_the_timeout(tmp_path):
    """Rank 1 fails in training but its process stays (connections open):
    rank 0 learns of it when its exchange times out, not later."""
    timeout = 8.0
    other, mine = pyg_dist.launch(_faulty, 2, args=(str(tmp_path), "training", timeout + 8),
                                  timeout=240, comm_timeout=timeout)
    kind, message = other["error"]
    assert kind == "PeerFailed" and "rank 1 on " in message, message
    assert "Injected: injected fault in the model's forward (while the training step" in message
    took = other["at"] - mine["struck"]
    assert timeout - 1 < took < timeout + 4, f"{took:.1f} s"
    print(f"lingering: rank 0 knew after {took:.1f} s (timeout {timeout:g} s)")
