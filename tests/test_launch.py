"""pyg_dist.launch: results in rank order, a failing rank's error re-raised, a
killed rank or a hang turned into an error instead of a hang."""
import os
import time

import pytest
import torch
import torch.distributed as dist

import pyg_dist


def rank_info(offset):
    t = torch.tensor([dist.get_rank() + offset])
    dist.all_reduce(t)
    return dist.get_rank(), dist.get_world_size(), int(t), os.environ["MASTER_ADDR"]


def raise_on_rank_one():
    if dist.get_rank() == 1:
        raise KeyError("bad key on rank one")
    dist.barrier()  # the other rank waits here until it is stopped
    return "unreachable"


def load_parts_cut_for_another_world(folder):
    pyg_dist.DistData.load(folder)


def killed_rank():
    if dist.get_rank() == 1:
        os.kill(os.getpid(), 9)
    dist.barrier()
    return "unreachable"


def sleeper():
    time.sleep(120)


def test_launch_returns_every_rank_in_order():
    results = pyg_dist.launch(rank_info, 3, args=(10,))
    assert results == [(r, 3, 33, "127.0.0.1") for r in range(3)]


def test_failing_rank_is_reraised_with_its_traceback():
    start = time.monotonic()
    with pytest.raises(KeyError, match="bad key on rank one") as info:
        pyg_dist.launch(raise_on_rank_one, 2)
    assert time.monotonic() - start < 60
    cause = str(info.value.__cause__)
    assert "rank 1 of 2 raised" in cause and "raise_on_rank_one" in cause


def test_killed_rank_raises_instead_of_hanging():
    start = time.monotonic()
    with pytest.raises(pyg_dist.RankFailed, match="rank 1 of 2 exited with signal SIGKILL"):
        pyg_dist.launch(killed_rank, 2)
    assert time.monotonic() - start < 60


def test_timeout_stops_the_ranks():
    start = time.monotonic()
    with pytest.raises(pyg_dist.RankFailed, match="after the timeout of 2"):
        pyg_dist.launch(sleeper, 2, timeout=2)
    assert time.monotonic() - start < 30


def test_bad_world_size():
    with pytest.raises(ValueError, match="world_size >= 1"):
        pyg_dist.launch(rank_info, 0)


def test_function_defined_in_main_travels_by_value(tmp_path):
    """A function defined in __main__ (like a notebook cell's) reaches the ranks."""
    import subprocess
    import sys

    script = tmp_path / "script.py"
    script.write_text(
        "import pyg_dist, torch.distributed as dist\n"
        "def fn(k):\n"
        "    return dist.get_rank() * k\n"
        "if __name__ == '__main__':\n"
        "    print(pyg_dist.launch(fn, 2, args=(5,)))\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[0, 5]"


def test_module_on_a_path_added_after_the_first_launch_is_importable(tmp_path, monkeypatch):
    """The ranks fork from a server started by an earlier launch; a folder put
    on sys.path since (as a notebook's sys.path.append) still reaches them
    (multiprocessing sends each new process the caller's path)."""
    pyg_dist.launch(rank_info, 1, args=(0,))  # the fork server is up
    (tmp_path / "late_module_for_launch.py").write_text(
        "import torch.distributed as dist\n"
        "def fn():\n"
        "    return dist.get_rank() + 100\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from late_module_for_launch import fn

    assert pyg_dist.launch(fn, 2) == [100, 101]


def test_init_without_environment_is_a_group_of_one():
    import subprocess
    import sys

    code = ("import pyg_dist, torch.distributed as dist; pyg_dist.init(); "
            "print(dist.get_world_size(), dist.get_rank(), dist.get_backend())")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "0", "gloo"]


def test_ranks_exit_when_the_launcher_is_killed(tmp_path):
    """A launcher killed before it can stop its ranks leaves no rank behind."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "script.py"
    script.write_text(
        "import os, time, pyg_dist\n"
        "def fn(folder):\n"
        "    open(os.path.join(folder, f'pid{os.getpid()}'), 'w').close()\n"
        "    time.sleep(300)\n"
        "if __name__ == '__main__':\n"
        f"    pyg_dist.launch(fn, 2, args=({str(tmp_path)!r},))\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path)
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("pid*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    pids = [int(p.name[3:]) for p in tmp_path.glob("pid*")]
    assert len(pids) == 2
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 20
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in pids if _alive(p)]
    assert not alive, f"ranks {alive} outlived their launcher"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie has exited
        return f.read().split()[2] != "Z"


def test_a_rank_seen_dead_before_its_closed_pipe_is_reported(monkeypatch):
    """The process's exit can be seen before its pipe's end: draining the
    closed pipe ends in RankFailed, not in EOFError."""
    import multiprocessing as mp

    from pyg_dist.runtime import launch as launch_module

    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=os._exit, args=(3,))
    proc.start()
    proc.join()
    receiver, sender = ctx.Pipe(duplex=False)
    sender.close()  # the rank's end closed with it: poll() is true, recv() hits EOF
    monkeypatch.setattr(launch_module, "wait", lambda objects, timeout=None: [proc.sentinel])
    with pytest.raises(pyg_dist.RankFailed, match="rank 0 of 1 exited with exit code 3"):
        launch_module._collect([proc], [receiver], timeout=10)


def test_an_error_every_rank_raised_alike_is_one_line_said_once(tmp_path, monkeypatch):
    """A partition folder cut for 2 ranks loaded by 3: the message names the
    fix once, on one line, without the ranks' tracebacks (PYG_DIST_DEBUG=1
    attaches one)."""
    from torch_geometric.data import Data

    data = Data(x=torch.randn(6, 2), edge_index=torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]]),
                y=torch.zeros(6, dtype=torch.long))
    pyg_dist.partition(data, 2, tmp_path / "parts")
    monkeypatch.delenv("PYG_DIST_DEBUG", raising=False)
    with pytest.raises(ValueError) as info:
        pyg_dist.launch(load_parts_cut_for_another_world, 3, args=(str(tmp_path / "parts"),))
    parts = tmp_path / "parts"
    assert str(info.value) == (
        f"'DistData.load' of '{parts}' failed alike on all 3 ranks: ValueError: 'DistData.load' "
        f"found 2 partitions in '{parts}' but the process group has 3 ranks; re-partition with "
        f"num_parts=3 or launch 2 ranks (under torchrun: --nnodes times --nproc-per-node)")
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert info.value.__notes__[0].startswith("(raised on every rank together; PYG_DIST_DEBUG=1")
    monkeypatch.setenv("PYG_DIST_DEBUG", "1")
    with pytest.raises(ValueError) as info:
        pyg_dist.launch(load_parts_cut_for_another_world, 3, args=(str(tmp_path / "parts"),))
    assert "_check_rank" in str(info.value.__cause__)  # where the rank raised it
