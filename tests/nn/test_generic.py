"""The generic path (DistMessagePassing): layers keep their class, state and
pickling, script inside a module, and layers that cannot run exactly are
refused unless declared with register_exact."""
import copy
import pickle

import pytest
import torch
from graphs import awkward_graph
from tolerances import assert_close
from torch_geometric.nn import APPNP, ChebConv, GINConv, MFConv, SGConv

from pyg_dist.halo import Stale
from pyg_dist.nn import DistMessagePassing, register_exact, to_distributed


def test_torchscript_compiles_a_module_around_a_generic_layer():
    """(PyG's GATConv does not script with this PyTorch; GINConv does.)"""
    class Around(torch.nn.Module):
        def __init__(self, conv):
            super().__init__()
            self.conv = conv

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            return self.conv(x, edge_index)

    data = awkward_graph()
    x = torch.randn(data.num_nodes, 6)
    conv = DistMessagePassing(GINConv(torch.nn.Linear(6, 4), train_eps=True))
    assert_close(torch.jit.script(Around(conv))(x, data.edge_index), conv(x, data.edge_index))


def test_generic_layers_keep_class_state_and_pickle():
    data = awkward_graph()
    x = torch.randn(data.num_nodes, 6)
    conv = GINConv(torch.nn.Linear(6, 4), train_eps=True)
    state = {k: v.clone() for k, v in conv.state_dict().items()}
    expected = conv(x, data.edge_index)
    ours = DistMessagePassing(conv, halo=Stale(every=2))
    assert ours is conv and isinstance(ours, GINConv) and type(ours).__name__ == "DistGINConv"
    assert list(ours.state_dict()) == list(state)
    assert repr(ours).startswith("DistGINConv(") and "halo=Stale(every=2)" in repr(ours)
    for copied in (copy.deepcopy(ours), pickle.loads(pickle.dumps(ours))):
        assert type(copied) is type(ours) and copied.halo == Stale(every=2)
        assert_close(copied(x, data.edge_index), expected)


@pytest.mark.parametrize("layer,match", [
    (lambda: SGConv(4, 2, K=2), r"'SGConv' cannot run distributed exactly: it runs K hops"),
    (lambda: APPNP(K=3, alpha=0.1), r"'APPNP' cannot run distributed exactly"),
    (lambda: ChebConv(4, 2, K=2), r"normalises by source degrees"),
    (lambda: MFConv(4, 2), r"'MFConv' is not known to run distributed exactly.*register_exact"),
])
def test_layers_that_cannot_run_exactly_are_refused(layer, match):
    model = torch.nn.ModuleList([GINConv(torch.nn.Linear(4, 4)), layer()])
    with pytest.raises(ValueError, match=match):
        to_distributed(model)
    assert type(model[0]) is GINConv  # nothing was converted


def test_register_exact_declares_a_layer():
    from pyg_dist.nn.generic import _EXACT_LAYERS, _REFUSED

    saved = dict(_EXACT_LAYERS), dict(_REFUSED)
    try:
        register_exact(MFConv)
        conv = to_distributed(MFConv(4, 2))
        assert isinstance(conv, DistMessagePassing)
    finally:
        _EXACT_LAYERS.clear()
        _EXACT_LAYERS.update(saved[0])
        _REFUSED.clear()
        _REFUSED.update(saved[1])
