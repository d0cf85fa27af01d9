"""``pyg-dist plan``'s table: the best few per risk, each against exact
training, the choice marked, why each other one lost; rows worked by hand."""
from command_line import pyg_dist_command

from pyg_dist.cli.plan_table import plan_table


def row(strategy, risk, step, bytes_, chosen=False, eval_s=0.010):
    return {"strategy": strategy, "risk": risk, "predicted_step_s": step,
            "predicted_epoch_s": step + eval_s, "predicted_bytes_per_epoch": bytes_,
            "chosen": chosen}


ROWS = sorted([
    row("graph-parallel isolated", "approximate", 0.005, 1000),
    row("graph-parallel stale:4", "stale", 0.006, 4000),
    row("graph-parallel stale:2", "stale", 0.007, 5000),
    row("graph-parallel stale:8", "stale", 0.0065, 4500),
    row("graph-parallel stale:16", "stale", 0.0068, 4400),
    row("graph-parallel exact,compress=int8", "compressed", 0.0100, 2500, chosen=True),
    row("graph-parallel exact,compress=fp16", "compressed", 0.0100, 5000),
    row("graph-parallel exact, grad fp16", "compressed", 0.0150, 9000),
    row("graph-parallel exact", "exact", 0.0190, 10000),
], key=lambda r: r["predicted_step_s"])
CHOICE = {"choice": "graph-parallel exact,compress=int8", "accept": "compressed", "epochs": 50,
          "parts": 2, "probe_seconds": 1.25, "probe": {"step_seconds": 0.0123}}


def test_the_table_shows_the_best_per_risk_against_exact_and_why_each_lost():
    lines = plan_table(ROWS, CHOICE)
    assert lines[0] == ("9 strategies predicted for 50 epochs on 2 ranks (probe 1.2 s, "
                        "measured step 12.3 ms)")
    # stale shows its 3 fastest: stale:16 (6.8 ms) is one, stale:2 (7 ms) is not
    rows = [line for line in lines if line.startswith(("exact ", "compressed ", "stale ",
                                                       "approximate "))]
    assert [r.split("  ")[0].strip() for r in rows] == \
        ["exact", "compressed", "compressed", "compressed", "stale", "stale", "stale",
         "approximate"]
    assert not any("stale:2 " in r for r in rows)
    chosen = next(r for r in rows if "*" in r.split("graph-parallel")[0])
    assert "exact,compress=int8" in chosen and chosen.endswith("(chosen)")
    # against exact (29 ms, 10 kB): the choice's epoch 20 ms = 0.69x, its bytes 0.25x
    assert "20.0 ms     0.69x" in chosen and "2.5 kB     0.25x" in chosen
    exact = rows[0]
    assert "29.0 ms     1.00x" in exact and exact.endswith("45.0% slower per epoch")
    fp16 = next(r for r in rows if "compress=fp16" in r)
    assert fp16.endswith("as fast (within 1%), more bytes")
    assert rows[-1].endswith("risk approximate above --accept compressed")
    # aligned: every column starts at the same place on every row
    header = lines[3]
    assert header.split() == ["risk", "strategy", "epoch", "vs", "exact", "bytes/epoch", "vs",
                              "exact", "why", "not", "chosen"]
    for r in rows:
        assert r.index("graph-parallel") == header.index("strategy")
        assert r.index(" ms") + 3 == header.index("epoch") + len("epoch")
    assert lines[-3] == "* chosen at --accept compressed: graph-parallel exact,compress=int8"
    assert lines[-1] == ("1 more predictions, slower than those shown of their risk; --json "
                         "prints every one")


def why_not(rows, strategy):
    choice = {**CHOICE, "choice": "graph-parallel exact", "accept": "exact"}
    return next(line for line in plan_table(rows, choice)
                if line.startswith("exact ") and f" {strategy}  " in line)


def test_equally_fast_rows_lose_on_bytes_shown_apart_or_on_speed():
    """choose(): of the rows within 1% of the fastest, the fewest bytes, then
    the fastest; bytes that print alike (184.5 kB) are shown in full."""
    chosen = row("graph-parallel exact", "exact", 0.0100, 184_512, chosen=True)
    rows = [chosen, row("graph-parallel exact, grad fp16", "exact", 0.01005, 184_548),
            row("graph-parallel exact, pre-aggregated", "exact", 0.0101, 184_512)]
    assert why_not(rows, "graph-parallel exact, pre-aggregated").endswith(
        "as fast (within 1%) and as many bytes, 0.50% slower per epoch")
    assert why_not(rows, "graph-parallel exact, grad fp16").endswith(
        "as fast (within 1%), more bytes (184,548 B against 184,512 B)")
    # fewer bytes but 2% slower than the fastest: no tie, its speed lost
    rows = [chosen, row("graph-parallel exact, p2p", "exact", 0.0102, 180_000)]
    assert why_not(rows, "graph-parallel exact, p2p").endswith("1.0% slower per epoch")
    rows = [chosen, row("graph-parallel exact, p2p", "exact", 0.0100, 190_000)]
    assert why_not(rows, "graph-parallel exact, p2p").endswith(
        "as fast (within 1%), more bytes")


def test_plan_prints_the_table_on_a_real_probe():
    out = pyg_dist_command("plan", "--dataset", "synthetic", "--num-nodes", "300", "--parts",
                           "2", "--epochs", "20", "--no-progress")
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert "strategies predicted for 20 epochs on 2 ranks" in lines[0]
    marked = [line for line in lines if line.startswith("exact") and "(chosen)" in line]
    assert len(marked) == 1 and "*" in marked[0]
    assert any(line.startswith("* chosen at --accept exact: ") for line in lines)
