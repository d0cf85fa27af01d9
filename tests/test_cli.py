"""The pyg-dist command line: partition, train on spawned ranks, train under torchrun.

The commands run in the test process (:func:`run`, tests/command_line.py), their
ranks as the command starts them; torchrun's job runs as processes
(:func:`run_process`)."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from command_line import pyg_dist_command
from graphs import CORA_RAW

import pyg_dist
from pyg_dist.datasets import synthetic
from pyg_dist.strategies.feature_parallel import RUNS as FEATURE_PARALLEL_RUNS

DATA = Path(__file__).parent / "data"
KEYS = {"test_acc", "val_acc", "epochs", "halo_bytes", "seconds", "parts", "model", "stopped",
        "time_to_target", "epochs_to_target"}


def run(args, env=None):
    """``pyg-dist ARGS`` in this process (tests/command_line.py); asserts exit
    status 0."""
    out = pyg_dist_command(*args, env=env)
    assert out.returncode == 0, f"pyg-dist {' '.join(out.args[1:])} failed:\n{out.stderr[-3000:]}"
    return out


def run_process(args, timeout=300, env=None):
    """The command ``args`` as a process of its own; asserts exit status 0."""
    out = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, f"{' '.join(map(str, args))} failed:\n{out.stderr[-3000:]}"
    return out


def last_json(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


def layer0_widths(narrower, input_width, steps):
    """The widths of the rows layer 0 sends at each step under the exact
    policy with input caching: at step 0 the input has been seen once, so it
    is not known to be static, and the layer sends the narrower of its input
    and its transformed rows; at step 1 the input is seen again unchanged, so
    it is sent once, whole, into the cache; after that, nothing."""
    widths = []
    for step in range(steps):
        seen_before = step >= 1
        cached = step >= 2
        widths.append(0 if cached else input_width if seen_before else narrower)
    return widths


def test_partition_command(tmp_path):
    out = run(["partition", "--dataset", "synthetic", "--num-nodes", "500", "--parts", "3",
                     "--method", "random", "--out", str(tmp_path / "p")])
    summary = last_json(out.stdout)
    assert summary["num_parts"] == 3 and sum(summary["part_sizes"]) == 500
    assert (tmp_path / "p" / "meta.json").is_file()


def test_partition_a_large_graph_preset_with_overrides(tmp_path):
    out = run(["partition", "--dataset", "synthetic-arxiv", "--num-nodes", "3000",
                     "--avg-degree", "8", "--parts", "2", "--method", "metis-coarse",
                     "--out", str(tmp_path / "p")])
    summary = last_json(out.stdout)
    assert summary["num_nodes"] == 3000 and summary["num_edges"] == 3000 * 8
    assert summary["method"] == "metis-coarse" and summary["edge_cut"] < 0.3 * 3000 * 8


def test_partition_distributed_command_writes_what_the_single_process_builder_does(tmp_path):
    from pyg_dist.datasets import write_graph_folder
    from pyg_dist.partitioning import PartPlan, read_meta, read_part

    data = synthetic(num_nodes=400, seed=1)
    write_graph_folder(data, tmp_path / "graph")
    out = run(["partition", "--distributed", "--input", str(tmp_path / "graph"),
                     "--parts", "2", "--out", str(tmp_path / "p")])
    summary = last_json(out.stdout)
    meta = read_meta(tmp_path / "p")
    assert summary["method"] == meta.method == "metis-coarse"
    assert summary["part_sizes"] == meta.part_sizes and meta.num_parts == 2
    parts = [read_part(tmp_path / "p", r, meta) for r in range(2)]
    owner = torch.empty(data.num_nodes, dtype=torch.long)
    for r, part in enumerate(parts):
        owner[part["graph"]["global_id"]] = r
    plan = PartPlan.create(data.edge_index, owner, 2)
    for r, part in enumerate(parts):
        for name, value in vars(plan.build(r)).items():
            assert torch.equal(part["graph"][name], value), name


def test_partition_distributed_needs_an_input_folder(tmp_path):
    from pyg_dist.cli import main

    with pytest.raises(SystemExit, match="--distributed and --input DIR go together"):
        main(["partition", "--distributed", "--parts", "2", "--out", str(tmp_path / "p")])
    with pytest.raises(SystemExit, match="drop --dataset"):
        main(["partition", "--distributed", "--input", str(tmp_path), "--dataset", "cora",
              "--out", str(tmp_path / "p")])


@pytest.mark.parametrize("model,first,hidden_width", [
    ("gcn", 16, 8), ("sage", 16, 8), ("gin", 64, 16), ("gat", 64, 8)])
def test_train_command_books_a_hand_count_and_ends_with_json(tmp_path, model, first,
                                                             hidden_width):
    """2 ranks, 2 layers (64 -> 16 -> 8 features; GAT: 64 -> 8 heads x 8 -> 8),
    exact with input caching, dropout shared by all ranks, evaluation every
    epoch. Layer 0 first sends the narrower of its 64-wide input and its
    transformed rows (GCN, SAGE: 16 wide; GAT: 64 = heads x 8; the generic
    path of GIN: its input) as the input is not known to be static yet, then
    at step 1 its input once into the cache, then nothing; layer 1 sends rows
    and gradients every step, the transformed 8 (GCN, SAGE, GAT) or GIN's
    16-wide input. Evaluation alike (its own cache). Every byte sent, summed
    over ranks: H rows per exchange."""
    parts = tmp_path / "parts"
    meta = pyg_dist.partition(synthetic(num_nodes=800, seed=0), 2, parts)
    epochs = 4
    out = run(["train", "--dataset", "synthetic", "--parts-dir", str(parts), "--parts", "2",
                     "--model", model, "--epochs", str(epochs), "--no-progress",
                     "--log-every", "2"])
    result = last_json(out.stdout)
    assert KEYS <= set(result)
    assert result["epochs"] == epochs and result["parts"] == 2 and result["model"] == model
    row = sum(meta.halo_sizes) * 4  # bytes of one float32 feature, every halo row
    layer0 = layer0_widths(first, 64, epochs)
    assert result["halo_bytes_fwd"] == row * (sum(layer0) + hidden_width * epochs)
    backward0 = first if first < 64 else 0  # the input itself needs no gradient
    assert result["halo_bytes_bwd"] == row * (backward0 + hidden_width * epochs)
    assert result["halo_bytes_eval"] == row * (sum(layer0) + hidden_width * epochs)
    assert result["halo_bytes"] == (result["halo_bytes_fwd"] + result["halo_bytes_bwd"]
                                    + result["halo_bytes_eval"])
    assert result["halo"] == "exact" and result["input_cache"] is True
    if model == "gcn":  # every parameter's gradient, 4 bytes, each step, both ranks
        assert result["grad_bytes"] == epochs * 2 * 4 * (64 * 16 + 16 + 16 * 8 + 8)
        assert result["grad_compress"] == "none"
    assert "epoch    2" in out.stderr and "halo fwd" in out.stderr


@pytest.mark.parametrize("model,accuracy", [("gcn", 0.78), ("gat", 0.81)])
def test_train_on_cora_reaches_the_published_accuracy(tmp_path, model, accuracy):
    """The published recipes on 4 ranks (METIS), the CLI's defaults: GCN
    (about 81.5% single-process; 0.80-0.83 over our seeds) and GAT (83.0 +- 0.7;
    heads 8 of 8 features, dropout 0.6 on features and attention, lr 0.005)."""
    shutil.copytree(CORA_RAW, tmp_path / "Cora" / "raw")
    out = run(["train", "--dataset", "cora", "--root", str(tmp_path), "--parts", "4",
                     "--model", model, "--epochs", "200", "--eval-every", "10",
                     "--no-progress"])
    result = last_json(out.stdout)
    assert result["dataset"] == "cora" and result["epochs"] == 200 and result["parts"] == 4
    assert result["model"] == model
    assert result["test_acc"] >= accuracy, result


def test_post_step_books_its_accuracies_seconds_and_bytes(tmp_path):
    """``--post cs`` after training a model with the recipe options and
    labels as input on 2 ranks: the JSON line's ``post`` holds the step's
    accuracies, seconds and bytes. The same job again (``--config``) with no
    propagation steps trains alike and differs by the propagations alone: one
    exchange of every halo row, C float32 columns, per step (4 + 3 steps);
    and C & S without steps only puts the training labels in place, so its
    validation and test accuracies are those of the best epoch's model, the
    one the step starts from."""
    parts = tmp_path / "parts"
    meta = pyg_dist.partition(synthetic(num_nodes=600, seed=0), 2, parts)
    first = run(["train", "--dataset", "synthetic", "--parts-dir", str(parts),
                       "--parts", "2", "--model", "sage", "--epochs", "6", "--norm", "batch",
                       "--jk", "cat", "--skip", "--labels-as-input", "--no-progress",
                       "--post", "cs,correction_layers=4,smoothing_layers=3"])
    (tmp_path / "run.json").write_text(first.stdout)
    bare = run(["train", "--config", str(tmp_path / "run.json"), "--post",
                      "cs,correction_layers=0,smoothing_layers=0"])
    a, b = last_json(first.stdout), last_json(bare.stdout)
    assert a["config"]["post"] == {"name": "cs", "correction_layers": 4, "correction_alpha": 0.8,
                                   "smoothing_layers": 3, "smoothing_alpha": 0.8,
                                   "autoscale": True, "scale": 1.0}
    assert a["config"]["model"]["labels_as_input"] and a["config"]["model"]["norm"] == "batch"
    for result in (a, b):
        post = result["post"]
        assert set(post) == {"name", "train_acc", "val_acc", "test_acc", "seconds", "bytes"}
        assert post["name"] == "cs" and post["seconds"] > 0
    for key in ("val_acc", "test_acc", "best_epoch", "halo_bytes", "grad_bytes"):
        assert a[key] == b[key], key
    step = sum(meta.halo_sizes) * meta.num_classes * 4  # one exchange, every halo row
    assert a["post"]["bytes"] - b["post"]["bytes"] == 7 * step
    assert b["post"]["bytes"] > 0  # the model's forward
    assert b["post"]["val_acc"] == pytest.approx(b["val_acc"], abs=1e-12)
    assert b["post"]["test_acc"] == pytest.approx(b["test_acc"], abs=1e-12)
    assert b["post"]["train_acc"] == 1.0  # the training labels in place


def test_planetoid_from_a_read_only_root(tmp_path, monkeypatch):
    from pyg_dist.datasets import planetoid

    shutil.copytree(CORA_RAW, tmp_path / "Cora" / "raw")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if mode == os.W_OK
                        else real_access(path, mode))
    data = planetoid("cora", tmp_path)
    assert data.num_nodes == 2708 and int(data.train_mask.sum()) == 140
    assert not (tmp_path / "Cora" / "processed").exists()


def test_train_under_torchrun_joins_the_group():
    """Also sends gradients through COVAP's DDP hook, one half a step."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", "2"]
    out = run_process(torchrun + ["-m", "pyg_dist.cli", "train", "--dataset", "synthetic",
                                  "--num-nodes", "600", "--parts", "2", "--epochs", "4",
                                  "--no-progress", "--grad-compress", "covap:2"],
                      env={"OMP_NUM_THREADS": "1"})
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, out.stdout  # rank 0 alone reports
    result = json.loads(lines[0])
    assert result["parts"] == 2 and result["epochs"] == 4
    # 64 features -> 16 -> 8 classes: 1176 parameters, half of them a step, 2 ranks
    assert result["grad_compress"] == "covap:2" and result["grad_bytes"] == 4 * 2 * 4 * 1176 // 2


