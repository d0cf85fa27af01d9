"""Bad input, as a counted set: each row below is a mistake a user can make
(a flag, a config file, a graph folder, a partition folder, a checkpoint
folder), how it is provoked (``pyg-dist`` run in this process, or the Python
call the ranks make), and the text that names the fix. Every case must fail
with that text, before any rank starts, and leave the folder it works in as
it was: nothing written, nothing changed.

The graph-folder and part cases are what each rank reads at start-up; that
every rank raises them together is tested with real ranks in
tests/partitioning/test_partition_distributed.py and tests/test_faults.py."""
import hashlib
import json
import shutil
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
import torch
from graphs import awkward_graph

import pyg_dist
from pyg_dist.cli import main
from pyg_dist.cli.errors import EXIT_USAGE
from pyg_dist.config import Checkpoint
from pyg_dist.datasets import open_graph_folder, write_graph_folder
from pyg_dist.models import GNN
from pyg_dist.partitioning import read_meta, read_part
from pyg_dist.train import train
from pyg_dist.train.checkpoint import find_checkpoint, load_checkpoint


@dataclass
class Case:
    """One mistake: ``setup(folder)`` makes what it needs under ``folder``
    and returns the ``pyg-dist`` argv (a list) or a Python call (a function);
    ``fix`` is text the error must hold; ``error`` the exception a Python
    call raises (a CLI run exits with status 2)."""

    name: str
    setup: object
    fix: str
    error: type = ValueError


def _graph(folder, damage=None):
    """A copy of the shared graph folder at ``folder/g``, damaged by ``damage(path)``."""
    shutil.copytree(BASE / "g", folder / "g")
    if damage:
        damage(folder / "g")
    return folder / "g"


def _parts(folder, damage=None):
    shutil.copytree(BASE / "p", folder / "p")
    if damage:
        damage(folder / "p")
    return folder / "p"


def _opened(folder):
    """What a rank does with a graph folder: open it and check its arrays."""
    graph = open_graph_folder(folder)
    graph.check_edges()
    graph.check_nodes()


def _read_parts(folder):
    meta = read_meta(folder)
    for p in range(meta.num_parts):
        read_part(folder, p, meta)


def _json(folder, name, value):
    path = folder / name
    path.write_text(value if isinstance(value, str) else json.dumps(value))
    return str(path)


def _set_info(key, value):
    def damage(g):
        info = json.loads((g / "graph.json").read_text())
        info[key] = value
        (g / "graph.json").write_text(json.dumps(info))
    return damage


def _checkpoint_of_another_model(folder):
    shutil.copytree(BASE / "ck", folder / "ck")
    model = GNN("sage", 4, 8, 3)  # the folder's model has 4 hidden features
    return lambda: load_checkpoint(folder / "ck", model, torch.optim.Adam(model.parameters()))


def _train(*flags):
    return ["train", "--dataset", "synthetic", "--num-nodes", "200", "--parts", "2", *flags]


