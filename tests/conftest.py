import os
import sys

import torch

# Without CUDA, Triton kernels run on the CPU through Triton's interpreter. The
# flag must be set before pyg_dist (and with it Triton's kernels) is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, os.path.dirname(__file__))


def pytest_collection_finish(session):
    """Rank batteries of the selected tests' modules only share launches (tests/worlds.py)."""
    import worlds

    worlds.select(str(item.path) for item in session.items)


def pytest_terminal_summary(terminalreporter):
    import worlds

    if worlds.summary():
        terminalreporter.write_line(worlds.summary())
