"""Every figure README.md quotes, and every measured figure of the guides, is
one docs/results.md holds, the page that names the command behind each table:
a figure a page states that results.md does not hold (a ratio of 0.68x where
the table says 0.64x, an accuracy rounded otherwise) fails here.

A figure is a number (or a range of two) with a unit: ``x``, ``%``,
``points``, a time (``s``, ``ms``, ``µs``, ``min``), a size (``B``,
``bytes``, ``kB``, ``MB``, ``GB``, ``KiB``, ``MiB``, ``GiB``) or a rate; a
graph's size such as ``169k nodes`` is one too, and results.md must hold its
text. A signed number of a results.md table (``−0.23``, ``+0.13``) is a
difference in points. What the guides state that is not a measurement (a
default, a format's width, an example's output) is listed in
:data:`NOT_MEASURED`, with why.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results.md"
GUIDES = sorted(p for p in (REPO / "docs").glob("*.md") if p.name not in {"results.md",
                                                                           "cli.md"})

NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
UNITS = (r"x|%| points| s| ms| µs| min| kB| MB/s| MB| GB/s| GB| KiB| MiB| GiB| TB/s| Mbit/s"
         r"| Gbit/s| bytes| B")
#: A figure: a number or a range of two (en dash or hyphen), then its unit.
FIGURE = re.compile(rf"(?<![\w.,/=-])({NUMBER})(?:[–-]({NUMBER}))?({UNITS})(?!\w)")
#: A graph's size: 169k nodes, a 2M-node graph, 300M edges.
SIZE = re.compile(r"(?<![\w.,])(\d+(?:\.\d+)?[kM])[- ](?:node|edge)s?\b")
#: A signed difference of a results.md table.
SIGNED = re.compile(r"(?<![\w.])[+−](\d+\.\d+)(?![\w.])")

#: Per guide, the figures that are not measurements, and why.
NOT_MEASURED = {
    "checkpoints.md": {
        "30 s": "SLURM's KillWait default",
        "20.1 kB": "an example error message", "8.2 kB": "an example error message",
        "121.4 s": "an example error message", "120 s": "an example error message",
        "0.0 s": "an example error message",
        "2 s": "the ping timeout of pyg_dist.runtime.peers",
        "0.2 s": "the kernel's first TCP retransmission timeout",
        "3.2 s": "the kernel's retransmission backoff (0.2 s doubled four times)",
        "2.0 s": "an example error message",
    },
    "halo.md": {
        "1 MiB": "the probe's cap, a constant of halo/auto.py",
        "0 bytes": "isolated sends nothing, by definition",
        "8 bytes": "an int64 degree per row", "4 bytes": "a float32 scale per row",
    },
    "install.md": {},
    "multihost.md": {"2 s": "the ping timeout of pyg_dist.runtime.peers"},
    "troubleshooting.md": {"2 s": "the ping timeout of pyg_dist.runtime.peers"},
    "partitioning.md": {
        "8 bytes": "int32 ids, a pair per edge", "17 bytes": "the shuffled edge's fields",
        "1 MiB": "the mmap threshold the ranks set", "32 MiB": "glibc's default ceiling",
        "80%": "the synthetic graph's test split",
    },
    "training.md": {"493376 B": "the output of the Python example above it",
                    "1060800 B": "the output of the Python example above it"},
}


#: Per guide, measured figures whose command no record names, so results.md
#: cannot hold them with it yet: listed so the gap stays visible.
NO_COMMAND: dict[str, dict[str, str]] = {}


def figures(text: str) -> list[tuple[str, set[tuple[float, str]]]]:
    """Each figure of ``text`` as written, with the (value, unit) pairs it
    states (both ends of a range); a graph's size is (text, "size")."""
    out = []
    for match in FIGURE.finditer(text):
        low, high, unit = match.groups()
        values = {(float(low.replace(",", "")), unit.strip())}
        if high is not None:
            values.add((float(high.replace(",", "")), unit.strip()))
        out.append((match.group(0), values))
    out += [(match.group(0), {(match.group(1), "size")}) for match in SIZE.finditer(text)]
    return out


def held(text: str) -> set:
    """What results.md's ``text`` holds: its figures, its graph sizes, and its
    signed table cells as differences in points."""
    values = set().union(*(v for _, v in figures(text)))
    values |= {(float(m.group(1)), "points") for m in SIGNED.finditer(text)}
    values |= {(m.group(1), "size") for m in re.finditer(r"(?<![\w.,])(\d+(?:\.\d+)?[kM])\b",
                                                          text)}
    return values


def section(text: str, title: str) -> str:
    """The Markdown section ``## title`` of ``text``, up to the next ``## ``."""
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def test_the_figure_reader_reads_ranges_units_and_decimals():
    read = figures("0.82–0.83x of exact, 75.70% then 96 s, 12.5x and 0.23 points; v2.8x, "
                   "5,309,104 B at 1.37 GiB over 10 Gbit/s, 60–100 µs; 4x1 and 2x2; "
                   "169k nodes, a 2M-node graph")
    assert read == [("0.82–0.83x", {(0.82, "x"), (0.83, "x")}), ("75.70%", {(75.7, "%")}),
                    ("96 s", {(96.0, "s")}), ("12.5x", {(12.5, "x")}),
                    ("0.23 points", {(0.23, "points")}), ("5,309,104 B", {(5309104.0, "B")}),
                    ("1.37 GiB", {(1.37, "GiB")}), ("10 Gbit/s", {(10.0, "Gbit/s")}),
                    ("60–100 µs", {(60.0, "µs"), (100.0, "µs")}),
                    ("169k nodes", {("169k", "size")}), ("2M-node", {("2M", "size")})]
    assert (0.23, "points") in held("| `stale:4` + int8 | −0.23 | +0.00 |")


def test_every_figure_of_the_readme_is_in_results(capsys):
    results = held(RESULTS.read_text())
    readme = (REPO / "README.md").read_text()
    quoted = figures(readme)
    assert len(figures(section(readme, "Which strategy, when"))) > 20, "the table quotes them"
    missing = [text for text, values in quoted if not values <= results]
    assert not missing, (f"README.md quotes {missing}, which docs/results.md does not hold: "
                         f"copy the figure from its table")
    with capsys.disabled():
        print(f"README.md: {len(quoted)} figures, all in results.md")


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: p.stem)
def test_every_measured_figure_of_a_guide_is_in_results(guide, capsys):
    results = held(RESULTS.read_text())
    known = {**NOT_MEASURED.get(guide.name, {}), **NO_COMMAND.get(guide.name, {})}
    quoted = figures(guide.read_text())
    missing = sorted({text for text, values in quoted
                      if not values <= results and text not in known})
    assert not missing, (f"docs/{guide.name} quotes {missing}, which docs/results.md does not "
                         f"hold: copy the figure from its table, or add the measurement there "
                         f"with its command")
    unused = set(known) - {text for text, _ in quoted}
    assert not unused, f"the lists name {sorted(unused)} for {guide.name}: it quotes none"
    traced = sum(values <= results for _, values in quoted)
    untraced = sum(text in NO_COMMAND.get(guide.name, {}) and not values <= results
                   for text, values in quoted)
    with capsys.disabled():
        print(f"\n{guide.name}: {len(quoted)} figures, {traced} in results.md, {untraced} "
              f"measured without a recorded command, {len(quoted) - traced - untraced} "
              f"not measurements")