def test_gradient_only_training_sends_no_halo_in_training(tmp_path):
    out = run(["train", "--dataset", "synthetic", "--num-nodes", "800", "--parts", "2",
                     "--strategy", "gradient-only", "--clusters-per-rank", "3",
                     "--regroup-every", "2", "--correction", "batch", "--epochs", "4",
                     "--no-progress"])
    result = last_json(out.stdout)
    assert result["strategy"] == "gradient-only" and result["correction"] == "batch"
    assert result["clusters_per_rank"] == 3
    assert result["halo_bytes_fwd"] == 0 and result["halo_bytes_bwd"] == 0
    assert result["grad_bytes"] == 4 * 2 * 4 * 1176 and result["regroup_seconds"] > 0


def test_bad_gradient_compression_is_refused_before_any_rank_starts():
    from pyg_dist.cli import main

    with pytest.raises(SystemExit, match="shard count K >= 1"):
        main(["train", "--grad-compress", "covap:0"])


def test_a_layer_pipeline_counts_its_stage_boundaries(tmp_path):
    out = run(["train", "--dataset", "synthetic", "--num-nodes", "400", "--parts", "2",
                     "--model", "gcn2", "--layers", "3", "--hidden", "8",
                     "--strategy", "layer-pipeline", "--stages", "2",
                     "--chunks", "2", "--initial-rows", "recompute", "--epochs", "3",
                     "--no-progress"])
    result = last_json(out.stdout)
    assert result["strategy"] == "layer-pipeline" and result["model"] == "gcn2"
    assert result["stages"] == 2 and result["chunks"] == 2
    assert result["initial_rows"] == "recompute"
    # one part of 400 rows, 8 wide (the initial rows are recomputed), both ways
    # each epoch, plus the fill pass's forward
    assert result["stage_bytes"] == 3 * 2 * 400 * 8 * 4 + 400 * 8 * 4
    assert result["halo_bytes_fwd"] == 0  # one part per stage: no halo


