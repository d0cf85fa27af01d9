import os
import sys

import pytest
import torch

# Without CUDA, Triton kernels run on the CPU through Triton's interpreter. The
# flag must be set before pyg_dist (and with it Triton's kernels) is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, os.path.dirname(__file__))

from pyg_dist.cli import commands, run  # noqa: E402  (after the Triton flag)

#: Test files that build hosts from network namespaces: one worker runs them
#: all, one after the other (their shaped links and timeouts assume the
#: machine is not running another testbed).
HOSTS = ("test_multihost.py", "test_slurm.py", "test_cluster.py")


#: Test files that read one battery's results (tests/worlds.py, its
#: ``users``), by folder: one worker runs each group, so the ranks start once.
TOGETHER = {
    "link": ("test_link_embeddings.py", "test_link_metrics.py", "test_link_train.py"),
    "halo": ("test_compress.py", "test_ledger.py", "test_policies.py"),
}
#: Files of minutes whose tests share nothing at module level: under xdist
#: each of their tests may run in either worker.
SPREAD = ("test_docs.py",)
#: The files that take longest, started first under xdist so that no worker
#: is left alone with one of them at the end.
FIRST = ("test_docs.py", *HOSTS, "test_cli.py", "test_preemption.py", "test_faults.py",
         "test_wheel.py", "test_compress.py", "test_resume.py", "test_imports.py")


def pytest_configure(config):
    """An xdist worker's own torch ops take its share of the cores: two
    workers on two cores with two threads each would wait for each other's
    threads (the ranks they start take their share already, see
    :func:`pyg_dist.launch`)."""
    workers = getattr(config, "workerinput", {}).get("workercount")
    if workers:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(workers)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (scripts/test.sh runs two workers): each test file
    runs in one worker, so a module's fixtures (its rank battery) start once,
    so do the files of a :data:`TOGETHER` group, the namespaced hosts' files
    run in one worker, and a :data:`SPREAD` file's tests go wherever a
    worker is free."""
    from xdist.scheduler import LoadFileScheduling

    # Scopes in the order the workers collected them (the FIRST files
    # first): xdist's default puts the scopes of most tests first, which
    # leaves the SPREAD files' one-test scopes, the longest tests, to the end.
    config.option.loadscopereorder = False

    class FileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid):
            file = nodeid.split("::", 1)[0]
            name = os.path.basename(file)
            if name in SPREAD:
                return nodeid
            if name in HOSTS:
                return "hosts"
            folder = os.path.basename(os.path.dirname(file))
            return folder if name in TOGETHER.get(folder, ()) else file

    return FileScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """An xdist worker's tests in the order the workers take them: the
    :data:`FIRST` files first (every worker sorts alike, as xdist requires)."""
    if hasattr(config, "workerinput"):
        rank = {name: i for i, name in enumerate(FIRST)}
        items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))


def pytest_collection_finish(session):
    """Rank batteries of the selected tests' modules only share launches
    (tests/worlds.py). An xdist worker runs only some of the tests it
    collected, and knows which only as they come: each battery launches alone."""
    import worlds

    if hasattr(session.config, "workerinput"):
        worlds.select(())
    else:
        worlds.select(str(item.path) for item in session.items)


def pytest_terminal_summary(terminalreporter):
    import worlds

    if worlds.summary():
        terminalreporter.write_line(worlds.summary())


@pytest.fixture
def nothing_runs(monkeypatch):
    """Fails the test if a graph is loaded or cut, or a rank starts: the
    checks of a command that must refuse before any of that."""
    def ran(*args, **kwargs):
        raise AssertionError("a graph was loaded or cut, or a rank started")

    for name in ("load_graph", "partition_graph", "partition_distributed"):
        monkeypatch.setattr(commands, name, ran)
    monkeypatch.setattr(run, "_partition", ran)
    monkeypatch.setattr(run.pyg_dist, "launch", ran)
    monkeypatch.setattr(commands.pyg_dist, "launch", ran)