CASES = [
    # -- the review's two, then graph folders (what every rank reads) -----------------------
    Case("graph folder: a zero-byte .npy",
         lambda f: partial(_opened, _graph(f, lambda g: (g / "edges.npy").write_bytes(b""))),
         "edges.npy' is not a .npy file (it is empty); convert the graph again"),
    Case("graph folder: graph.json holds a list",
         lambda f: partial(_opened, _graph(f, lambda g: (g / "graph.json").write_text("[1, 2]"))),
         "graph.json' holds list, not the JSON object a graph folder is described by; "
         "convert the graph again"),
    Case("graph folder: graph.json is not JSON",
         lambda f: partial(_opened, _graph(f, lambda g: (g / "graph.json").write_text("{"))),
         "graph.json' is not valid JSON"),
    Case("graph folder: num_nodes is a string",
         lambda f: partial(_opened, _graph(f, _set_info("num_nodes", "many"))),
         "'num_nodes' must be an integer >= 0 (got \"many\"); fix it or convert the graph again"),
    Case("graph folder: x.npy missing",
         lambda f: partial(_opened, _graph(f, lambda g: (g / "x.npy").unlink())),
         "x.npy' is missing from the graph folder", FileNotFoundError),
    Case("--input: not a graph folder",
         lambda f: ["partition", "--distributed", "--input", str(f), "--out", str(f / "out")],
         "is not a graph folder (no graph.json); write one with 'pyg-dist convert"),
    # -- partition folders --------------------------------------------------------------------
    Case("parts: a part file missing",
         lambda f: partial(_read_parts, _parts(f, lambda p: (p / "part_1.pt").unlink())),
         "copy part_1.pt there from the folder pyg_dist.partition wrote", FileNotFoundError),
    Case("parts: a part of another partitioning",
         lambda f: partial(_read_parts, _parts(
             f, lambda p: shutil.copy(BASE / "other" / "part_1.pt", p / "part_1.pt"))),
         "part 1 in '{f}/p' is corrupted or from another partitioning (part_1.pt does not match "
         "the checksum in meta.json); re-create the folder"),
    Case("parts: a zero-byte part",
         lambda f: partial(_read_parts, _parts(f, lambda p: (p / "part_0.pt").write_bytes(b""))),
         "part 0 in '{f}/p' is corrupted or from another partitioning"),
    Case("parts: meta.json damaged",
         lambda f: ["train", "--parts-dir",
                    str(_parts(f, lambda p: (p / "meta.json").write_text("{")))],
         "meta.json' is corrupted"),
    Case("--parts-dir: no such folder", lambda f: ["train", "--parts-dir", str(f / "nowhere")],
         "no such folder; cut one with 'pyg-dist partition"),
    Case("--parts-dir: a file",
         lambda f: ["train", "--parts-dir", _json(f, "parts.json", {})],
         "is a file; name the partition folder"),
    Case("--parts does not fit --parts-dir",
         lambda f: ["train", "--parts-dir", str(_parts(f)), "--parts", "3"],
         "--parts 3 does not fit --parts-dir {f}/p, cut into 2 parts for 2 ranks; leave --parts "
         "out"),
    # -- flags --------------------------------------------------------------------------------
    Case("--slices does not divide the ranks",
         lambda f: _train("--strategy", "feature-parallel", "--slices", "3"),
         "--slices 3 does not divide the 2 ranks"),
    Case("--strategy auto with --labels-as-input",
         lambda f: _train("--strategy", "auto", "--labels-as-input"),
         "Planned(accept='exact', probe_steps=3) cannot train a model that reads labels as "
         "input: its probe runs the model on the graph's features alone; train it with "
         "strategy=GraphParallel(halo=...) (CLI: --strategy graph-parallel)"),
    Case("--strategy unknown", lambda f: _train("--strategy", "magic"),
         "invalid choice: 'magic' (choose from 'graph-parallel'"),
    Case("--model unknown", lambda f: _train("--model", "bert"),
         "invalid choice: 'bert' (choose from 'gcn'"),
    Case("--halo unknown", lambda f: _train("--halo", "sometimes"),
         "unknown halo policy 'sometimes'; use one of adaptive:TOL"),
    Case("--epochs negative", lambda f: _train("--epochs", "-3"),
         "epochs must be an integer >= 1, the optimisation steps (--epochs N)"),
    Case("--lr 0", lambda f: _train("--lr", "0"),
         "a learning rate of 0 never changes the weights; use a rate > 0 (--lr 0.01)"),
    Case("--dropout 1.5", lambda f: _train("--dropout", "1.5"),
         "dropout is the fraction dropped, in [0, 1)"),
    Case("--eval-every -1", lambda f: _train("--eval-every", "-1"),
         "every must be an integer >= 1; 1 evaluates after every epoch"),
    Case("--target-acc 2", lambda f: _train("--target-acc", "2"),
         "an accuracy is a fraction in (0, 1], e.g. 0.72"),
    Case("--grad-compress unknown", lambda f: _train("--grad-compress", "zip"),
         "unknown gradient compression 'zip'; use none, fp16, powersgd:R (R >= 1), covap:K "
         "(K >= 1) or covap:auto\n"),
    Case("--lr-schedule unknown", lambda f: _train("--lr-schedule", "zigzag"),
         "use one of constant, cosine, plateau"),
    Case("--resume without --checkpoint", lambda f: _train("--resume"),
         "--resume and --checkpoint-every need --checkpoint DIR"),
    Case("--checkpoint names a file",
         lambda f: _train("--checkpoint", _json(f, "ck.json", {})),
         "is a file; name a folder for the checkpoints"),
    Case("partition --parts 0",
         lambda f: ["partition", "--dataset", "synthetic", "--parts", "0", "--out",
                    str(f / "out")],
         "--parts 0: give the number of parts to cut (one per rank), an integer >= 1"),
    Case("--out exists without --overwrite",
         lambda f: ["partition", "--dataset", "synthetic", "--parts", "2", "--out", str(f)],
         "exists; pass --overwrite to replace it, or name a new folder"),
    Case("convert --out is a file",
         lambda f: ["convert", "--dataset", "synthetic", "--out", _json(f, "out.json", {})],
         "is a file; name a folder to write"),
    Case("--root without the dataset",
         lambda f: ["train", "--dataset", "cora", "--root", str(f), "--parts", "2"],
         "no ind.cora.x and 7 more in {f}/Cora/raw; put Planetoid's raw files there, or pass "
         "the --root that holds Cora/raw"),
    # -- config files -------------------------------------------------------------------------
    Case("--config: no such file", lambda f: ["train", "--config", str(f / "job.json")],
         "No such file or directory; give a JSON file"),
    Case("--config: not JSON", lambda f: ["train", "--config", _json(f, "job.json", "{oops")],
         "job.json: the JSON breaks at line 1, column 2 (Expecting property name enclosed in "
         "double quotes); give a job's JSON, or a run's output whose last line is its whole "
         "JSON line"),
    Case("--config: cut off",
         lambda f: ["train", "--config", _json(f, "job.json", '{"graph": {"dataset": "cora"},\n'
                                                              ' "model": {"na')],
         "job.json: the JSON breaks at line 2, column 12 (Unterminated string starting there; "
         "the file ends inside it: it looks cut off)"),
    Case("--config: an empty file", lambda f: ["train", "--config", _json(f, "job.json", "")],
         "job.json is empty; give a job's JSON (a run's last line)"),
    Case("a misspelled option", lambda f: ["train", "--hiden", "32"],
         "pyg-dist train: error: unrecognized arguments: --hiden 32; did you mean --hidden?"),
    Case("--config: an unknown key",
         lambda f: ["train", "--config", _json(f, "job.json", {"bogus": 1})],
         "Job has no key 'bogus'; its keys are graph, model, epochs"),
    Case("--config: a value of the wrong type",
         lambda f: ["train", "--config", _json(f, "job.json", {"epochs": "ten"})],
         "Job(epochs='ten'): epochs must be an integer >= 1"),
    Case("--config: a section that is no object",
         lambda f: ["train", "--config", _json(f, "job.json", {"model": 3})],
         "model must be a JSON object of its fields, e.g. \"model\": {\"name\": \"gcn\"}"),
    # -- checkpoint folders (what every rank checks on --resume) ------------------------------
    Case("checkpoint: written by another number of ranks",
         lambda f: partial(find_checkpoint, Path(_json(f, "latest.json", {
             "epoch": 3, "world_size": 4})).parent),
         "was written by 4 ranks but 1 are running; resume with 4 ranks"),
    Case("checkpoint: latest.json damaged",
         lambda f: partial(find_checkpoint, Path(_json(f, "latest.json", "{")).parent),
         "latest.json' is damaged"),
    Case("checkpoint: of another model", _checkpoint_of_another_model,
         "holds the state of another model or optimizer (size mismatch for convs.0.lin_l.weight"),
]

