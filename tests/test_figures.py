"""Every figure README.md quotes, and every measured figure of the guides, is
one docs/results.md holds, the page that names the command behind each table:
a figure a page states that results.md does not hold (a ratio of 0.68x where
the table says 0.64x, an accuracy rounded otherwise) fails here.

README.md's figures are tied to their sources one by one, in the order it
states them (:data:`README_SOURCES`): each to a cell of a results.md table
(its row and column) or to the words that precede it in results.md's text. A
figure swapped with another, or one results.md has since measured anew,
fails.

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

import json
import re
import signal
from pathlib import Path
from typing import Any

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
    "link_prediction.md": {"8 bytes": "an int64 id's width"},
    "multihost.md": {"2 s": "the ping timeout of pyg_dist.runtime.peers"},
    "troubleshooting.md": {"2 s": "the ping timeout of pyg_dist.runtime.peers"},
    "partitioning.md": {
        "8 bytes": "int32 ids, a pair per edge", "17 bytes": "the shuffled edge's fields",
        "1 MiB": "the mmap threshold the ranks set", "32 MiB": "glibc's default ceiling",
        "80%": "the synthetic graph's test split",
    },
    "training.md": {"4 bytes": "a float32's width",
                    "493376 B": "the output of the Python example above it",
                    "1060800 B": "the output of the Python example above it",
                    "8 MiB": "the grid planner's probe size, AXIS_PROBE_BYTES of grid_3d/cost.py"},
}


#: Per guide, measured figures whose command no record names, so results.md
#: cannot hold them with it yet: listed so the gap stays visible.
NO_COMMAND: dict[str, dict[str, str]] = {}


#: A README figure that states a condition of a measurement (a graph's size,
#: a link's rate), not one: results.md holds it, tied to nothing in particular.
SETTING = "setting"
GPU = "The GPU regime: where communication dominates"
FP_DROPOUT = "Feature parallelism with dropout on the input"
FP_RANDOM_DROPOUT = "Feature parallelism on a random cut, with dropout on the input"
FP_METIS = "Feature parallelism on a METIS cut"
FP_LOSS = "Feature parallelism with the loss on the columns"
FP_400K = "Feature parallelism on the 400k-node graph"
FULL_BATCH = "The input without dropout, combined"
TIME = "Time to accuracy"
RECIPES = "Recipes for accuracy on Cora"
HOSTS = "Across hosts"
GRADIENT_ONLY = "Gradient-only training and gradient compression"
RANKS = "Partitioning on the ranks"
RANKS_300M = "300M edges on the ranks"
CAPPED = "Hosts with capped memory"
PAPERS = "ogbn-papers100M, estimated"
GRID = "A 3D grid: balance and memory"
GRID_METIS = "The 3D grid on a METIS cut"
GRID_COLLECTIVES = "The grid's collectives alone"
GRID_UNSHAPED = "The 3D grid with the links unshaped"
GRID_400K = "The 3D grid on the 400k-node graph"
GRID_16 = "The 3D grid on 16 hosts"
LINK_PEER = "Link prediction against the sampling recipe"
PEER = "peer (PyG sampling)"  # the peer's row of benchmarks/time_to_accuracy.py
PEER_TABLE = "s to 78.10% val"  # the header that names the Cora table against the peer

#: Where each figure of README.md comes from, in README's order: ``(results.md
#: section, source)``. A source is the text of the section that precedes the
#: figure (or holds it at ``{}``), or a table cell ``(row, column[, table])``:
#: the row whose first cells read ``row``, the column headed ``column`` (its
#: ``#k``-th such column), in the table whose header holds ``table``; a list
#: of sources gives a range's ends (its least and greatest values).
README_SOURCES: list[tuple[str, Any]] = [
    # the highest final accuracy on a large graph
    (SETTING, "synthetic-arxiv's size"),
    (FULL_BATCH, "best validation accuracy "),
    (FULL_BATCH, "(test at the best epoch "),
    (FULL_BATCH, "79.10–79.34% against the recipe's "),
    (FULL_BATCH, "78.77–78.88% against its "),
    (TIME, ("exact", "best val")),
    (FULL_BATCH, "- to {} validation (the recipe's best"),
    (FULL_BATCH, "minus 0.5 points) in "),
    (FULL_BATCH, "the recipe was at "),
    (FULL_BATCH, "the recipe was at 75.70% after "),
    (FULL_BATCH, "peak RSS of the largest rank "),
    (FULL_BATCH, "831–973 MB against the recipe's "),
    # a moderate accuracy soonest
    (SETTING, "synthetic-arxiv's size"),
    (TIME, "isolated) minus 0.5 points, "),
    (TIME, "the peer took "),
    (TIME, "`isolated` {} in the table's run (0.15x"),
    (TIME, "`isolated` 73.6 s in the table's run ("),
    (TIME, ("isolated", "vs peer#3")),
    (TIME, "the peer reached **"),
    (TIME, ("isolated", "best val")),
    # a higher final accuracy on a small graph
    (RECIPES, ("cs", "best val", PEER_TABLE)),
    (RECIPES, ("exact", "best val", PEER_TABLE)),
    (RECIPES, ("peer (PyG sampling)", "best val", PEER_TABLE)),
    (RECIPES, ("cs", "test there", PEER_TABLE)),
    (RECIPES, ("peer (PyG sampling)", "test there", PEER_TABLE)),
    # the single-process result, exactly
    ("Accuracy on Cora", "({} test, 80.4% validation"),
    ("Accuracy on Cora", "The GCN paper reports "),
    ("Accuracy on Cora", "({} test, 81.8% validation"),
    # not to choose a strategy
    (GPU, "on 2 hosts 7 of the 10 rows within "),
    (GPU, "exact → `exact` pre-aggregated ("),
    (GPU, "compressed → `exact` + int8 ("),
    (GPU, "stale → `stale:4` + int8 ("),
    (GPU, "fp16 gradients, and took "),
    # not to choose a policy
    (HOSTS, "its bytes, within "),
    (SETTING, "the links' rate"),
    (HOSTS, ["2 hosts, exact 1.59 s, `auto` ", "4 hosts, exact 1.36 s, `auto` "]),
    (HOSTS, ["`auto` takes ", "`auto` takes 0.99x (2 hosts, 1 Gbit/s), ", "(2, 10 Gbit/s), ",
             "(4, 1 Gbit/s) and "]),
    (HOSTS, "of that policy's epoch, with "),
    # fewer halo rows, still exact
    ("Pre-aggregation in training", "and bytes per epoch follow ("),
    # fewer bytes on a slow link
    ("Halo policies", ("`stale:4` + int8", "bytes (Cora / synthetic)")),
    ("Halo policies", ("`stale:4` + int8", "Cora GCN")),
    (SETTING, "the links' rate"),
    (HOSTS, "policies pay off: `stale:4` + int8 "),
    # no halo traffic at all
    (GRADIENT_ONLY, "the 2-layer GCN reaches "),
    (GRADIENT_ONLY, "81.60% with the batch one (exact "),
    (GRADIENT_ONLY, ["Gradient-only epochs took ", "58 ms per epoch, gradient-only "]),
    # a deep model
    ("Layer pipelines", "6.2x / "),
    (SETTING, "the community graph's size"),
    ("Layer pipelines", "2×2 0.89x and 1×4 "),
    (SETTING, "the links' rate"),
    # a graph that cuts poorly
    (FP_LOSS, ("4 | feature-parallel 1x4", "vs exact")),
    (FP_LOSS, "(0.35 MB): 64.9 MB, "),
    (FP_METIS, ("4 | feature-parallel 2x2", "vs exact")),
    (FP_METIS, ("4 | feature-parallel 1x4", "vs exact")),
    # a graph whose structure fits no rank
    (GRID, [("2x2x2 | degree order", "double"), ("8x8x8 | degree order", "double")]),
    (GRID, [("2x2x2 | degree order", "own order"), ("8x8x8 | degree order", "own order")]),
    # fewer gradient bytes
    (GRADIENT_ONLY, "ranks): `fp16` "),
    (GRADIENT_ONLY, "`covap:4` "),
    (GRADIENT_ONLY, "`covap:4` 0.25x at −"),
    # on these cores, and on GPUs
    (HOSTS, "Communication is at most ~"),
    (SETTING, "the links' rate"),
    (HOSTS, ["(1.89 s over loopback); `exact` + int8 ", "(4.1 MB), `pipelined` "]),
    (SETTING, "the links' rate"),
    (SETTING, "the community graph's size"),
    (GPU, ("exact + int8", "vs exact")),
    (GPU, ("exact, pre-aggregated", "vs exact")),
    (GPU, ("stale:4 + int8", "vs exact")),
    (GPU, ("gradient-only", "vs exact")),
    # graphs bigger than one machine
    (SETTING, "the graph's size"),
    (SETTING, "the graph's size"),
    (RANKS, "edge cut "),
    (RANKS, "largest rank's peak **"),
    (SETTING, "the graph's size"),
    (RANKS_300M, "the largest rank peaks at 3.01 GiB, **"),
    (RANKS_300M, "Edge cut "),
    (CAPPED, "each capped at "),
]


#: How results.md names the graphs its benchmarks' JSON names.
GRAPHS = {"cora": "Cora", "community": "community"}


def _cover_rows(r: dict) -> list[list[str]]:
    """A row of the vertex cover table, from ``benchmarks/preaggregate.py``."""
    return [[GRAPHS[r["dataset"]], f"{r['nodes']:,}", f"{r['edges']:,}", str(r["parts"]),
             f"{r['rows_today']:,}", f"{r['rows_cover']:,}", f"{r['sources']:,}",
             f"{r['partial_sums']:,}", f"{r['ratio']:.3f}", f"{r['cut_s']:.2f}",
             f"{r['plan_s']:.2f}"]]


def _training_rows(r: dict) -> list[list[str]]:
    """The rows and pre-aggregated rows of one graph and part count, from
    ``benchmarks/preaggregate.py --train``."""
    return [[GRAPHS[r["dataset"]], str(r["parts"]), label, f"{run['rows']:,.0f}",
             f"{run['partial_sums']:,.0f}", f"{run['bytes']:,.0f}", ratio, f"{run['total']:,}",
             f"{run['setup']:,}", f"{acc:.4f}"]
            for label, run, ratio, acc in (
                ("rows", r["rows"], "", r["test_acc"][0]),
                ("pre-agg", r["pre_agg"], f"{r['ratio_bytes']:.3f}", r["test_acc"][1]))]


def _link_bytes_rows(r: dict) -> list[list[str]]:
    """A row of the gather-against-halo table, from ``benchmarks/link_bytes.py``."""
    return [[r["negatives"], f"{r['nodes']:,}", str(r["parts"]), f"{r['gather_mb']:.2f} MB",
             f"{r['halo_mb']:.2f} MB", f"{r['ratio']:.2f}x",
             "= ledger" if r["predicted"] else "differs"]]


def _embedding_rows(r: dict) -> list[list[str]]:
    """A rank's row of the embeddings table, from ``benchmarks/embeddings.py``."""
    return [[str(r["rank"]), f"{r['rows_mib']:.1f} MiB", f"{r['write_peak_kib']:,} KiB",
             f"{r['python_peak_kib']:,} KiB", f"{r['beyond_chunk_kib']:,} KiB",
             f"{r['write_s']:.2f} s"]]