@pytest.mark.parametrize("args, message", [
    (["--parts", "4", "--stages", "3", "--model", "gcn2"], "does not divide --parts 4"),
    (["--stages", "2", "--model", "gcn"], "--model gcn2 | resgcn | ressage"),
    (["--parts", "4", "--stages", "4", "--model", "gcn2", "--layers", "2"], "at least as many"),
    (["--chunks", "0", "--model", "gcn2"], "chunks must be an integer >= 1"),
    (["--stages", "2", "--regroup-every", "3"], "options of several strategies"),
    (["--strategy", "gradient-only", "--chunks", "2"], "--chunks do.* not apply to --strategy "
                                                       "gradient-only"),
    (["--resume"], "need --checkpoint DIR"),
    (["--halo", "stale"], "stale:K"),
])
def test_bad_pipeline_options_are_refused_before_any_rank_starts(args, message):
    from pyg_dist.cli import main

    with pytest.raises(SystemExit, match=message):
        main(["train", *args])


def test_layouts_prints_every_grid_and_the_one_moving_fewest_bytes(tmp_path):
    out = run(["layouts", "--dataset", "synthetic", "--num-nodes", "600", "--parts", "4",
                     "--model", "resgcn", "--layers", "8", "--hidden", "16"])
    lines = [json.loads(line) for line in out.stdout.strip().splitlines()]
    layouts, best = lines[:-1], lines[-1]
    assert [x["layout"] for x in layouts] == ["4x1", "2x2", "1x4"]
    assert layouts[0]["stage_bytes"] == 0 and layouts[-1]["halo_bytes"] == 0
    assert layouts[-1]["stage_bytes"] == 2 * 3 * 600 * 16 * 4  # 3 boundaries, both ways
    assert best["best"] == min(layouts, key=lambda x: x["bytes"])["layout"]
    assert f"--stages {best['stages']}" in best["command"]


