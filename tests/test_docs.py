"""The documentation site builds with warnings as errors (every reference into
pyg_dist resolved, the notebooks executed), and every Python block of the
guides runs as written, so the pages cannot drift from the code."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from graphs import CORA_RAW

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
GENERATED = {"cli.md"}
GUIDES = sorted(p for p in DOCS.glob("*.md") if p.name not in GENERATED)


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)


@pytest.mark.timeout(1800)
def test_site_builds_without_a_warning(tmp_path):
    out = tmp_path / "html"
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(tmp_path / "doctrees"), str(DOCS), str(out)],
        capture_output=True, text=True, timeout=1700, cwd=REPO,
        env={**os.environ, "PYG_DIST_NOTEBOOK_SMALL": "1"})  # the notebooks on small graphs
    assert done.returncode == 0, done.stderr[-5000:]
    pages = {p.relative_to(out).as_posix() for p in out.rglob("*.html")}
    # every guide, every notebook and every API module has its page
    for guide in GUIDES:
        assert guide.with_suffix(".html").name in pages, guide.name
    for notebook in (REPO / "notebooks").glob("*.ipynb"):
        html = (out / "notebooks" / f"{notebook.stem}.html").read_text()
        assert "cell_output" in html, f"{notebook.name} was rendered without its outputs"
    modules = [line.strip() for line in (DOCS / "api" / "modules.txt").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    for module in modules:
        assert f"api/generated/{module}.html" in pages, module
    # a layer has a page of its own with its docstring: the paper, the math, the shapes
    gcn = (out / "api" / "generated" / "pyg_dist.nn.DistGCNConv.html").read_text()
    assert 'id="pyg_dist.nn.DistGCNConv"' in gcn
    assert "arxiv.org/abs/1609.02907" in gcn and "Shapes" in gcn and "math" in gcn


@pytest.mark.parametrize("page", [p for p in GUIDES if python_blocks(p)],
                         ids=lambda p: p.stem)
def test_guide_code_runs(page, tmp_path):
    """Each ``python`` block runs alone, in a fresh process, from a folder
    laid out like a clone (Cora's raw files under tests/data)."""
    shutil.copytree(CORA_RAW, tmp_path / "tests" / "data" / "Cora" / "raw")
    for number, block in enumerate(python_blocks(page), 1):
        script = tmp_path / f"{page.stem}_{number}.py"
        script.write_text(block)
        done = subprocess.run([sys.executable, script.name], cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (
            f"{page.name}, Python block {number}:\n{block}\n{done.stderr[-3000:]}")
