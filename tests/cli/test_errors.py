"""Every error a user of ``pyg-dist`` can cause ends in one line naming the
flag that fixes it, with exit status 2, no traceback, and nothing written;
the checks that need no graph run before one loads. ``--debug`` (or
``PYG_DIST_DEBUG=1``) shows the traceback; Ctrl-C ends in one line."""
import os
import shutil
import subprocess
import sys

import pytest
from graphs import CORA_RAW

from pyg_dist.cli import main, run
from pyg_dist.cli.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, reporting

CLI = [sys.executable, "-m", "pyg_dist.cli"]


def fails(capsys, argv):
    """Runs ``pyg-dist ARGV``; returns what it printed on stderr, after
    checking the exit status is 2 and stdout is empty."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert "Traceback" not in err
    return err


def files_under(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_partition_into_an_existing_folder_names_overwrite(tmp_path, capsys, nothing_runs):
    out = tmp_path / "parts"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    err = fails(capsys, ["partition", "--dataset", "synthetic", "--parts", "2",
                         "--out", str(out)])
    assert err == (f"pyg-dist partition: --out {out} exists; pass --overwrite to replace it, "
                   f"or name a new folder\n")
    assert files_under(tmp_path) == ["parts", "parts/mine.txt"]


def test_convert_into_an_existing_folder_names_overwrite(tmp_path, capsys, nothing_runs):
    (tmp_path / "graph").mkdir()
    err = fails(capsys, ["convert", "--dataset", "synthetic", "--out", str(tmp_path / "graph")])
    assert err == (f"pyg-dist convert: --out {tmp_path / 'graph'} exists; pass --overwrite to "
                   f"replace it, or name a new folder\n")
    assert files_under(tmp_path) == ["graph"]


@pytest.mark.parametrize("command", ["train", "plan"])
def test_a_missing_parts_dir_is_named(tmp_path, capsys, nothing_runs, command):
    folder = tmp_path / "nowhere"
    err = fails(capsys, [command, "--parts-dir", str(folder)])
    assert err == (f"pyg-dist {command}: --parts-dir {folder}: no such folder; cut one with "
                   f"'pyg-dist partition --dataset NAME --parts P --out {folder}', or leave "
                   f"--parts-dir out to cut the graph for this run\n")
    assert files_under(tmp_path) == []


def test_a_folder_that_is_no_partition_is_named(tmp_path, capsys, nothing_runs):
    err = fails(capsys, ["train", "--parts-dir", str(tmp_path)])
    assert err == (f"pyg-dist train: --parts-dir {tmp_path} is not a partition folder (no "
                   f"meta.json); cut one with 'pyg-dist partition --dataset NAME --parts P "
                   f"--out {tmp_path}', or leave --parts-dir out to cut the graph for this "
                   f"run\n")


def test_parts_that_do_not_fit_the_folder_are_named(tmp_path, capsys, monkeypatch):
    from pyg_dist.datasets import synthetic
    from pyg_dist.partitioning import partition

    partition(synthetic(num_nodes=60, seed=0), 2, tmp_path / "p", method="random")
    monkeypatch.setattr(run.pyg_dist, "launch", pytest.fail)
    err = fails(capsys, ["train", "--parts-dir", str(tmp_path / "p"), "--parts", "3"])
    assert err == (f"pyg-dist train: --parts 3 does not fit --parts-dir {tmp_path / 'p'}, cut "
                   f"into 2 parts for 2 ranks; leave --parts out, or cut the graph again with "
                   f"'pyg-dist partition --parts 3'\n")


@pytest.mark.parametrize("command", ["train", "partition", "plan"])
def test_a_dataset_missing_under_root_is_never_downloaded(tmp_path, capsys, nothing_runs,
                                                          command):
    argv = [command, "--dataset", "cora", "--root", str(tmp_path / "data")]
    if command == "partition":
        argv += ["--out", str(tmp_path / "parts")]
    err = fails(capsys, argv)
    assert err == (f"pyg-dist {command}: --dataset cora: no ind.cora.x and 7 more in "
                   f"{tmp_path / 'data' / 'Cora' / 'raw'}; put Planetoid's raw files there, or "
                   f"pass the --root that holds Cora/raw (a clone: --root tests/data); nothing "
                   f"is downloaded\n")
    assert files_under(tmp_path) == []  # no data/Cora/raw left behind


def test_a_dataset_missing_one_raw_file_names_it(tmp_path, capsys, nothing_runs):
    raw = tmp_path / "Cora" / "raw"
    shutil.copytree(CORA_RAW, raw)
    (raw / "ind.cora.graph").unlink()
    err = fails(capsys, ["train", "--dataset", "cora", "--root", str(tmp_path)])
    assert err.startswith(f"pyg-dist train: --dataset cora: no ind.cora.graph in {raw}; ")


def test_a_planetoid_dataset_needs_root(capsys, nothing_runs):
    err = fails(capsys, ["train", "--dataset", "citeseer"])
    assert err == ("pyg-dist train: --dataset citeseer reads CiteSeer/raw under --root DIR; "
                   "pass --root (a clone holds Cora's: --root tests/data)\n")


def test_an_ogb_dataset_missing_under_root_is_named(tmp_path, capsys, nothing_runs):
    err = fails(capsys, ["train", "--dataset", "ogbn-arxiv", "--root", str(tmp_path)])
    assert err == (f"pyg-dist train: --dataset ogbn-arxiv: no ogbn_arxiv/raw in --root "
                   f"{tmp_path}; pyg_dist does not download: fetch it with OGB on a machine "
                   f"with internet (docs/partitioning.md#datasets) and pass the folder holding "
                   f"ogbn_arxiv/\n")
    assert files_under(tmp_path) == []


def test_partition_distributed_names_a_missing_input(tmp_path, capsys, nothing_runs):
    err = fails(capsys, ["partition", "--distributed", "--input", str(tmp_path / "g"),
                         "--out", str(tmp_path / "p")])
    assert err == (f"pyg-dist partition: --input {tmp_path / 'g'}: no such folder; write one "
                   f"with 'pyg-dist convert --dataset NAME --out {tmp_path / 'g'}'\n")
    assert files_under(tmp_path) == []


def test_the_planetoid_loader_itself_never_downloads(tmp_path):
    from pyg_dist.datasets import load_dataset

    with pytest.raises(FileNotFoundError, match="8 of its 8 raw files are missing"):
        load_dataset("cora", root=tmp_path)
    assert files_under(tmp_path) == []


def test_any_other_error_is_one_line_and_a_hint_and_debug_shows_the_traceback(capsys,
                                                                           monkeypatch):
    def broken():
        raise RuntimeError("the kernel broke\nsecond line")

    assert reporting("train", broken) == EXIT_FAILED
    assert capsys.readouterr().err == (
        "pyg-dist train: RuntimeError: the kernel broke\n"
        "(run again with --debug (or PYG_DIST_DEBUG=1) to see the traceback)\n")
    monkeypatch.setenv("PYG_DIST_DEBUG", "1")
    assert reporting("train", broken) == EXIT_FAILED
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert err.endswith("pyg-dist train: RuntimeError: the kernel broke\n"
                        "(run again with --debug (or PYG_DIST_DEBUG=1) to see the traceback)\n")


def test_a_failure_on_some_ranks_is_one_line_that_carries_the_rank_s_own_message(capsys):
    """The headline of a failure on several ranks ends in ':' and lists the
    ranks below it; the one line carries the first rank's own message."""
    def failed_on_a_rank():
        raise ValueError("'DistData.load' of 'p' failed on 2 of 4 ranks:\n"
                         "  rank 1 on a: ValueError: part_1.pt is damaged; re-create it\n"
                         "  rank 3 on b: ValueError: part_3.pt is damaged; re-create it")

    assert reporting("train", failed_on_a_rank) == EXIT_FAILED
    assert capsys.readouterr().err.splitlines()[0] == (
        "pyg-dist train: ValueError: 'DistData.load' of 'p' failed on 2 of 4 ranks: rank 1 on "
        "a: ValueError: part_1.pt is damaged; re-create it (and 1 more)")