def _link_peer_rows(r: dict) -> list[list[str]]:
    """Both sides on one graph, from ``benchmarks/peer_link.py``: best
    validation metric, seconds to the recipe's best and the ratio, the
    largest rank's peak above its import floor and the ratio (dashes where
    the recipe did not run: no neighbour sampler)."""
    out = []
    for side in r["rows"]:
        peer = side is r["rows"][0]
        who = [r["graph"], "recipe" if peer else "pyg_dist", r["setup"]["metric"]]
        if "skipped" in side:
            out.append([*who, "not run", "–", "–", "–", "–"])
            continue
        seconds = side.get("to_peer_best_s")
        time_ratio = ("–" if "target" not in r else "1.00x" if peer
                      else f"{r['time_ratio']:.2f}x" if "time_ratio" in r else "not reached")
        rss_ratio = "–" if "rss_ratio" not in r else "1.00x" if peer else f"{r['rss_ratio']:.2f}x"
        out.append([*who, f"{100 * side['best_val']:.2f}%",
                    "–" if seconds is None else f"{seconds:.1f}", time_ratio,
                    f"{max(side['above_floor']) / 2**20:,.0f}", rss_ratio])
    return out


def _collective_rows(r: dict) -> list[list[str]]:
    """A row of the grid's collectives, from ``benchmarks/grid_collectives.py``."""
    run = [x for x in r["runs"] if x["rows"] == 200000 and x["width"] == 8]
    return [[str(r["axis"]), r["kind"], r["op"], f"{1e3 * r['alpha_s']:.2f}",
             f"{r['beta_bytes_s'] / 1e6:.1f}", f"{r['beta_share']:.2f}x",
             f"{run[0]['seconds'] / run[0]['link_s']:.2f}x" if run else "—"]]


