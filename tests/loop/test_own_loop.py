"""A PyG training loop of one's own on 2 and 4 gloo ranks: with
``DistributedModel`` and ``pyg_dist.cross_entropy`` it ends with the weights
of single-process training on the whole graph; a loop that leaves gradients
unsummed warns at its first step, the three loops that sum them do not; a
mean over local rows warns under the wrapper."""
import functools
import json
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from graphs import awkward_graph
from tolerances import TOL, assert_close
from torch_geometric.nn import GCNConv
from worlds import Battery

import pyg_dist
from pyg_dist.loop import LocalLossWarning
from pyg_dist.nn.drift import GradientsNotSummedWarning

EPOCHS = 6
FEATURES, HIDDEN, CLASSES = 24, 16, 3


class GCN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = GCNConv(FEATURES, HIDDEN)
        self.conv2 = GCNConv(HIDDEN, CLASSES)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def graph():
    return awkward_graph(num_nodes=240, num_edges=1400, num_features=FEATURES, seed=3)


def pyg_loop(model, data, loss_fn, accuracy_fn, epochs=EPOCHS):
    """PyG's examples/gcn.py loop: the losses and the final accuracies."""
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    losses = []
    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        loss = loss_fn(out, data.y, data.train_mask)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(dim=-1)
    accs = [accuracy_fn(pred, data.y, mask) for mask in (data.train_mask, data.test_mask)]
    return losses, accs


def local_loss(out, y, mask):
    return F.cross_entropy(out[mask], y[mask])


def local_accuracy(pred, y, mask):
    return int((pred[mask] == y[mask]).sum()) / int(mask.sum())


def recorded(run):
    """``run()``'s value and the categories of the warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = run()
    return value, [w.category.__name__ for w in caught
                   if issubclass(w.category, (GradientsNotSummedWarning, LocalLossWarning))]


def state_of(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def body(parts, predictions):
    from torch.nn.parallel import DistributedDataParallel

    from pyg_dist.nn import to_distributed
    from pyg_dist.train import train

    data = pyg_dist.DistData.load(parts)
    out = {}

    def own(compress=None):
        torch.manual_seed(0)
        model = pyg_dist.DistributedModel(GCN(), grad_compress=compress)
        losses, accs = pyg_loop(model, data, pyg_dist.cross_entropy, pyg_dist.accuracy)
        if compress is None:  # every node's prediction, in global order
            with torch.no_grad():
                logits = model(data.x, data.edge_index)
            pyg_dist.save_predictions(logits, data, f"{predictions}/logits.npy")
            pyg_dist.save_predictions(logits.argmax(dim=-1), data, f"{predictions}/classes.npy")
        return {"state": state_of(model.module), "losses": losses, "accs": accs}

    for name, compress in (("own", None), ("own_covap1", "covap:1")):
        out[name] = recorded(functools.partial(own, compress))

    def naive():
        torch.manual_seed(0)
        model = to_distributed(GCN())
        pyg_loop(model, data, local_loss, local_accuracy, epochs=3)
        return state_of(model)

    out["naive"] = recorded(naive)

    def ddp():
        torch.manual_seed(0)
        model = DistributedDataParallel(to_distributed(GCN()))
        pyg_loop(model, data, pyg_dist.cross_entropy, pyg_dist.accuracy, epochs=3)
        return state_of(model.module)

    out["ddp"] = recorded(ddp)

    def trained():
        torch.manual_seed(0)
        model = to_distributed(GCN())
        train(model, data, 3, progress=False)
        return state_of(model)

    out["train"] = recorded(trained)

    def local_mean():
        torch.manual_seed(0)
        model = pyg_dist.DistributedModel(GCN())
        pyg_loop(model, data, local_loss, pyg_dist.accuracy, epochs=2)

    out["local_mean"] = recorded(local_mean)

    def accumulated():
        """Gradients of one backward, and of two backwards without zero_grad between."""
        torch.manual_seed(0)
        model = pyg_dist.DistributedModel(GCN())
        grads = []
        for backwards in (1, 2):
            model.zero_grad()
            for _ in range(backwards):
                out = model(data.x, data.edge_index)
                pyg_dist.cross_entropy(out, data.y, data.train_mask).backward()
            grads.append({n: p.grad.clone() for n, p in model.module.named_parameters()})
        return grads

    out["accumulated"] = accumulated()
    return out


def prepare(root, world_size):
    pyg_dist.partition(graph(), world_size, root / "parts", seed=0)
    return (str(root / "parts"), str(root / "predictions")), root / "predictions"


RANKS = {p: Battery(p, body, functools.partial(prepare, world_size=p),
                    name=f"own loop on {p} ranks") for p in (2, 4)}


@pytest.fixture(scope="module", params=(2, 4))
def world(request, tmp_path_factory):
    return RANKS[request.param].results(tmp_path_factory)


@pytest.fixture(scope="module")
def results(world):
    return world[1]


@pytest.fixture(scope="module")
def reference():
    """PyG's loop in one process, plain GCNConv on the whole graph."""
    torch.manual_seed(0)
    model = GCN()
    losses, accs = pyg_loop(model, graph(), local_loss, local_accuracy)
    return {"state": state_of(model), "losses": losses, "accs": accs}


