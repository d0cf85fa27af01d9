"""``pyg-dist train --save FILE`` on 2 ranks writes one state_dict that loads
into PyG's own model (``torch_geometric.nn.models.GCN``), which then gives the
accuracy the run reported and the outputs of the trained model in one
process."""
import json

import torch
from tolerances import assert_close
from torch_geometric.nn.models import GCN

import pyg_dist
from pyg_dist.cli import main
from pyg_dist.datasets import synthetic
from pyg_dist.models import GNN


def test_saved_state_dict_loads_into_the_plain_pyg_model(tmp_path, capsys):
    graph = synthetic(num_nodes=400, seed=0)
    pyg_dist.partition(graph, 2, tmp_path / "parts")
    saved = tmp_path / "out" / "gcn.pt"
    main(["train", "--dataset", "synthetic", "--parts-dir", str(tmp_path / "parts"),
          "--parts", "2", "--model", "gcn", "--epochs", "5", "--no-progress",
          "--save", str(saved)])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["saved"] == str(saved) and result["config"]["run"]["save"] == str(saved)
    assert [p.name for p in saved.parent.iterdir()] == ["gcn.pt"]  # no partial file left
    state = torch.load(saved)
    classes = int(graph.y.max()) + 1
    plain = GCN(graph.num_features, 16, 2, classes)
    plain.load_state_dict(state)  # strict: the same keys, shapes
    plain.eval()
    with torch.no_grad():
        out = plain(graph.x, graph.edge_index)
    mask = graph.test_mask
    accuracy = float((out.argmax(-1)[mask] == graph.y[mask]).sum()) / int(mask.sum())
    assert accuracy == result["final_test_acc"]
    ours = GNN("gcn", graph.num_features, 16, classes)  # Dist layers, one process
    ours.load_state_dict(state)
    ours.eval()
    with torch.no_grad():
        assert_close(ours(graph.x, graph.edge_index), out, what="outputs")