def _own_loop_rows(r: dict) -> list[list[str]]:
    """A row of the own-loop table, from ``benchmarks/own_loop.py``."""
    return [[str(r["ranks"]), *(f"{r[k]:.1%}" for k in ("single", "wrapped", "naive")),
             f"{r['apart']:.2f}"]]


def _grid_cluster_rows(r: dict) -> list[list[str]]:
    """A row of a 3D grid's cluster table, from ``benchmarks/cluster.py``."""
    return [[r["policy"], f"{100 * r['test_acc']:.2f}%", f"{r['train_mb']:,.1f}",
             f"{r['epoch_s']:.3f}", f"{r['ratio']:.2f}x", f"{r['comm_s']:.3f}",
             f"{r['predicted_s']:.3f}", f"{r['predicted_s'] / r['epoch_s']:.2f}x"]]


def _megabytes(mb: float) -> str:
    """Megabytes to one decimal, two below 1 MB."""
    return f"{mb:.1f}" if mb >= 1 else f"{mb:.2f}"


def _policy_rows(r: dict) -> list[list[str]]:
    """A row of the GPU regime's policy table (2 hosts), from
    ``benchmarks/cluster.py``: exact's accuracy and every other row's
    difference in points, bytes, epoch and the planner's prediction."""
    if r["hosts"] != 2:
        return []
    label = {"auto": f'`halo="auto"` ({r["choice"]})',
             "planned:stale": f'`strategy="auto"`, `accept="stale"` (chose {r["choice"]})'
             }.get(r["policy"], r["policy"])
    accuracy = (f"{100 * r['test_acc']:.2f}%" if r["policy"] == "exact"
                else f"{100 * r['delta']:+.2f}".replace("-", "−"))
    predicted, ratio = "", ""
    if "predicted_s" in r:
        expected = " (expected)" if r["policy"].startswith("sampled") else ""
        predicted = f"{r['predicted_s']:.2f} s, {_megabytes(r['predicted_mb'])} MB{expected}"
        ratio = f"{r['predicted_s'] / r['epoch_s']:.2f}x"
    return [[label, accuracy, _megabytes(r["train_mb"]),
             f"{r['epoch_s']:.2f} s", f"{r['ratio']:.2f}x", predicted, ratio]]