def test_own_loop_trains_to_the_single_process_weights(results, reference):
    for rank_out in results:
        for name in ("own", "own_covap1"):
            ours, warned = rank_out[name]
            assert warned == [], name
            for key, value in reference["state"].items():
                assert_close(ours["state"][key], value, what=f"{name}: {key}")
            assert ours["losses"] == pytest.approx(reference["losses"], rel=TOL[torch.float32])
            assert ours["accs"] == pytest.approx(reference["accs"], abs=1e-12)


def test_naive_loop_warns_once_and_drifts(results):
    for rank_out in results:
        _, warned = rank_out["naive"]
        assert warned == ["GradientsNotSummedWarning"]
    first, second = results[0]["naive"][0], results[1]["naive"][0]
    assert not torch.equal(first["conv1.lin.weight"], second["conv1.lin.weight"])


@pytest.mark.parametrize("loop", ["ddp", "train"])
def test_loops_that_sum_gradients_do_not_warn(results, loop):
    for rank_out in results:
        state, warned = rank_out[loop]
        assert warned == [], loop
        for key, value in results[0][loop][0].items():
            assert torch.equal(state[key], value), f"{loop}: {key} differs between ranks"


def test_gradients_accumulated_over_two_backwards_are_summed_once(results, reference_grads):
    for rank_out in results:
        once, twice = rank_out["accumulated"]
        for name, value in reference_grads.items():
            assert_close(once[name], value, what=f"one backward: {name}")
            assert_close(twice[name], 2 * value, what=f"two backwards: {name}")


@pytest.fixture(scope="module")
def reference_grads():
    """The gradients of one single-process backward of the untrained model."""
    torch.manual_seed(0)
    model, data = GCN(), graph()
    out = model(data.x, data.edge_index)
    F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def test_a_mean_over_local_rows_warns_under_the_wrapper(results):
    for rank_out in results:
        assert rank_out["local_mean"][1] == ["LocalLossWarning"]


def test_predictions_file_equals_a_single_process_forward(world):
    folder, results = world
    model = GCN()  # plain PyG layers, the weights the ranks trained
    model.load_state_dict(results[0]["own"][0]["state"])
    model.eval()
    data = graph()
    with torch.no_grad():
        expected = model(data.x, data.edge_index)
    logits = torch.from_numpy(np.load(folder / "logits.npy"))
    assert_close(logits, expected, what="logits")
    classes = torch.from_numpy(np.load(folder / "classes.npy"))
    assert torch.equal(classes, expected.argmax(dim=-1))
    manifest = json.loads((folder / "logits.json").read_text())
    assert manifest["shape"] == [data.num_nodes, CLASSES] and manifest["dtype"] == "<f4"
    assert manifest["ranks"] == len(results) and sum(manifest["rows_per_rank"]) == data.num_nodes
    assert sorted(p.name for p in folder.iterdir()) == [
        "classes.json", "classes.npy", "logits.json", "logits.npy"]  # no partial file left
