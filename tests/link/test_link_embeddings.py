"""Embeddings out: every rank writes its rows with their global ids; the
reader gives them back in global order, equal to single-process PyG's
embeddings after the same training; a damaged file or a missing folder is
refused naming the fix, and no partial folder is left behind."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from link_cases import graph, link_split, model
from tolerances import assert_close

import pyg_dist
from pyg_dist.loop.embeddings import MANIFEST


def test_every_rank_writes_its_rows_in_global_order(world):
    size, cases, refs, _ = world
    for case, (data, _, (_, grads, _, _)) in zip(cases, refs):
        emb = pyg_dist.read_embeddings(case["emb"])
        assert len(emb) == data.num_nodes
        assert_close(emb.tensor(), grads["embeddings"], what=f"{case['kind']} embeddings")
        assert_close(torch.from_numpy(emb[[3, 0, 3]]), grads["embeddings"][[3, 0, 3]])
        emb_dir = Path(case["emb"])
        manifest = json.loads((emb_dir / MANIFEST).read_text())
        assert manifest["ranks"] == size and sum(manifest["rows_per_rank"]) == data.num_nodes
        assert not list(emb_dir.parent.glob(f".{emb_dir.name}.partial*"))


def test_one_process_and_damage(tmp_path):
    split = link_split(graph(), True)
    net = model("gcn-dot", split[0].x.size(1))
    out = pyg_dist.save_embeddings(net, split[0], tmp_path / "emb")
    with torch.no_grad():
        ref = net(split[0].x, split[0].edge_index)
    assert np.array_equal(pyg_dist.read_embeddings(out).numpy(), ref.numpy())
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        pyg_dist.save_embeddings(net, split[0], out)
    rows = out / "rows_0.npy"
    raw = bytearray(rows.read_bytes())
    raw[-1] ^= 1
    rows.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="does not match its checksum"):
        pyg_dist.read_embeddings(out)
    with pytest.raises(FileNotFoundError, match="write them with pyg_dist.save_embeddings"):
        pyg_dist.read_embeddings(tmp_path / "nothing")


def test_write_embeddings_orders_rows_by_their_global_ids(tmp_path):
    from pyg_dist.loop import write_embeddings

    gid = torch.tensor([4, 0, 3, 1, 2])
    rows = torch.arange(10, dtype=torch.float32).view(5, 2)
    out = write_embeddings(rows, gid, tmp_path / "emb")
    got = pyg_dist.read_embeddings(out).numpy()
    assert got.tolist() == [[2, 3], [6, 7], [8, 9], [4, 5], [0, 1]]
    with pytest.raises(ValueError, match=r"got 5 rows and 4 global ids; pass the global id of "
                                         r"each row \(data.global_id\)"):
        write_embeddings(rows, gid[:4], tmp_path / "other")
    assert not (tmp_path / "other").exists()
    assert not list(tmp_path.glob(".other*"))
