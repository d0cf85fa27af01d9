"""A job read from ``--config``: what the previous release wrote reads back as
the same job, and every bad key, section or field is refused, naming it, the
bad value and the fix, before any rank starts."""
import json

import pytest

from pyg_dist.cli import build_parser, main, parse_job, read_config
from pyg_dist.cli.job import Job, resolve
from pyg_dist.config import GradientOnly, GraphParallel, LayerPipeline, Planned

#: ``Job.to_dict()`` of a job that sets every section, as the previous
#: release wrote it (``pyg-dist train`` with the options of ``NON_DEFAULT``).
PREVIOUS_RELEASE = {
    "graph": {"dataset": "synthetic-arxiv", "root": None, "parts": 2, "method": "metis-coarse",
              "seed": 3, "num_nodes": 3000, "avg_degree": 8.0, "parts_dir": None},
    "model": {"name": "sage", "layers": 3, "hidden": 32, "heads": 1, "dropout": 0.25,
              "edge_dropout": 0.1},
    "epochs": 7,
    "strategy": {"name": "graph-parallel", "halo": "stale:2,compress=int8", "phases": "5=exact",
                 "pre_aggregate": False},
    "grad_sync": {"compress": "fp16"},
    "optimizer": {"lr": 0.02, "weight_decay": 0.0, "schedule": "cosine,warmup=2"},
    "evaluation": {"every": 2, "halo": "exact,compress=fp16", "target_acc": 0.9, "patience": 4,
                   "time_budget": 60.0, "from_training": False},
    "checkpoint": {"dir": "ckpt", "every": 2, "resume": True},
    "run": {"log_every": 3, "progress": False, "timeout": 120.0},
}
NON_DEFAULT = [
    "--dataset", "synthetic-arxiv", "--num-nodes", "3000", "--avg-degree", "8", "--parts", "2",
    "--method", "metis-coarse", "--seed", "3", "--model", "sage", "--layers", "3", "--hidden",
    "32", "--dropout", "0.25", "--edge-dropout", "0.1", "--epochs", "7", "--halo",
    "stale:2,compress=int8", "--phases", "5=exact", "--grad-compress", "fp16", "--lr", "0.02",
    "--weight-decay", "0", "--lr-schedule", "cosine,warmup=2", "--eval-every", "2",
    "--eval-halo", "exact,compress=fp16", "--target-acc", "0.9", "--patience", "4",
    "--time-budget", "60", "--checkpoint", "ckpt", "--checkpoint-every", "2", "--resume",
    "--log-every", "3", "--no-progress", "--timeout", "120",
]


def job_of(*args):
    return parse_job(build_parser().parse_args(["train", *args]))


def test_a_full_job_dict_reads_back_as_the_same_job():
    job = job_of(*NON_DEFAULT)
    # what the previous release wrote, but for pre-aggregation: not asked for,
    # it is now the graph's setting (None) rather than off (False), the same
    # for a graph the CLI loads
    now = {**PREVIOUS_RELEASE,
           "strategy": {**PREVIOUS_RELEASE["strategy"], "pre_aggregate": None}}
    assert job.to_dict() == now
    assert resolve(PREVIOUS_RELEASE, {}).to_dict() == PREVIOUS_RELEASE
    back = Job.from_dict(json.loads(json.dumps(job.to_dict())))
    assert back == job
    assert resolve(json.loads(json.dumps(job.to_dict())), {}) == job


@pytest.mark.parametrize("strategy", [
    GradientOnly(clusters_per_rank=3, regroup_every=5, regroup="random", correction="batch",
                 shrinkage=0.25, regroup_from="peers"),
    LayerPipeline(stages=2, chunks=2, initial_rows="recompute", halo="exact,compress=fp16"),
    Planned(accept="stale", probe_steps=2),
    GraphParallel(halo="auto", pre_aggregate=True),
], ids=lambda s: s.name)
def test_every_strategy_of_a_written_job_reads_back(strategy):
    values = {**PREVIOUS_RELEASE, "model": {**PREVIOUS_RELEASE["model"], "edge_dropout": 0.0},
              "strategy": {"name": strategy.name, **strategy.to_dict()}}
    if isinstance(strategy, LayerPipeline):
        values["model"] = {**values["model"], "name": "gcn2"}
    assert Job.from_dict(json.loads(json.dumps(values))).strategy == strategy