BASE = None
SINGLE = {}


@pytest.fixture(scope="module", autouse=True)
def base(tmp_path_factory):
    """The inputs cases copy and damage: a graph folder, a partition folder
    in 2 parts and another partitioning of the same graph, a checkpoint."""
    global BASE
    BASE = tmp_path_factory.mktemp("base")
    data = awkward_graph(num_features=4)
    write_graph_folder(data, BASE / "g")
    pyg_dist.partition(data, 2, BASE / "p")
    pyg_dist.partition(data, 2, BASE / "other", method="random")
    pyg_dist.partition(data, 1, BASE / "one")
    SINGLE["data"] = pyg_dist.DistData.load(BASE / "one")
    train(GNN("sage", 4, 4, 3), SINGLE["data"], 2, progress=False,
          checkpoint=Checkpoint(BASE / "ck", every=2))


def snapshot(folder):
    """Every path under ``folder`` with the sha256 of each file."""
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest()
                                         if p.is_file() else "folder")
            for p in sorted(folder.rglob("*"))}


def test_there_are_at_least_22_distinct_cases():
    assert len({c.name for c in CASES}) == len(CASES) >= 22


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_names_the_fix_and_writes_nothing(case, tmp_path, capsys, nothing_runs):
    work = tmp_path / "work"
    work.mkdir()
    provoke = case.setup(work)
    before = snapshot(work)
    fix = case.fix.replace("{f}", str(work))
    if callable(provoke):
        with pytest.raises(case.error) as info:
            provoke()
        message = str(info.value)
    else:
        with pytest.raises(SystemExit) as info:
            main(provoke)
        out, message = capsys.readouterr()
        assert info.value.code == EXIT_USAGE and out == "", (info.value.code, out, message)
        assert "Traceback" not in message and message.count("\n") <= 2, message
    assert fix in message
    assert snapshot(work) == before, "the case wrote or changed a file"