def _feature_parallel_rows(r: dict) -> list[list[str]]:
    """A row of a feature-parallel table of the GPU regime, from ``benchmarks/cluster.py``."""
    grid = "exact (graph-parallel)" if r["policy"] == "exact" else r["policy"]
    return [[str(r["hosts"]), grid, f"{r['train_mb']:,.1f}", f"{r['epoch_s']:.2f} s",
             f"{r['ratio']:.2f}x", f"{r['predicted_s'] / r['epoch_s']:.2f}x"]]


def _partition_rows(r: dict) -> list[list[str]]:
    """One graph's row of the partitioning table, from
    ``benchmarks/partition.py``: METIS's seconds (inside METIS) and memory,
    ``metis-coarse``'s, and both cuts."""
    run = {x["method"]: x for x in r["runs"]}
    metis, coarse, random = run["metis"], run["metis-coarse"], run["random"]
    return [[f"{r['num_edges'] / 1e6:.3g}M",
             f"{metis['seconds']:.1f} ({metis['metis_seconds']:.1f})",
             f"{metis['added_bytes'] / r['input_bytes']:.2f}x", f"{coarse['seconds']:.1f}",
             f"{coarse['added_bytes'] / r['input_bytes']:.2f}x",
             f"{metis['cut_fraction']:.1%} / {random['cut_fraction']:.0%}"]]


def _recipe_rows(r: dict) -> list[list[str]]:
    """The recipes' rows on one graph, from ``benchmarks/time_to_accuracy.py``:
    best validation, the test accuracy where validation first reached the
    target, Correct & Smooth's seconds per evaluation (the peer, not run, is
    no row)."""
    out = []
    for row in r["rows"]:
        if "skipped" in row:
            continue
        post = row["times"]["post"] / len(row["curve"])
        out.append([row["row"], f"{100 * row['best_val']:.2f}%",
                    f"{100 * row['test_at_target']:.2f}% (epoch {row['epochs']})"
                    if row["reached"] else "not reached", f"{post:.3f}" if post else "0"])
    return out


def _versus(row: dict, peer: dict | None, key: str) -> str:
    """``row``'s ``key`` as a multiple of the peer's, or a dash."""
    if peer is None or not peer.get(key) or not row.get(key):
        return "–"
    return f"{row[key] / peer[key]:.2f}x"


def _reached_peer(r: dict) -> dict | None:
    """The peer's row of a ``benchmarks/time_to_accuracy.py`` graph, where it
    reached the target."""
    return next((x for x in r["rows"] if x["row"] == PEER and x.get("reached")), None)


def _best_cells(row: dict) -> list[str]:
    """A row's name, best validation accuracy, the earliest epoch that
    reached it and the test accuracy there, from its curve."""
    best = next(p for p in row["curve"] if p["val_acc"] == row["best_val"])
    return [row["row"], f"{100 * row['best_val']:.2f}%", str(best["epoch"]),
            f"{100 * best['test_acc']:.2f}%"]


def _time_rows(r: dict) -> list[list[str]]:
    """Every side's time to the target on one graph, from
    ``benchmarks/time_to_accuracy.py``: best validation, seconds to the
    target with and without set-up, the largest rank's peak RSS and the bytes
    a rank sent to the target, each against the peer's."""
    peer = _reached_peer(r)
    out = []
    for row in r["rows"]:
        if "skipped" in row:
            continue
        name = row["row"]
        if not row["reached"]:
            out.append([name, f"{100 * row['best_val']:.2f}%", "not reached", *["–"] * 5,
                        f"{row['peak_rss_max'] / 2**20:.0f}", "–", "–"])
            continue
        steps = f" ({row['steps']})" if row.get("steps") is not None else ""
        out.append([name, f"{100 * row['best_val']:.2f}%", f"{row['time_s']:.1f}",
                    _versus(row, peer, "time_s"), f"{100 * row['test_at_target']:.2f}%",
                    f"{row['epochs']}{steps}", f"{row['total_s']:.1f}",
                    _versus(row, peer, "total_s"), f"{row['peak_rss_max'] / 2**20:.0f}",
                    _versus(row, peer, "peak_rss_max"), f"{row['sent_mb']:.1f}"])
    return out


