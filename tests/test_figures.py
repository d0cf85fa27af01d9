"""Every figure README.md quotes in "Which strategy, when" is measured in
docs/results.md, the page that names the command behind each table: a figure
the README states that results.md does not hold (a ratio of 0.68x where the
table says 0.64x, an accuracy rounded otherwise) fails here."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: A figure: a number or a range of two (en dash or hyphen), then its unit.
FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?:[–-](\d+(?:\.\d+)?))?(x|%| points| s| MB)(?!\w)")


def figures(text: str) -> list[tuple[str, set[tuple[float, str]]]]:
    """Each figure of ``text`` as written, with the (value, unit) pairs it
    states (both ends of a range)."""
    out = []
    for match in FIGURE.finditer(text):
        low, high, unit = match.groups()
        values = {(float(low), unit.strip())}
        if high is not None:
            values.add((float(high), unit.strip()))
        out.append((match.group(0), values))
    return out


def section(text: str, title: str) -> str:
    """The Markdown section ``## title`` of ``text``, up to the next ``## ``."""
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def test_the_figure_reader_reads_ranges_units_and_decimals():
    read = figures("0.82–0.83x of exact, 75.70% then 96 s, 12.5x and 0.23 points; v2.8x")
    assert read == [("0.82–0.83x", {(0.82, "x"), (0.83, "x")}), ("75.70%", {(75.7, "%")}),
                    ("96 s", {(96.0, "s")}), ("12.5x", {(12.5, "x")}),
                    ("0.23 points", {(0.23, "points")})]


def test_every_figure_of_the_strategy_table_is_in_results():
    readme = section((REPO / "README.md").read_text(), "Which strategy, when")
    results = set().union(*(values for _, values in
                            figures((REPO / "docs" / "results.md").read_text())))
    quoted = figures(readme)
    assert len(quoted) > 20, "the strategy table quotes its measurements"
    missing = [text for text, values in quoted if not values <= results]
    assert not missing, (f"README's 'Which strategy, when' quotes {missing}, which "
                         f"docs/results.md does not hold: copy the figure from its table")