def test_train_help_fits_a_screen_with_each_strategy_s_group_on_request(monkeypatch, capsys):
    """62 lines at 80 columns: the default strategy's options and the run's; each
    other strategy's group on request. (The parser of the command, in this
    process: a help prints and exits before anything else runs.)"""
    from pyg_dist.cli import main

    monkeypatch.setenv("COLUMNS", "80")

    def shown(*argv):
        with pytest.raises(SystemExit) as exit:
            main(["train", *argv, "--help"])
        assert exit.value.code == 0
        return capsys.readouterr().out.splitlines()

    lines = shown()
    assert lines[0].startswith("usage: pyg-dist train ") and len(lines) <= 62, lines
    assert max(map(len, lines)) <= 80
    groups = [line for line in lines if line and not line.startswith(" ")]
    assert not [g for g in groups if g.startswith("strategy: ")]
    for name, title in [("gradient-only", "strategy: gradient-only:"),
                        ("layer-pipeline", "strategy: layer-pipeline (deep models):"),
                        ("auto", "strategy: auto (chosen by a probe and predictions):")]:
        assert [line for line in shown("--strategy", name) if line.startswith("strategy: ")] \
            == [title]


def test_train_options_map_onto_one_spelling():
    from pyg_dist.cli import build_parser, parse_job
    from pyg_dist.config import GradientOnly, GraphParallel
    from pyg_dist.halo import Exact, parse_policy

    def job(*args):
        return parse_job(build_parser().parse_args(["train", *args]))

    assert parse_policy(job("--halo", "exact,compress=int8,cache_inputs=false").strategy.halo) \
        == Exact(compress="int8", cache_inputs=False)
    assert job("--halo", "stale:2,compress=fp16").strategy == \
        GraphParallel(halo="stale:2,compress=fp16")
    assert job("--strategy", "gradient-only", "--clusters-per-rank", "3").strategy == \
        GradientOnly(clusters_per_rank=3)
    assert job("--pre-aggregate").strategy == GraphParallel(pre_aggregate=True)
    for old in ("--mode", "--compress", "--no-input-cache", "--clusters-per-part"):
        with pytest.raises(SystemExit):  # no spelling of an earlier release is kept
            build_parser().parse_args(["train", old, "1"])
    stop = job("--target-acc", "0.8", "--time-budget", "60", "--patience", "5").evaluation
    assert (stop.target_acc, stop.time_budget, stop.patience) == (0.8, 60.0, 5)
    with pytest.raises(ValueError, match=r"a fraction in \(0, 1\], e.g. 0.72"):
        job("--target-acc", "80")
    # the model's recipe fills what is not given; what is given wins
    gat = job("--model", "gat", "--hidden", "4")
    assert (gat.model.hidden, gat.model.heads, gat.optimizer.lr) == (4, 8, 0.005)