def _time_spent_rows(r: dict) -> list[list[str]]:
    """Where each of our rows' time went, per epoch of the average rank, from
    ``benchmarks/time_to_accuracy.py`` (the peer keeps no such times)."""
    out = []
    for row in r["rows"]:
        if "times" not in row or not row["epochs_run"]:
            continue
        t, n = row["times"], row["epochs_run"]
        out.append([row["row"], str(n), *(f"{v / n:.3f}" for v in (
            t["train"], t["forward"], t["train"] - t["forward"], t["eval"], t["exchange"],
            t["all-reduce"]))])
    return out


def _best_epoch_rows(r: dict) -> list[list[str]]:
    """Each side's best validation accuracy on one graph, the earliest epoch
    that reached it and the test accuracy there, the seconds to the target
    against the peer's and the largest rank's peak RSS, from
    ``benchmarks/time_to_accuracy.py``'s curves."""
    peer = _reached_peer(r)
    out = []
    for row in r["rows"]:
        if "skipped" in row:
            continue
        out.append([*_best_cells(row),
                    f"{row['time_s']:.2f}" if row["reached"] else "not reached",
                    _versus(row, peer, "time_s"), f"{row['peak_rss_max'] / 2**20:.0f}"])
    return out


#: The full-batch recipes' target: PyG's sampling recipe's best validation
#: accuracy minus 0.5 points.
FULL_BATCH_TARGET = 0.7792


def _recipe_target_rows(r: dict, target: float = FULL_BATCH_TARGET) -> list[list[str]]:
    """Each recipe's best validation accuracy on one graph, the earliest epoch
    that reached it and the test accuracy there, the seconds (and epoch) to
    ``target`` (PyG's sampling recipe's best minus 0.5 points, from the
    time-to-accuracy section's run) and the largest rank's peak RSS, from
    ``benchmarks/time_to_accuracy.py``'s curves (the recipe, not run, is no
    row)."""
    out = []
    for row in r["rows"]:
        if "skipped" in row:
            continue
        hit = next((p for p in row["curve"] if p["val_acc"] >= target), None)
        out.append([*_best_cells(row),
                    f"{hit['seconds']:.1f} (epoch {hit['epoch']})" if hit else "not reached",
                    f"{row['peak_rss_max'] / 2**20:.0f}"])
    return out


def _hetero_rows(r: dict) -> list[list[str]]:
    """Each model's runs, from ``benchmarks/hetero.py``: PyG in one process,
    then the ranks per halo policy with their ratios to it."""
    out = []
    for model in r["models"]:
        base, *ranks = model["rows"]
        name = f"`{model['model']}`"
        out.append([f"{name}, {base['run']}", f"{base['test_acc']:.4f}",
                    f"{base['epoch_s']:.1f}", f"{base['peak_rss_mb']:,.0f}", "–"])
        for row in ranks:
            rss = row["peak_rss_mb"]
            out.append([f"{name}, {row['ranks']} ranks, `{row['halo']}`",
                        f"{row['test_acc']:.4f}",
                        f"{row['epoch_s']:.1f} ({row['epoch_s'] / base['epoch_s']:.2f}x)",
                        f"{rss:,.0f} ({rss / base['peak_rss_mb']:.2f}x)",
                        f"{sum(row['bytes_per_epoch'].values()) / 2**20:.1f}"])
    return out


def _long_run_rows(r: dict) -> list[list[str]]:
    """Each rank's growth over the long run, without and with ``train``'s
    periodic release of freed heap pages, from
    ``benchmarks/time_to_accuracy.py --long-run``."""
    runs = r["long_run"]
    return [[str(after["rank"]),
             *(f"{x:.3f}" for run in (before, after)
               for x in (run["end"] / run["after_100"], run["live_end"] / run["live_100"])),
             f"{after['end'] / 2**20:.1f}"]
            for before, after in zip(runs["before"], runs["after"], strict=True)]


def _span(values: list[float], form: str) -> str:
    """``low–high`` of ``values`` in ``form``, one figure where both read alike."""
    low, high = format(min(values), form), format(max(values), form)
    return low if low == high else f"{low}–{high}"


def _balance(sizes: list[int]) -> str:
    """The largest part over the mean part."""
    return f"{max(sizes) / (sum(sizes) / len(sizes)):.3f}"


