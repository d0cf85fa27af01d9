"""The notebooks' first cell, ``import pyg_dist``, prints nothing in a Jupyter
kernel without ipywidgets (torch_geometric's ``tqdm.auto`` would warn
"IProgress not found" there), while a warning of the notebook's own still shows."""
import importlib.util

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")


def stderr_of(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs
                   if o.get("output_type") == "stream" and o.get("name") == "stderr")


@pytest.mark.timeout(300)
def test_importing_pyg_dist_in_a_kernel_without_ipywidgets_prints_no_warning():
    assert importlib.util.find_spec("ipywidgets") is None, "the case is a kernel without them"
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import pyg_dist\nfrom pyg_dist.datasets import synthetic"),
        nbformat.v4.new_code_cell("import warnings\nwarnings.warn('a warning of its own')"),
        nbformat.v4.new_code_cell("import sys\nprint('tqdm.auto' in sys.modules)"),
    ])
    nbclient.NotebookClient(notebook, timeout=240, kernel_name="python3").execute()
    first, own, loaded = notebook.cells
    assert first.outputs == [], stderr_of(first)
    assert "UserWarning: a warning of its own" in stderr_of(own)
    # torch_geometric did import tqdm.auto: the warning was due, and left out
    assert loaded.outputs[0]["text"].strip() == "True"