def test_config_round_trip_reruns_the_same_job(tmp_path):
    """A run's JSON line fed back with --config is the same job (the same
    resolved config, accuracies and bytes); with --parts 1 on top, the same
    job on one rank, which exact training makes equal in accuracy."""
    first = run(["train", "--dataset", "synthetic", "--num-nodes", "600", "--parts", "2",
                       "--epochs", "4", "--no-progress", "--model", "sage", "--lr", "0.02",
                       "--halo", "exact,compress=fp16", "--eval-every", "2", "--seed", "3",
                       "--lr-schedule", "cosine,warmup=1", "--phases", "3=exact",
                       "--patience", "50"])
    (tmp_path / "run.json").write_text(first.stdout)
    again = run(["train", "--config", str(tmp_path / "run.json")])
    one = run(["train", "--config", str(tmp_path / "run.json"), "--parts", "1",
                     "--halo", "exact"])
    a, b, c = (last_json(out.stdout) for out in (first, again, one))
    assert a["config"] == b["config"]
    assert a["config"]["optimizer"] == {"lr": 0.02, "weight_decay": 5e-4,
                                        "schedule": "cosine,warmup=1"}
    assert a["config"]["strategy"] == {"name": "graph-parallel", "halo": "exact,compress=fp16",
                                       "phases": "3=exact", "pre_aggregate": None}
    assert a["config"]["evaluation"]["patience"] == 50 and a["stopped"] == "epochs"
    assert a["config"]["graph"]["seed"] == 3 and a["config"]["model"]["hidden"] == 16
    for key in ("test_acc", "val_acc", "best_epoch", "halo_bytes", "grad_bytes"):
        assert a[key] == b[key], key
    assert c["config"]["graph"]["parts"] == 1 and c["halo_bytes"] == 0 < a["halo_bytes"]
    assert c["config"]["strategy"]["halo"] == "exact"


def test_plan_prints_every_strategy_fastest_first_then_the_choice():
    from pyg_dist.cli import build_parser, parse_job
    from pyg_dist.config import Planned

    args = build_parser().parse_args(["train", "--strategy", "auto", "--accept", "stale"])
    assert parse_job(args).strategy == Planned(accept="stale")
    out = run(["plan", "--dataset", "synthetic", "--num-nodes", "400", "--parts", "2",
                     "--epochs", "50", "--accept", "compressed", "--no-progress", "--json"])
    lines = [json.loads(line) for line in out.stdout.strip().splitlines()]
    rows, choice = lines[:-1], lines[-1]
    seconds = [r["predicted_epoch_s"] for r in rows]
    assert seconds == sorted(seconds) and len(rows) >= 26
    assert [r["strategy"] for r in rows if r["chosen"]] == [choice["choice"]]
    # a row per grid of graph parts x feature slices
    assert {"feature-parallel 2x1", "feature-parallel 1x2"} <= {r["strategy"] for r in rows}
    assert choice["risk"] in ("exact", "compressed") and choice["epochs"] == 50
    # the job to train is the chosen row's strategy (which wins depends on the measured link)
    assert choice["train"]["strategy"]["name"] == choice["choice"].split()[0]


