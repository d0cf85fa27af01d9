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


def pytest_collection_finish(session):
    """Rank batteries of the selected tests' modules only share launches (tests/worlds.py)."""
    import worlds

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