def _ranks_rows(r: dict) -> list[list[str]]:
    """Single-process cuts of a graph folder and its cut on the ranks, from
    ``benchmarks/partition_distributed.py``."""
    names = {"metis-coarse": "single process, `metis-coarse`",
             "metis": "single process, plain METIS"}
    out = [[name, f"{x['seconds']:.1f}", f"{x['cpu']:.1f}", f"{x['peak'] / 2**30:.2f}",
            f"{x['edge_cut']:,}", _balance(x["part_sizes"])]
           for key, name in names.items() if (x := r.get(key))]
    d = r["distributed"]
    return [*out, [f"{r['parts']} ranks, `partition_distributed`", f"{d['seconds']:.1f}",
                   _span(d["rank_cpu"], ".1f"), _span([p / 2**30 for p in d["rank_peaks"]],
                                                      ".2f"),
                   f"{d['edge_cut']:,}", _balance(d["part_sizes"])]]


#: ogbn-papers100M: nodes, directed edges, and the bytes of a node's 128 float32 features.
PAPERS100M = (111e6, 1.6e9, 128 * 4)


def _papers100m_rows(r: dict) -> list[list[str]]:
    """ogbn-papers100M cut on 8 and 16 machines, worked out from the 300M-edge
    cut on the ranks (``benchmarks/partition_distributed.py``): the largest
    rank's peak bytes and CPU seconds per edge of its slice, times a
    machine's slice, plus its node rows twice (its input block and its part)."""
    nodes, edges, row = PAPERS100M
    ranks = r["distributed"]
    per_slice_edge = r["parts"] / r["num_edges"]
    edge_bytes = round(max(ranks["rank_peaks"]) * per_slice_edge)
    edge_seconds = max(ranks["rank_cpu"]) * per_slice_edge
    out = []
    for machines in (8, 16):
        slice_edges, owned = edges / machines, nodes / machines
        memory, rows = edge_bytes * slice_edges / 1e9, 2 * row * owned / 1e9
        minutes = edge_seconds * slice_edges / 60
        cells = [f"{memory:.1f} GB", f"{rows:.1f} GB", f"≈ {memory + rows:.0f} GB",
                 f"≈ {minutes:.0f} min"]
        if machines == 8:  # the first row shows the arithmetic
            cells = [f"{edge_bytes} B × {slice_edges / 1e6:.0f}M = {cells[0]}",
                     f"2 × {row} B × {owned / 1e6:.1f}M = {cells[1]}", cells[2],
                     f"{edge_seconds * 1e6:.1f} µs × {slice_edges / 1e6:.0f}M {cells[3]}"]
        out.append([str(machines), f"{slice_edges / 1e6:.0f}M", *cells])
    return out


def _capped_rows(r: dict) -> list[list[str]]:
    """One host against the hosts together under a memory cap, from
    ``benchmarks/partition_testbed.py``."""
    names = {"one host": "one host, single-process `metis-coarse`"}
    out = []
    for run in r["runs"]:
        hosts = run["hosts"]
        codes = sorted({h["returncode"] for h in hosts})
        exits = ", ".join(f"{c} ({signal.Signals(-c).name})" if c < 0 else str(c) for c in codes)
        peaks = [h["memory_peak"] for h in hosts]
        peak = (f"{r['cap'] / 2**30:.2f} (the cap)" if max(peaks) >= 0.999 * r["cap"]
                else _span([p / 2**30 for p in peaks], ".2f"))
        out.append([names.get(run["run"],
                              f"{run['run']}, torchrun, `pyg-dist partition --distributed`"),
                    exits, str(sum(h["oom_kills"] for h in hosts)), peak,
                    f"{max(h['seconds'] for h in hosts):.1f}"])
    return out


#: How results.md names the installs of ``benchmarks/binary_wheel.py``.
INSTALLS = {"wheel": "the wheel (`pip install --no-deps` into a fresh venv)",
            "source": "source (`pip install -e .`), empty cache",
            "source, cached": "source, second run (cached)"}


def _wheel_rows(r: dict) -> list[list[str]]:
    """The first runs of the wheel and of the source install, from
    ``benchmarks/binary_wheel.py``: seconds, and where their C++ kernels came from."""
    out = []
    for run in r["runs"]:
        if "origin" in run:
            kernels = (f"{run['origin']} (`{run['library'].split('.')[0]}`), "
                       + ("nothing compiled" if not run["cache"] else "compiled too"))
        elif run["said_compiling"]:
            kernels = ("compiled once, said once on stderr for the 4 ranks"
                       if run["said_compiling"] == 1 else
                       f"compiled, said {run['said_compiling']} times on stderr")
        else:
            kernels = "cached"
        out.append([INSTALLS[run["install"]], f"{run['seconds']:.1f} s", kernels])
    return out