@pytest.mark.parametrize("write", [
    lambda job: json.dumps(job),  # a bare Job.to_dict()
    lambda job: "progress bar\n" + json.dumps({"test_acc": 0.5, "config": job}),  # a run's output
], ids=["job", "run-output"])
def test_a_written_config_file_reruns_the_same_job(tmp_path, write):
    path = tmp_path / "run.json"
    path.write_text(write(PREVIOUS_RELEASE))
    assert job_of("--config", str(path)) == job_of(*NON_DEFAULT, "--no-pre-aggregate")


@pytest.mark.parametrize("config, message", [
    ({"epoch": 3}, "Job has no key 'epoch'; its keys are graph, model, epochs, strategy, "
                   "grad_sync, optimizer, evaluation, checkpoint, run, post"),
    ([{"epochs": 3}], r"a job is a JSON object with keys graph, model"),
    ({"epochs": -5}, r"Job\(epochs=-5\): epochs must be an integer >= 1"),
    ({"epochs": "5"}, r"Job\(epochs='5'\): epochs must be an integer >= 1"),
    ({"graph": ["cora"]}, r"Job\(graph=\['cora'\]\): graph must be a JSON object of its "
                          r"fields, e.g. \"graph\": \{\"dataset\""),
    ({"checkpoint": "dir"}, r"Job\(checkpoint='dir'\): checkpoint must be a JSON object of its "
                            r"fields or null, e.g. \"checkpoint\": \{\"dir\": "),
    ({"strategy": None}, r"Job\(strategy=None\): strategy must be a JSON object"),
    ({"strategy": {"name": "graph-paralel"}}, "unknown strategy 'graph-paralel'; use one of "
                                              "graph-parallel, gradient-only"),
    ({"graph": {"name": "cora"}}, "Graph has no field 'name'; its fields are avg_degree, "
                                  "dataset"),
    ({"graph": {"seed": "x"}}, r"Graph\(seed='x'\): seed must be an integer, not str"),
    ({"graph": {"seed": -1}}, r"Graph\(seed=-1\): seed must be an integer >= 0"),
    ({"graph": {"parts": True}}, r"Graph\(parts=True\): parts must be an integer or None, "
                                 r"not bool"),
    ({"graph": {"num_nodes": 0}}, r"Graph\(num_nodes=0\): num_nodes must be an integer >= 1"),
    ({"graph": {"avg_degree": 0}}, r"Graph\(avg_degree=0\): give edges per node > 0"),
    ({"graph": {"parts_dir": ""}}, r"Graph\(parts_dir=''\): name a folder"),
    ({"model": {"hidden": "64"}}, r"Model\(hidden='64'\): hidden must be an integer or None, "
                                  r"not str"),
    ({"model": {"layers": 0}}, r"Model\(layers=0\): layers must be an integer >= 1"),
    ({"model": {"heads": 0}}, r"Model\(heads=0\): heads must be an integer >= 1"),
    ({"model": {"dropout": 1.0}}, r"Model\(dropout=1.0\): dropout is the fraction dropped, in "
                                  r"\[0, 1\)"),
    ({"model": {"edge_dropout": 3.0}}, r"Model\(edge_dropout=3.0\): edge_dropout is the "
                                       r"fraction dropped"),
    ({"model": {"norm": "group"}}, r"Model\(norm='group'\): use one of batch, layer, or None"),
    ({"model": {"jk": "lstm"}}, r"Model\(jk='lstm'\): use one of cat, max, or None"),
    ({"model": {"input_dropout": 1.5}}, r"Model\(input_dropout=1.5\): input_dropout is the "
                                        r"fraction dropped"),
    ({"model": {"name": "gcn2", "labels_as_input": True, "jk": "cat"}},
     r"--jk, --labels-as-input apply to the models of pyg_dist.models.GNN, not to gcn2; leave "
     r"them out or use --model gcn\|sage\|gat\|gin"),
    ({"post": "cs"}, r"Job\(post='cs'\): post must be a JSON object of its fields or null, e.g. "
                     r"\"post\": \{\"name\": \"cs\"\}"),
    ({"post": {"correction_layers": 3}}, r"Job\(post=\{'correction_layers': 3\}\): name the "
                                         r"step, \{\"name\": 'cs', ...fields\}, or write null"),
    ({"post": {"name": "cs", "layers": 3}}, r"CorrectSmooth has no field 'layers'; its fields "
                                            r"are autoscale, correction_alpha"),
    ({"post": {"name": "cs", "smoothing_alpha": 2}}, r"CorrectSmooth\(smoothing_alpha=2\): use a "
                                                     r"number in \[0, 1\]"),
    ({"run": {"timeout": -1}}, r"Run\(timeout=-1\): give seconds > 0, or None"),
    ({"run": {"log_every": -1}}, r"Run\(log_every=-1\): log_every must be an integer >= 0"),
    ({"run": {"progress": "yes"}}, r"Run\(progress='yes'\): progress must be True or False, "
                                   r"not str"),
    ({"strategy": {"name": "gradient-only", "halo": "exact"}},
     "GradientOnly has no field 'halo'; its fields are clusters_per_rank, correction"),
    ({"strategy": {"pre_aggregate": "yes"}}, r"GraphParallel\(pre_aggregate='yes'\)"),
    ({"optimizer": {"schedule": {"kindd": "cosine"}}},
     r"Adam\(schedule=\{'kindd': 'cosine'\}\): LRSchedule has no field 'kindd'; its fields are "
     r"factor, kind, min_lr, patience, warmup"),
    ({"optimizer": {"schedule": {"kind": "cosine", "warmup": "3"}}},
     r"LRSchedule\(warmup='3'\): warmup must be an integer, not str"),
    ({"evaluation": {"every": "2"}}, r"Evaluation\(every='2'\): every must be an integer"),
    ({"grad_sync": {"compress": 8}}, r"GradSync\(compress=8\): compress must be a string or "
                                     r"None, not int"),
])
def test_a_bad_config_names_the_key_or_field_the_value_and_the_fix(config, message):
    with pytest.raises(ValueError, match=message):
        resolve(config, {})
    with pytest.raises(ValueError, match=message):
        Job.from_dict(config)