def test_a_damaged_part_on_one_of_two_ranks_names_the_file_and_the_fix(tmp_path):
    """A part file with flipped bytes, 2 ranks: the command's one line
    names the file and how to fix it, without --debug."""
    from graphs import awkward_graph

    import pyg_dist

    pyg_dist.partition(awkward_graph(num_features=4), 2, tmp_path / "p")
    part = tmp_path / "p" / "part_1.pt"
    raw = bytearray(part.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    part.write_bytes(bytes(raw))
    done = subprocess.run(CLI + ["train", "--parts-dir", str(tmp_path / "p"), "--epochs", "1"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    first = done.stderr.strip().splitlines()[-2]
    assert done.returncode == EXIT_FAILED, done.stderr[-2000:]
    assert "failed on 1 of 2 ranks: rank 1 on " in first, done.stderr[-2000:]
    assert ("part_1.pt does not match the checksum in meta.json); re-create the folder with "
            "pyg_dist.partition") in first


def test_ctrl_c_is_one_line(capsys):
    def interrupted():
        raise KeyboardInterrupt

    assert reporting("train", interrupted, bar=True) == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "\npyg-dist train: interrupted (Ctrl-C)\n"


def test_the_command_line_exits_2_without_a_traceback_and_debug_shows_it(tmp_path):
    argv = CLI + ["train", "--parts-dir", str(tmp_path / "nowhere")]
    plain = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 2 and plain.stdout == ""
    assert plain.stderr.startswith(f"pyg-dist train: --parts-dir {tmp_path / 'nowhere'}: no "
                                   f"such folder;") and plain.stderr.count("\n") == 1
    debug = subprocess.run(argv + ["--debug"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYG_DIST_DEBUG": ""})
    assert debug.returncode == 2
    assert debug.stderr.startswith("Traceback (most recent call last):")
    assert debug.stderr.endswith(plain.stderr)


def test_ctrl_c_during_training_ends_in_one_line_without_a_traceback(tmp_path):
    """SIGINT to the whole process group (as a terminal's Ctrl-C) once the
    ranks train: one line after the last, status 130, no traceback from any
    rank. (stderr is a pipe here: plain lines, no bar.)"""
    import select
    import signal
    import time

    proc = subprocess.Popen(
        CLI + ["train", "--dataset", "synthetic", "--num-nodes", "300", "--parts", "2",
               "--epochs", "100000", "--log-every", "1"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True, cwd=tmp_path,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen, deadline = b"", time.time() + 240
    while b"epoch    2  loss" not in seen and time.time() < deadline:
        if select.select([proc.stderr], [], [], 1)[0]:
            seen += os.read(proc.stderr.fileno(), 65536)
    assert b"epoch    2  loss" in seen, seen.decode()[-2000:]
    os.killpg(proc.pid, signal.SIGINT)
    out, rest = proc.communicate(timeout=120)
    err = (seen + rest).decode()
    assert proc.returncode == EXIT_INTERRUPTED, err[-2000:]
    assert out == b"" and "Traceback" not in err and "KeyboardInterrupt" not in err
    message = ("pyg-dist train: interrupted (Ctrl-C); every rank was stopped. No checkpoint is "
               "configured, so a rerun starts at epoch 1 (add --checkpoint DIR to resume after "
               "a stop)\n")
    # on a line of its own below the last epoch's, with no blank line and no bar between
    assert "\r" not in err
    assert err.endswith(" s\n" + message), err[-500:]


def test_a_misspelled_option_names_the_command_and_the_closest_option(capsys):
    err = fails(capsys, ["train", "--dataset", "cora", "--hiden", "32"])
    assert err == ("usage: pyg-dist train [-h] [--config FILE] [options]\n"
                   "pyg-dist train: error: unrecognized arguments: --hiden 32; did you mean "
                   "--hidden?\n")
    err = fails(capsys, ["partition", "--out", "p", "--partz=3", "--sed", "1"])
    assert err.endswith("pyg-dist partition: error: unrecognized arguments: --partz=3 --sed 1; "
                        "did you mean --parts or --seed?\n"), err
    err = fails(capsys, ["train", "--zzzzz"])  # nothing close: argparse's words alone
    assert err.endswith("pyg-dist train: error: unrecognized arguments: --zzzzz\n"), err


def test_a_cut_off_config_names_where_its_json_breaks(tmp_path, capsys, nothing_runs):
    job = tmp_path / "run.json"
    job.write_text('{"graph": {"dataset": "cora", "root": "tests/data"},\n "model": {"name": 1')
    err = fails(capsys, ["train", "--config", str(job)])
    assert err == (f"pyg-dist train: --config {job}: the JSON breaks at line 2, column 21 "
                   f"(Expecting ',' delimiter; the file ends inside it: it looks cut off); give "
                   f"a job's JSON, or a run's output whose last line is its whole JSON line\n")
    # a run's output (log lines, then its JSON line) whose JSON line was cut
    job.write_text('cut synthetic into 2 parts\n{"epochs": 3, "config": {"graph"')
    err = fails(capsys, ["train", "--config", str(job)])
    assert err.startswith(f"pyg-dist train: --config {job}: the JSON breaks at line 2, column "
                          f"33 (Expecting ':' delimiter; the file ends inside it"), err


def test_parts_that_do_not_fit_torchrun_are_one_line_said_once(tmp_path):
    """Under torchrun every rank finds it alike: rank 0 says it, before any
    rank joins the group, and it is the root cause torchrun's summary shows
    (torchrun's own report of the failed job follows; no rank's traceback)."""
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                "--master-addr", "127.0.0.1", "--master-port", str(port), "-m", "pyg_dist.cli"]
    proc = subprocess.run(torchrun + ["train", "--dataset", "synthetic", "--num-nodes", "300",
                                      "--parts", "4", "--epochs", "2"],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    line = ("pyg-dist train: --parts 4 but torchrun started 2 ranks (--nnodes times "
            "--nproc-per-node); pass --parts 2 (or leave it out), or start 4 ranks")
    assert proc.returncode != 0 and proc.stdout == ""
    said = proc.stderr.splitlines()
    assert said.count(line) == 1, proc.stderr
    assert f"  traceback : {line}" in said, proc.stderr  # torchrun's root cause
    assert "ValueError" not in proc.stderr and "pyg_dist/cli" not in proc.stderr, proc.stderr
