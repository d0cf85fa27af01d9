"""The README is a landing page: the two commands first, short, its links resolve.
(tests/test_docs.py runs its quick tour, as every block of the docs.)"""
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_is_a_landing_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200
    assert lines[4].startswith("bash scripts/demo.sh") and lines[5].startswith(
        "bash scripts/test.sh")
    for link in re.findall(r"\]\((docs/[^)#]+)", README.read_text()):
        assert (README.parent / link).is_file(), link