def test_train_refuses_a_bad_config_in_one_line_before_any_rank_starts(tmp_path, monkeypatch):
    def started(*args, **kwargs):
        raise AssertionError("a rank started")

    monkeypatch.setattr("pyg_dist.cli.train_command", started)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"graph": {"num_nodes": 200}, "epoch": 3}))
    with pytest.raises(SystemExit) as exc:
        main(["train", "--config", str(path)])
    assert str(exc.value) == ("pyg-dist train: Job has no key 'epoch'; its keys are graph, "
                              "model, epochs, strategy, grad_sync, optimizer, evaluation, "
                              "checkpoint, run, post")
    with pytest.raises(SystemExit, match=r"^pyg-dist train: Model\(layers=0\): layers must be "
                                         r"an integer >= 1"):
        main(["train", "--layers", "0"])


def test_the_output_of_plan_is_no_job(tmp_path):
    path = tmp_path / "plan.out"
    rows = [{"strategy": "graph-parallel exact", "chosen": True},
            {"choice": "graph-parallel exact", "strategy": "graph-parallel exact",
             "epochs": 5, "train": {"strategy": {"name": "graph-parallel"}}}]
    path.write_text("\n".join(map(json.dumps, rows)))
    with pytest.raises(ValueError, match="holds the output of 'pyg-dist plan', which names no "
                                         "graph; train with the options given"):
        read_config(str(path))
    path.write_text(json.dumps({"test_acc": 0.5, "config": None}))
    with pytest.raises(ValueError, match="'config' holds None, not a job's JSON object"):
        read_config(str(path))


def test_post_and_recipe_flags_spell_the_job_sections():
    job = job_of("--model", "sage", "--norm", "batch", "--jk", "cat", "--skip", "--residual",
                 "--input-dropout", "0.1", "--labels-as-input", "--post",
                 "cs,correction_layers=3,autoscale=false,scale=2")
    assert job.to_dict()["model"] == {
        "name": "sage", "layers": 2, "hidden": 16, "heads": 1, "dropout": 0.5,
        "edge_dropout": 0.0, "input_dropout": 0.1, "norm": "batch", "residual": True,
        "jk": "cat", "skip": True, "labels_as_input": True}
    assert job.to_dict()["post"] == {"name": "cs", "correction_layers": 3,
                                     "correction_alpha": 0.8, "smoothing_layers": 50,
                                     "smoothing_alpha": 0.8, "autoscale": False, "scale": 2.0}
    assert job.post.spec() == "cs,correction_layers=3,autoscale=false,scale=2.0"
    assert Job.from_dict(json.loads(json.dumps(job.to_dict()))) == job
    assert job_of("--post", "cs").post.spec() == "cs"
    # a job without them writes neither the recipe options nor a post section
    plain = job_of("--model", "sage").to_dict()
    assert "post" not in plain and "norm" not in plain["model"]
    # a config's step is replaced, not merged, by --post; none removes it
    base = job.to_dict()
    assert resolve(base, {"post": {"spec": "cs,smoothing_layers=4"}}).post.spec() == \
        "cs,smoothing_layers=4"
    assert resolve(base, {"post": {"spec": "none"}}).post is None