#: The results.md tables kept with the JSON their command wrote (in
#: ``benchmarks/results/``): ``(section, a header cell naming the table) ->
#: (JSON file, the table's rows of one JSON row)``.
KEPT_TABLES = {
    ("Your own loop on Cora", "loop left as it is"): ("own_loop.json", _own_loop_rows),
    ("Pre-aggregation: rows a vertex cover saves", "METIS s"): ("preaggregate.json",
                                                                _cover_rows),
    ("Pre-aggregation in training", "partial sums/epoch"): ("preaggregate_train.json",
                                                            _training_rows),
    ("Link prediction: the gather's bytes against the halo's", "gather / halo"): (
        "link_bytes.json", _link_bytes_rows),
    ("Embeddings out: memory while the ranks write", "beyond the chunk"): (
        "embeddings.json", _embedding_rows),
    (GRID, "stored in"): ("grid_3d_balance.json", lambda r: [
        [r["grid"], r["stored in"], *(f"{r[k]:.3f}x" for k in ("none", "random", "double"))]]),
    (GRID, "farthest block from its share"): ("grid_3d_memory.json", lambda r: [
        [str(r["ranks"]), r["grid"], r["sums"], r["cut"], f"{r['grid MiB']:,}",
         f"{r['graph-parallel MiB']:,}", f"{r['ratio']:.2f}x", f"{r['stray %']:.1f}%",
         f"{r['blocks MiB']:,}"]]),
    (GRID, "in collectives s"): ("grid_3d_cluster.json", _grid_cluster_rows),
    (GRID_METIS, "in collectives s"): ("grid_3d_cluster_metis.json", _grid_cluster_rows),
    (GRID_UNSHAPED, "in collectives s"): ("grid_3d_cluster_unshaped.json", _grid_cluster_rows),
    (GRID_400K, "in collectives s"): ("grid_3d_cluster_400k.json", _grid_cluster_rows),
    (GRID_16, "in collectives s"): ("grid_3d_cluster_16.json", _grid_cluster_rows),
    (GPU, "planner's prediction"): ("gpu_regime.json", _policy_rows),
    (FP_DROPOUT, "predicted / measured"): ("feature_parallel.json", _feature_parallel_rows),
    (FP_RANDOM_DROPOUT, "predicted / measured"): ("feature_parallel_random_dropout.json",
                                                  _feature_parallel_rows),
    (FP_LOSS, "predicted / measured"): ("feature_parallel_random.json", _feature_parallel_rows),
    (FP_400K, "predicted / measured"): ("feature_parallel_400k.json", _feature_parallel_rows),
    (FP_METIS, "predicted / measured"): ("feature_parallel_metis.json", _feature_parallel_rows),
    (GRID_COLLECTIVES, "of the link"): ("grid_collectives.json", _collective_rows),
    (LINK_PEER, "s to the recipe's best"): ("peer_link.json", _link_peer_rows),
    ("Partitioning large graphs", "METIS s (inside METIS)"): ("partition.json",
                                                              _partition_rows),
    (TIME, "s to target"): ("time_to_accuracy.json", _time_rows),
    (TIME, "halo wait"): ("time_to_accuracy.json", _time_spent_rows),
    (RECIPES, "C&S s per evaluation"): ("recipes_cora.json", _recipe_rows),
    (FULL_BATCH, f"s to {100 * FULL_BATCH_TARGET:.2f}% val"): ("recipes_ogb.json",
                                                               _recipe_target_rows),
    (RECIPES, PEER_TABLE): ("time_to_accuracy_cora.json", _best_epoch_rows),
    ("Memory over a long run", "VmRSS at end MB, after"): ("long_run.json", _long_run_rows),
    ("The binary wheel", "C++ kernels"): ("wheel.json", _wheel_rows),
    (RANKS, "CPU s (per rank)"): ("partition_ranks.json", _ranks_rows),
    (CAPPED, "killed for memory"): ("partition_testbed.json", _capped_rows),
    (RANKS_300M, "CPU s (per rank)"): ("partition_ranks_300m.json", _ranks_rows),
    (PAPERS, "edge memory"): ("partition_ranks_300m.json", _papers100m_rows),
    ("Heterogeneous graphs", "model, run"): ("hetero_sage.json", _hetero_rows),
    ("Heterogeneous models on the ranks", "model, run"): ("hetero_models.json", _hetero_rows),
}


def figures(text: str) -> list[tuple[str, set[tuple[float, str]]]]:
    """Each figure of ``text`` as written, in its order, with the (value,
    unit) pairs it states (both ends of a range); a graph's size is
    (text, "size")."""
    out = []
    for match in FIGURE.finditer(text):
        low, high, unit = match.groups()
        values = {(float(low.replace(",", "")), unit.strip())}
        if high is not None:
            values.add((float(high.replace(",", "")), unit.strip()))
        out.append((match.start(), match.group(0), values))
    out += [(match.start(), match.group(0), {(match.group(1), "size")})
            for match in SIZE.finditer(text)]
    return [(written, values) for _, written, values in sorted(out, key=lambda f: f[0])]


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


