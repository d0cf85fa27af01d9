"""``pyg-dist --help`` and ``pyg-dist train --help`` as a person reads them:
plain text with examples, the options a first run needs first, choice lists
wrapped between choices, per-model defaults said to be per model, a screen
at most."""
import re

import pytest

from pyg_dist.cli import build_parser, main
from pyg_dist.cli.help import asked_strategy, recipe_default, wrap
from pyg_dist.cli.job import RECIPES
from pyg_dist.config import STRATEGIES


def help_of(capsys, monkeypatch, argv):
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    return capsys.readouterr().out


def test_top_help_is_plain_text_with_two_examples(capsys, monkeypatch):
    text = help_of(capsys, monkeypatch, ["--help"])
    assert "``" not in text and "::" not in text and ":mod:" not in text
    examples = [line.strip() for line in text.splitlines() if line.startswith("  pyg-dist ")]
    assert examples == [
        "pyg-dist train --dataset cora --root tests/data --parts 2 --epochs 50",
        "pyg-dist plan --dataset synthetic --parts 4 --accept compressed"]
    for command in ("partition", "convert", "train", "plan", "layouts", "check"):
        assert re.search(rf"^  {command} +\S", text, re.M), command
    assert max(len(line) for line in text.splitlines()) <= 80


def test_train_help_leads_with_the_graph_and_model_and_fits_62_lines(capsys, monkeypatch):
    text = help_of(capsys, monkeypatch, ["train", "--help"])
    lines = text.splitlines()
    assert len(lines) <= 62, len(lines)
    flags = re.findall(r"^  (--[\w\-\[\]]+)", text, re.M)
    assert flags[:5] == ["--dataset", "--root", "--parts", "--parts-dir", "--model"]
    assert max(len(line) for line in lines) <= 80
    # the default strategy's options are there; the others' behind --strategy NAME --help
    assert "--halo" in flags and "--stages" not in flags and "--accept" not in flags
    assert "'pyg-dist" not in text or "--strategy NAME" in text
    for old in ("--mode", "--compress", "--no-input-cache", "--clusters-per-part"):
        assert not re.search(rf"(^|\s){old}(\s|,|$)", text, re.M), old


@pytest.mark.parametrize("strategy, flag", [("gradient-only", "--regroup-every"),
                                            ("layer-pipeline", "--stages"),
                                            ("auto", "--accept")])
def test_a_strategy_s_options_show_with_its_name(capsys, monkeypatch, strategy, flag):
    text = help_of(capsys, monkeypatch, ["train", "--strategy", strategy, "--help"])
    title = next(line for line in text.splitlines() if line.startswith(f"strategy: {strategy}"))
    assert title.endswith(":")
    assert re.search(rf"^  {flag} ", text, re.M)
    assert len(text.splitlines()) <= 70  # one strategy's options more
    assert asked_strategy(["train", "--help", f"--strategy={strategy}"], list(STRATEGIES)) \
        == strategy


def test_choice_lists_break_between_choices_never_inside_a_name(capsys, monkeypatch):
    text = help_of(capsys, monkeypatch, ["train", "--help"])
    joined = " ".join(line[24:] if line.startswith(" " * 24) else line
                      for line in text.splitlines())
    for name in ("ogbn-arxiv", "hetero-sage", "pipelined[:SMOOTHING]", "metis-coarse",
                 "[,compress=fp16"):
        assert name in joined, name
    for line in text.splitlines():
        assert not re.search(r"[\w\[]-$", line), line  # no name cut at a dash
    assert wrap("a|bb|ccc dd-ee", 5) == ["a|bb|", "ccc", "dd-ee"]
    assert wrap("x [,compress=a|b]", 12) == ["x", "[,compress=a|", "b]"]


def test_per_model_defaults_are_shown_as_such(capsys, monkeypatch):
    text = " ".join(help_of(capsys, monkeypatch, ["train", "--help"]).split())
    assert RECIPES["gat"]["lr"] == 0.005 and RECIPES["gcn"]["lr"] == 0.01
    assert "--lr LR Adam's learning rate (per model: 0.01; gat 0.005)" in text
    assert "--layers L layers (per model: 2; deep 16)" in text
    assert recipe_default("heads") == "per model: 1; gat 8; hetero 2"
    job = build_parser().parse_args(["train", "--model", "gat"])
    from pyg_dist.cli import parse_job

    assert parse_job(job).optimizer.lr == 0.005
