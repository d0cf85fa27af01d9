"""``pyg-dist train`` on heterogeneous graphs under ``--halo auto``, as
docs/hetero.md spells it: HGT needs every halo row, so Auto keeps them even
where the halo is small enough to isolate another model's layers."""
import json

from command_line import pyg_dist_command
from hetero.hetero_graphs import two_community_hetero

import pyg_dist
from pyg_dist.halo import parse_policy


def train(*args):
    """``pyg-dist train ARGS`` in this process (tests/command_line.py): its JSON line."""
    out = pyg_dist_command("train", *args, "--no-progress")
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_hgt_trains_under_auto_as_the_docs_spell_it(tmp_path):
    small = train("--dataset", "synthetic-mag", "--num-nodes", "300", "--parts", "2",
                  "--model", "hgt", "--halo", "auto", "--epochs", "3", "--hidden", "8")
    assert small["model"] == "hgt" and small["halo"] == "auto" and small["epochs"] == 3
    # a cut that leaves well under 5% of each relation's in-neighbours remote
    pyg_dist.partition(two_community_hetero(), 2, tmp_path / "parts")
    light = train("--parts-dir", str(tmp_path / "parts"), "--model", "hgt", "--halo", "auto",
                  "--epochs", "4", "--hidden", "8")
    assert light["epochs"] == 4 and light["stopped"] == "epochs"
    layers = {k: c for k, c in light["halo_choices"].items() if k != "epoch"}
    assert layers and all(parse_policy(c["choice"]).name in ("exact", "stale")
                          for c in layers.values()), layers
    assert light["halo_bytes_fwd"] > 0