def sections(text: str) -> dict[str, str]:
    """Each ``##`` or ``###`` section of ``text`` by its title (up to the
    next heading of either level)."""
    parts = re.split(r"^#{2,3} (.+)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def cells(section: str) -> list[tuple[list[str], list[str], str]]:
    """Every row of ``section``'s tables: (its cells, its table's header
    cells, the header line)."""
    out, header, line = [], None, ""
    for row in section.splitlines():
        if not row.startswith("|"):
            header = None
            continue
        split = [c.strip() for c in row.strip().strip("|").split("|")]
        if header is None:
            header, line = split, row
        elif not set(row) <= set("|-: "):
            out.append((split, header, line))
    return out


def source_values(section: str, source: Any) -> set:
    """What the source of a README figure holds (see :data:`README_SOURCES`)."""
    if isinstance(source, list):
        values = set().union(*(source_values(section, one) for one in source))
        by_unit: dict[str, list] = {}
        for value, unit in values:
            by_unit.setdefault(unit, []).append(value)
        return {(f(v), unit) for unit, v in by_unit.items() for f in (min, max)}
    if isinstance(source, tuple):
        row, column, *table = source
        name, _, k = column.partition("#")
        found = []
        for values, header, line in cells(section):
            if table and table[0] not in line:
                continue
            if " | ".join(values).startswith(row) and (
                    " | ".join(values) == row or " | ".join(values).startswith(row + " |")):
                columns = [i for i, h in enumerate(header) if h == name]
                if len(columns) >= int(k or 1):
                    found.append(values[columns[int(k or 1) - 1]])
        assert len(found) == 1, (f"the row '{row}' with a column '{column}' is in "
                                 f"{len(found)} tables")
        return held(found[0])
    text = " ".join(section.split())
    before, _, after = source.partition("{}")
    found = []
    for start in (m.end() for m in re.finditer(re.escape(before), text)):
        rest = text[start:]
        match = FIGURE.match(rest.lstrip("*`(")) or SIZE.match(rest.lstrip("*`("))
        tail = rest.lstrip("*`(")[match.end():].lstrip("*`)") if match else ""
        if match and tail.startswith(after):
            found.append(match.group(0))
    assert len(found) == 1, f"'{source}' precedes a figure {len(found)} times in the section"
    return figures(found[0])[0][1]


def readme_mismatches(readme: str, results: str) -> list[str]:
    """README's figures that are not the values of their sources."""
    quoted = figures(readme)
    assert len(quoted) == len(README_SOURCES), (
        f"README.md quotes {len(quoted)} figures, README_SOURCES names {len(README_SOURCES)}: "
        f"name the source of each, in README's order")
    by_title = sections(results)
    wrong = []
    for (text, values), (title, source) in zip(quoted, README_SOURCES):
        if title == SETTING:
            continue
        held_there = source_values(by_title[title], source)
        if values != held_there:
            wrong.append(f"{text} (results.md, {title}: {source} holds "
                         f"{sorted(v for v, _ in held_there)})")
    return wrong


def test_each_readme_figure_is_the_value_of_its_source():
    wrong = readme_mismatches((REPO / "README.md").read_text(), RESULTS.read_text())
    assert not wrong, f"README.md states figures its sources do not: {wrong}"


def test_a_swapped_or_stale_readme_figure_fails():
    readme, results = (REPO / "README.md").read_text(), RESULTS.read_text()
    swapped = readme.replace("73.6 s (0.15x) at 0.66x", "73.6 s (0.66x) at 0.15x")
    assert swapped != readme
    assert len(readme_mismatches(swapped, results)) == 2
    stale = results.replace("| gradient-only | +0.78 | 0.17 | 0.78 s | 0.28x |",
                            "| gradient-only | +0.78 | 0.17 | 0.78 s | 0.30x |")
    assert stale != results
    assert readme_mismatches(readme, stale) == [
        "0.28x (results.md, The GPU regime: where communication dominates: "
        "('gradient-only', 'vs exact') holds [0.3])"]


def test_each_kept_table_is_the_json_its_command_wrote(capsys):
    results = RESULTS.read_text()
    by_title = sections(results)
    for (title, header), (name, rows_of) in KEPT_TABLES.items():
        section = by_title[title]
        assert f"--json benchmarks/results/{name}" in section, (
            f"the command of results.md's '{title}' writes benchmarks/results/{name}")
        table = [values for values, columns, _ in cells(section) if header in columns]
        kept = json.loads((REPO / "benchmarks" / "results" / name).read_text())
        kept = kept if isinstance(kept, list) else [kept]  # an object is one record
        assert table == [row for r in kept for row in rows_of(r)], (
            f"results.md's '{title}' table is not benchmarks/results/{name}: copy the "
            f"figures its command wrote")
    total = sum(1 for line in results.splitlines() if re.fullmatch(r"\|[-|: ]+\|", line))
    with capsys.disabled():
        print(f"\nresults.md: {len(KEPT_TABLES)} of its {total} tables kept with their JSON")


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