@pytest.mark.parametrize("command", ["plan", "layouts"])
def test_commands_that_take_homogeneous_graphs_refuse_a_heterogeneous_one(command):
    from pyg_dist.cli import main

    with pytest.raises(SystemExit, match="heterogeneous graph.*pyg-dist train --dataset "
                                         "synthetic-mag --model hetero-sage.hgt.rgcn"):
        main([command, "--dataset", "synthetic-mag"])


def test_convert_a_heterogeneous_dataset_then_partition_it_on_ranks(tmp_path, capsys):
    from pyg_dist.cli import main
    from pyg_dist.datasets import HeteroGraphFolder, synthetic_mag
    from pyg_dist.partitioning import read_meta, read_part

    graph, parts = tmp_path / "mag", tmp_path / "parts"
    assert main(["convert", "--dataset", "synthetic-mag", "--num-nodes", "300", "--out",
                 str(graph)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    data = synthetic_mag(num_nodes=300)
    assert summary["node_types"] == {t: data[t].num_nodes for t in data.node_types}
    assert summary["num_edges"] == data.num_edges
    back = HeteroGraphFolder.open(graph).to_data()
    for e in data.edge_types:
        assert torch.equal(back[e].edge_index, data[e].edge_index), e
    out = run(["partition", "--distributed", "--input", str(graph), "--parts", "2",
                     "--out", str(parts)])
    assert last_json(out.stdout)["num_parts"] == 2
    meta = read_meta(parts)
    assert meta.types.node_types == data.node_types
    assert meta.types.num_nodes == {t: data[t].num_nodes for t in data.node_types}
    paper = [read_part(parts, p, meta)["node_types"]["paper"] for p in range(2)]
    gid = torch.cat([p["graph"]["global_id"] for p in paper])
    assert torch.equal(torch.cat([p["attrs"]["y"] for p in paper])[gid.argsort()],
                       data["paper"].y)
    with pytest.raises(SystemExit, match="--dataset ogbn-mag needs --root"):
        main(["convert", "--dataset", "ogbn-mag", "--out", str(tmp_path / "m")])


def test_train_a_heterogeneous_graph(tmp_path):
    from pyg_dist.datasets import synthetic_mag

    out = run(["train", "--dataset", "synthetic-mag", "--num-nodes", "300", "--parts",
                     "2", "--epochs", "2", "--hidden", "8", "--no-progress"])
    a = last_json(out.stdout)
    assert KEYS <= a.keys() and a["epochs"] == 2 and a["parts"] == 2
    assert a["model"] == "hetero-sage" and a["node_type"] == "paper"
    assert a["halo_bytes_fwd"] > 0 and a["halo_bytes_bwd"] > 0 and a["grad_bytes"] > 0
    pyg_dist.partition(synthetic_mag(num_nodes=300), 2, tmp_path / "p")
    out = run(["train", "--parts-dir", str(tmp_path / "p"), "--model", "rgcn",
                     "--halo", "stale:2", "--epochs", "2", "--hidden", "8", "--no-progress"])
    b = last_json(out.stdout)
    assert b["model"] == "rgcn" and b["halo"] == "stale:2" and b["parts"] == 2
    assert 0 < b["halo_bytes_fwd"]


@pytest.mark.parametrize("argv, message", [
    (["--dataset", "synthetic-mag", "--model", "gcn"],
     "heterogeneous graph; use --model hetero-sage|hgt|rgcn (got --model gcn)"),
    (["--dataset", "synthetic", "--model", "hgt"],
     "--model hgt trains a heterogeneous graph; use --dataset synthetic-mag|ogbn-mag, or "
     "--model gcn|sage|gat|gin|gcn2|resgcn|ressage for --dataset synthetic"),
    (["--dataset", "synthetic-mag", "--strategy", "gradient-only"],
     "gradient-only regrouping clusters a homogeneous graph; train it with "
     "strategy=GraphParallel(halo=...) (CLI: --strategy graph-parallel"),
    (["--dataset", "synthetic-mag", "--model", "rgcn", "--strategy", "layer-pipeline",
      "--stages", "2"], "a layer pipeline splits a deep homogeneous model into stages; train "
     "it with strategy=GraphParallel(halo=...) (CLI: --strategy graph-parallel"),
    (["--dataset", "synthetic-mag", "--strategy", "auto"],
     "strategy='auto' ranks homogeneous strategies; let each layer choose its halo with "
     "strategy=GraphParallel(halo='auto') (CLI: --halo auto)"),
    (["--dataset", "synthetic-mag", "--pre-aggregate"],
     "pre-aggregation exchanges partial sums, which relations do not; leave pre_aggregate "
     "off"),
    (["--dataset", "synthetic-mag", "--model", "hgt", "--edge-dropout", "0.1"],
     "--edge-dropout applies to the models of pyg_dist.models.GNN, not to hgt"),
    (["--dataset", "synthetic-mag", "--dropout", "0.5"],
     "--model hetero-sage has no dropout (got --dropout 0.5)"),
    (["--dataset", "synthetic-mag", "--avg-degree", "5"],
     "--avg-degree does not apply to synthetic-mag"),
])
def test_train_refuses_what_a_heterogeneous_graph_cannot_take(argv, message):
    from pyg_dist.cli import main

    with pytest.raises(SystemExit, match=re.escape(message)):
        main(["train", *argv])


def test_a_heterogeneous_folder_needs_a_heterogeneous_model(tmp_path):
    from pyg_dist.cli import build_parser, parse_job
    from pyg_dist.cli.run import load_part
    from pyg_dist.datasets import synthetic_mag

    pyg_dist.partition(synthetic_mag(num_nodes=300), 1, tmp_path / "mag")
    pyg_dist.partition(synthetic(num_nodes=100), 1, tmp_path / "plain")
    job = parse_job(build_parser().parse_args(["train", "--model", "gat"]))
    with pytest.raises(SystemExit, match=re.escape(
            "holds a heterogeneous graph; use --model hetero-sage|hgt|rgcn (got --model gat)")):
        load_part(job, str(tmp_path / "mag"))
    job = parse_job(build_parser().parse_args(["train", "--parts-dir", str(tmp_path / "plain"),
                                               "--model", "hgt"]))
    with pytest.raises(SystemExit, match=re.escape(
            "holds a homogeneous one; use --model gcn|sage|gat|gin|gcn2|resgcn|ressage")):
        load_part(job, str(tmp_path / "plain"))


@pytest.mark.parametrize("name", ["graph-parallel", "pre-aggregated", "gradient-only",
                                  "layer-pipeline", "auto", "hetero"])
def test_configs_of_the_previous_release_are_the_same_jobs(name):
    """Each job the previous release wrote reads back as the job it was, and
    writes itself back unchanged."""
    from pyg_dist.cli.job import resolve

    earlier = json.loads((DATA / "configs" / "earlier_jobs.json").read_text())[name]
    job = resolve(earlier, {})
    assert job.to_dict() == earlier


@pytest.mark.parametrize("argv, message", [
    (["--parts", "6", "--slices", "4"],
     "pyg-dist train: --slices 4 does not divide the 6 ranks; the grid is ranks / slices graph "
     "parts x slices, so use --slices 1|2|3|6"),
    (["--slices", "2", "--model", "gat"],
     f"pyg-dist train: --strategy feature-parallel trains --model gcn|sage|gin (it runs "
     f"{FEATURE_PARALLEL_RUNS}); got --model gat"),
    (["--slices", "0"],
     "pyg-dist train: FeatureParallel(slices=0): slices must be an integer >= 1; it counts the "
     "ranks of a graph part"),
    (["--slices", "2", "--norm", "batch", "--skip"],
     "pyg-dist train: --strategy feature-parallel trains GNN without --norm, --skip; leave "
     "them out"),
])
def test_bad_slices_are_one_line_naming_the_fix_before_any_rank_starts(argv, message):
    from pyg_dist.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["train", "--strategy", "feature-parallel", "--dataset", "synthetic", *argv])
    assert str(exit_.value) == message