def test_a_named_recipe_fills_what_is_not_given_and_reads_back():
    job = job_of("--model", "sage", "--recipe", "ogb")
    model = job.to_dict()["model"]
    assert (model["recipe"], model["layers"], model["hidden"], model["dropout"],
            model["input_dropout"]) == ("ogb", 2, 256, 0.5, 0.0)
    assert (job.optimizer.lr, job.optimizer.weight_decay) == (0.01, 0.0)
    assert job.model.options()["input_dropout"] == 0.0  # what the ranks build GNN with
    assert Job.from_dict(json.loads(json.dumps(job.to_dict()))) == job
    # what is given wins over the named recipe, as over the published one
    given = job_of("--model", "gcn", "--recipe", "ogb", "--hidden", "64", "--input-dropout",
                   "0.2", "--weight-decay", "5e-4")
    assert (given.model.hidden, given.model.input_dropout, given.optimizer.weight_decay) == \
        (64, 0.2, 5e-4)
    # the published recipe is the default, and a job without --recipe writes none
    plain = job_of("--model", "sage")
    assert "recipe" not in plain.to_dict()["model"] and plain.model.input_dropout is None
    assert (plain.model.hidden, plain.optimizer.weight_decay) == (16, 5e-4)


@pytest.mark.parametrize("args, message", [
    (["--recipe", "ogb", "--model", "gat"],
     "--recipe ogb is made for --model gcn|sage, not gat; leave --recipe out for gat's "
     "published recipe"),
    (["--post", "lp"], "--post lp: use none or one of cs, e.g. --post cs,correction_layers=20"),
    (["--post", "cs,foo=1"], "--post cs,foo=1: bad post-processing step 'cs,foo=1': 'foo=1' is "
                             "not KEY=VALUE with KEY one of correction_layers, correction_alpha, "
                             "smoothing_layers, smoothing_alpha, autoscale, scale"),
    (["--post", "cs,correction_layers=x"], "--post cs,correction_layers=x: bad "
                                           "post-processing step 'cs,correction_layers=x': "
                                           "correction_layers takes a number, got 'x'"),
    (["--post", "cs,autoscale=maybe"], "--post cs,autoscale=maybe: bad post-processing step "
                                       "'cs,autoscale=maybe': autoscale takes true or false, "
                                       "got 'maybe'"),
    (["--post", "cs", "--model", "gcn2", "--strategy", "layer-pipeline"],
     "--post cs propagates over a homogeneous graph with a part per rank; leave it out for "
     "--strategy layer-pipeline"),
    (["--post", "cs", "--dataset", "synthetic-mag"],
     "--post cs propagates over a homogeneous graph with a part per rank; leave it out for a "
     "heterogeneous graph"),
    (["--norm", "batch", "--model", "gcn2"],
     "--norm applies to the models of pyg_dist.models.GNN, not to gcn2; leave it out or use "
     "--model gcn|sage|gat|gin"),
    (["--labels-as-input", "--strategy", "gradient-only"],
     "cannot train a model that reads labels as input: its steps read the graph's features "
     "alone; train it with strategy=GraphParallel(halo=...) (CLI: --strategy graph-parallel)"),
])
def test_bad_post_and_recipe_flags_are_refused_in_one_line(args, message):
    with pytest.raises(SystemExit) as exc:
        main(["train", *args])
    assert str(exc.value).startswith("pyg-dist train: ")
    assert str(exc.value).endswith(message), str(exc.value)


@pytest.mark.parametrize("spelled,name", [("Cora", "cora"), ("PubMed", "pubmed"),
                                          ("OGBN-Papers100m", "ogbn-papers100M"),
                                          ("Synthetic-Arxiv", "synthetic-arxiv")])
def test_dataset_names_are_taken_in_any_case(tmp_path, spelled, name):
    args = build_parser().parse_args(["train", "--dataset", spelled])
    assert parse_job(args).graph.dataset == name
    config = tmp_path / "job.json"
    config.write_text(json.dumps({"graph": {"dataset": spelled}}))
    assert parse_job(build_parser().parse_args(["train", "--config", str(config)])
                     ).graph.dataset == name


def test_load_dataset_takes_pyg_spelling():
    from pyg_dist.datasets import load_dataset

    assert load_dataset("Cora", root="tests/data").num_nodes == 2708
