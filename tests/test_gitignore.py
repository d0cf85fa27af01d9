"""What the README's and the guides' command examples write, run from the
clone's root (``--out DIR``, ``--checkpoint DIR``, ``> FILE``), is ignored
by git: trying an example leaves ``git status`` clean."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: A flag that names a folder the command writes, then the folder; or a redirection.
WRITTEN = re.compile(r"(?:--out(?:-dir)?|--checkpoint)[ =]([^\s`'\"]+)|>\s*([\w.-]+\.json)\b")


def written_paths():
    """Every relative path an example writes: ``{path: page}``."""
    found = {}
    for page in PAGES:
        text = page.read_text()
        for block in re.findall(r"```(?:bash|console|sh)\n(.*?)```", text, re.S):
            for match in WRITTEN.finditer(block):
                path = match.group(1) or match.group(2)
                if path.startswith(("/", "$", "<")) or path.isupper() or "{" in path:
                    continue  # absolute, a variable or a placeholder (DIR)
                found.setdefault(path.rstrip("/") + ("/" if match.group(1) else ""),
                                 page.name)
    return found


def test_the_examples_write_somewhere():
    paths = written_paths()
    assert {"graph/", "products-like/", "run.json"} <= set(paths), paths


def test_what_the_examples_write_is_ignored():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    paths = written_paths()
    # check-ignore takes a folder as a path inside it
    probe = [p + "x" if p.endswith("/") else p for p in paths]
    proc = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=ROOT,
                          input="\n".join(probe), capture_output=True, text=True)
    ignored = set(proc.stdout.split())
    tracked = [f"{p} ({paths[p]})" for p, q in zip(paths, probe) if q not in ignored]
    assert not tracked, f"not in .gitignore: {', '.join(tracked)}"
