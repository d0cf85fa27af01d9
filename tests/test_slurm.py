"""scripts/slurm.sbatch's per-node command (scripts/slurm_node.sh) with
SLURM's variables set by hand: the rendezvous from them, and two "nodes"
(processes on 127.0.0.1, one rank each) that train, stop on SIGUSR1 (what
``#SBATCH --signal=USR1@120`` sends) after the same epoch with their
checkpoint saved, and resume from it when started again."""
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pyg_dist
from pyg_dist.datasets import load_dataset
from pyg_dist.testing import withNamespaces

ROOT = Path(__file__).resolve().parents[1]
NODE = ["bash", str(ROOT / "scripts" / "slurm_node.sh")]
SBATCH = ROOT / "scripts" / "slurm.sbatch"


def slurm_env(node, nnodes=2, nodelist="127.0.0.1", **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_"))}
    env.update(SLURM_JOB_NODELIST=nodelist, SLURM_NNODES=str(nnodes), SLURM_NODEID=str(node),
               SLURM_JOB_ID="4242", PYTHON=sys.executable, **extra)
    return env


def dry_run(nodelist, node=1, **extra):
    env = slurm_env(node, nodelist=nodelist, DRY_RUN="1", **extra)
    env["PATH"] = "/usr/bin:/bin"  # no scontrol: the script's own reading of the list
    proc = subprocess.run(NODE + ["--epochs", "3"], env=env, capture_output=True, text=True,
                          timeout=30, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


@pytest.mark.parametrize("nodelist,master", [("127.0.0.1", "127.0.0.1"),
                                             ("gpu07,gpu11", "gpu07"),
                                             ("node[01-04,07],login1", "node01")])
def test_the_rendezvous_comes_from_slurm_variables(nodelist, master):
    said = dry_run(nodelist, RANKS_PER_NODE="4")
    assert f"node 1 of 2, 4 ranks, master {master}:24242: " in said, said
    assert (f"--nnodes 2 --node-rank 1 --nproc-per-node 4 --master-addr {master} "
            f"--master-port 24242 --signals-to-handle SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1 "
            f"--shutdown-timeout 100 -m pyg_dist.cli train --epochs 3") in said, said


def test_missing_slurm_variables_are_named():
    env = slurm_env(0)
    del env["SLURM_NNODES"], env["SLURM_NODEID"]
    proc = subprocess.run(NODE, env=env, capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr == ("slurm_node.sh: SLURM_NNODES SLURM_NODEID not set; run it under "
                           "SLURM (srun, from scripts/slurm.sbatch), or set them by hand\n")


def test_the_sbatch_script_asks_for_the_warning_and_runs_the_node_command():
    text = SBATCH.read_text()
    assert "\n#SBATCH --signal=USR1@120\n" in text
    assert re.search(r"\nsrun --ntasks-per-node=1 .*bash scripts/slurm_node.sh \\\n.*"
                     r"--checkpoint \"\$CHECKPOINTS\" .*\n\s+--resume", text), text
    proc = subprocess.run(["bash", "-n", str(SBATCH)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nodes(work, args):
    port = str(free_port())
    return [subprocess.Popen(NODE + args, env=slurm_env(node, MASTER_PORT=port), cwd=work,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
            for node in (0, 1)]


def finish(nodes, timeout=120):
    outs = [p.communicate(timeout=timeout) for p in nodes]
    return [(p.returncode, out.decode(), err.decode()) for p, (out, err) in zip(nodes, outs)]


def test_two_nodes_stop_on_sigusr1_with_a_checkpoint_and_resume(tmp_path):
    pyg_dist.partition(load_dataset("synthetic", num_nodes=300), 2, tmp_path / "parts")
    args = ["--parts-dir", "parts", "--checkpoint", "ckpt", "--checkpoint-every", "100000",
            "--resume", "--no-progress", "--log-every", "1", "--hidden", "8"]
    nodes = start_nodes(tmp_path, args + ["--epochs", "100000"])
    try:
        log, deadline = b"", time.time() + 120
        while b"epoch    3  loss" not in log and time.time() < deadline:
            if select.select([nodes[0].stderr], [], [], 1)[0]:
                log += os.read(nodes[0].stderr.fileno(), 65536)
        assert b"epoch    3  loss" in log, log.decode()[-3000:]
        for node in nodes:  # SLURM signals every node's step
            os.kill(node.pid, signal.SIGUSR1)
        (code0, _, err0), (code1, _, err1) = finish(nodes)
    finally:  # the node's whole session: torchrun and its ranks
        for node in nodes:
            try:
                os.killpg(node.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    err0 = log.decode() + err0
    stopped = re.search(r"pyg_dist: stopped by SIGUSR1 \(to 2 of 2 ranks\) after epoch (\d+) of "
                        r"100000", err0)
    assert stopped, err0[-3000:]
    assert code0 != 0 and code1 != 0  # torchrun ends on the signal it passed on
    assert "closing signal SIGUSR1" in err0 and "closing signal SIGUSR1" in err1, err1[-3000:]
    epoch = int(stopped.group(1))
    assert json.loads((tmp_path / "ckpt" / "latest.json").read_text())["epoch"] == epoch

    nodes = start_nodes(tmp_path, args + ["--epochs", str(epoch + 2)])
    (code0, out0, err0), (code1, out1, err1) = finish(nodes)
    assert code0 == 0 and code1 == 0, err0[-3000:] + err1[-3000:]
    assert f"resuming from the checkpoint of epoch {epoch} in 'ckpt'" in err0, err0[-3000:]
    result = json.loads(out0.strip().splitlines()[-1])
    assert result["epochs"] == epoch + 2 and result["parts"] == 2
    assert out1 == ""  # the JSON line is rank 0's


@withNamespaces
def test_the_node_command_on_two_testbed_hosts_stops_on_sigusr1_and_resumes(tmp_path):
    """The same on two hosts of the namespace testbed (their own addresses and
    hostnames, SLURM_JOB_NODELIST naming them): the rendezvous goes to the
    first host by name, both stop after the same epoch on SIGUSR1 with the
    checkpoint saved, and the same command resumes from it."""
    from pyg_dist.testing.cluster import Cluster

    pyg_dist.partition(load_dataset("synthetic", num_nodes=300), 2, tmp_path / "parts")
    args = ["--parts-dir", str(tmp_path / "parts"), "--checkpoint", str(tmp_path / "ckpt"),
            "--checkpoint-every", "100000", "--resume", "--no-progress", "--log-every", "1",
            "--hidden", "8"]
    with Cluster(hosts=2) as testbed:
        nodelist = ",".join(host.name for host in testbed.hosts)

        def start(epochs):
            return [testbed.spawn(host, NODE + args + ["--epochs", str(epochs)],
                                  env={"SLURM_JOB_NODELIST": nodelist, "SLURM_NNODES": "2",
                                       "SLURM_NODEID": str(host.index), "SLURM_JOB_ID": "4242",
                                       "PYTHON": sys.executable},
                                  cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                    for host in testbed.hosts]

        nodes = start(100000)
        log, deadline = b"", time.time() + 120
        while b"epoch    3  loss" not in log and time.time() < deadline:
            if select.select([nodes[0].stderr], [], [], 1)[0]:
                log += os.read(nodes[0].stderr.fileno(), 65536)
        assert b"epoch    3  loss" in log, log.decode()[-3000:]
        for node in nodes:
            os.kill(node.pid, signal.SIGUSR1)
        (_, _, err0), (_, _, err1) = finish(nodes)
        err0 = log.decode() + err0
        assert f"master {testbed.hosts[0].name}:" in err0, err0[-3000:]
        stopped = re.search(r"stopped by SIGUSR1 \(to 2 of 2 ranks\) after epoch (\d+) of 100000",
                            err0)
        assert stopped, err0[-3000:] + err1[-3000:]
        epoch = int(stopped.group(1))
        assert json.loads((tmp_path / "ckpt" / "latest.json").read_text())["epoch"] == epoch
        (code0, out0, err0), (code1, _, err1) = finish(start(epoch + 2))
        assert code0 == 0 and code1 == 0, err0[-3000:] + err1[-3000:]
        assert f"resuming from the checkpoint of epoch {epoch}" in err0, err0[-3000:]
        assert json.loads(out0.strip().splitlines()[-1])["epochs"] == epoch + 2
