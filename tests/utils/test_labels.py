"""Labels as input: which training nodes show their label is a function of
(seed, epoch, global id) alone; the label columns are one-hot rows."""
import pytest
import torch

from pyg_dist.utils.labels import LabelInput


def test_the_split_is_a_function_of_seed_epoch_and_global_id():
    labels = LabelInput(num_classes=3)
    ids = torch.arange(20_000)
    train = torch.ones_like(ids, dtype=torch.bool)
    shown = labels.shown(ids, train, epoch=1)
    assert abs(shown.float().mean().item() - 0.5) < 0.01
    perm = torch.randperm(ids.numel(), generator=torch.Generator().manual_seed(0))
    assert torch.equal(labels.shown(ids[perm], train, 1), shown[perm])  # any order, any subset
    assert torch.equal(labels.shown(ids[:7], train[:7], 1), shown[:7])
    assert (shown != labels.shown(ids, train, 2)).float().mean() > 0.4  # a new split each epoch
    assert (shown != LabelInput(3, seed=1).shown(ids, train, 1)).float().mean() > 0.4
    quarter = LabelInput(3, rate=0.25).shown(ids, train, 1)
    assert abs(quarter.float().mean().item() - 0.25) < 0.01
    assert not (quarter & ~shown).any()  # a lower rate shows a subset: one hash, two cuts


def test_only_training_nodes_show_labels_and_columns_are_one_hot():
    labels = LabelInput(num_classes=4)
    y = torch.tensor([3, 0, 2, 1, 3])
    train = torch.tensor([True, True, False, True, False])
    shown = labels.shown(torch.arange(5) * 1000, train, epoch=1)
    assert not (shown & ~train).any()
    shown = torch.tensor([True, False, True, True, False])
    assert torch.equal(labels.columns(y, shown), torch.tensor(
        [[0., 0., 0., 1.], [0., 0., 0., 0.], [0., 0., 1., 0.], [0., 1., 0., 0.],
         [0., 0., 0., 0.]]))
    x = torch.full((5, 2), 7.0)
    assert torch.equal(labels.inputs(x, y, shown)[:, :2], x)
    assert labels.inputs(x, y, shown).shape == (5, 6)


@pytest.mark.parametrize("kwargs, message", [
    ({"num_classes": 0}, r"^LabelInput\(num_classes=0\): use the number of classes"),
    ({"num_classes": 3, "rate": 1.0}, r"^LabelInput\(rate=1\.0\): use a share in \(0, 1\)"),
])
def test_bad_options_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LabelInput(**kwargs)
