"""PyG's ``examples/gcn.py`` loop on Cora (200 epochs, Adam, dropout 0.5,
seed 0) three ways, as test accuracies beside the single-process one measured
in the same run. A script, not a test::

    python benchmarks/own_loop.py --ranks 2 4 [--json out.json]

- ``single``: one process, plain ``GCNConv`` on the whole graph;
- ``wrapped``: the loop on every rank with ``pyg_dist.DistributedModel``,
  ``pyg_dist.cross_entropy`` and ``pyg_dist.accuracy`` (docs/own_loop.md);
- ``naive``: the layers made distributed, the loop left as it is (each rank's
  mean over its own training nodes, no gradient sum): each rank trains a copy
  of its own. Its row also gives the largest difference between rank 0's and
  rank 1's first-layer weights at the end, and whether the drift warning fired.

The accuracies are global (every rank's test nodes); dropout draws differ
between the runs, so ``wrapped`` matches ``single`` in distribution, not to
the digit (tests/loop/test_own_loop.py checks the weights without dropout).
"""
from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from tempfile import TemporaryDirectory

import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv

import pyg_dist
from pyg_dist.datasets import load_dataset
from pyg_dist.nn import to_distributed
from pyg_dist.nn.drift import GradientsNotSummedWarning

ROOT = Path(__file__).resolve().parents[1] / "tests" / "data"
EPOCHS = 200


class GCN(torch.nn.Module):
    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden_channels)
        self.conv2 = GCNConv(hidden_channels, out_channels)

    def forward(self, x: torch.Tensor, edge_index: object) -> torch.Tensor:
        x = F.dropout(x, p=0.5, training=self.training)
        x = self.conv1(x, edge_index).relu()
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index)


def pyg_loop(model, data, loss_fn, accuracy_fn) -> float:
    """PyG's loop; the test accuracy at the end."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(EPOCHS):
        model.train()
        optimizer.zero_grad()
        loss = loss_fn(model(data.x, data.edge_index), data.y, data.train_mask)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(dim=-1)
    return accuracy_fn(pred, data.y, data.test_mask)


def local_loss(out, y, mask):
    return F.cross_entropy(out[mask], y[mask])


def local_accuracy(pred, y, mask):
    return int((pred[mask] == y[mask]).sum()) / int(mask.sum())


def rank_main(parts: str) -> dict[str, object]:
    data = pyg_dist.DistData.load(parts)
    sizes = (data.x.size(1), 16, data.meta.num_classes)
    torch.manual_seed(0)
    wrapped = pyg_loop(pyg_dist.DistributedModel(GCN(*sizes)), data, pyg_dist.cross_entropy,
                       pyg_dist.accuracy)
    torch.manual_seed(0)
    model = to_distributed(GCN(*sizes))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        naive = pyg_loop(model, data, local_loss, pyg_dist.accuracy)
    warned = any(issubclass(w.category, GradientsNotSummedWarning) for w in caught)
    return {"wrapped": wrapped, "naive": naive, "warned": warned,
            "weight": model.conv1.lin.weight.detach().clone()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    data = load_dataset("cora", root=str(ROOT))
    torch.manual_seed(0)
    single = pyg_loop(GCN(data.num_features, 16, int(data.y.max()) + 1), data, local_loss,
                      local_accuracy)
    print(f"{'ranks':>5}  {'single':>7}  {'wrapped':>7}  {'naive':>7}  rank 0 - rank 1 weight  "
          f"warned")
    rows = []
    with TemporaryDirectory() as folder:
        for ranks in args.ranks:
            parts = str(Path(folder) / f"parts{ranks}")
            pyg_dist.partition(data, ranks, parts)
            out = pyg_dist.launch(rank_main, ranks, args=(parts,))
            apart = float((out[0]["weight"] - out[1]["weight"]).abs().max())
            print(f"{ranks:>5}  {single:>7.3f}  {out[0]['wrapped']:>7.3f}  "
                  f"{out[0]['naive']:>7.3f}  {apart:>22.3f}  {out[0]['warned']}")
            rows.append({"ranks": ranks, "single": single, "wrapped": out[0]["wrapped"],
                         "naive": out[0]["naive"], "apart": apart,
                         "warned": out[0]["warned"]})
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
