"""Training that stops when the job is done: each stop rule stops where it
should, learning-rate schedules survive a restart, a schedule of halo
policies switches at the epoch it names on every rank alike, and bad values
name the fix."""
from dataclasses import dataclass

import pytest
import torch
from graphs import awkward_graph
from tolerances import assert_close
from torch import nn
from torch.optim import lr_scheduler

import pyg_dist
import pyg_dist.train.loop as trainer
from pyg_dist.config import Adam, Checkpoint, Evaluation, GraphParallel
from pyg_dist.models import GNN
from pyg_dist.runtime import distributed
from pyg_dist.strategies import Runner, Step, Strategy
from pyg_dist.train import train

EPOCHS = 12


def one_part(tmp_path):
    pyg_dist.partition(awkward_graph(num_features=4), 1, tmp_path / "parts")
    return tmp_path / "parts"


def run(folder, epochs=EPOCHS, **options):
    data = pyg_dist.DistData.load(folder)
    torch.manual_seed(0)
    model = GNN("sage", 4, 8, 3, dropout=0.0)
    options.setdefault("optimizer", Adam(lr=0.05, weight_decay=0.0))
    return train(model, data, epochs, progress=False, **options)


def first_reaching(history, target):
    return next(e.epoch for e in history if e.val_acc >= target)


def test_target_stops_at_the_first_evaluation_that_reaches_it(tmp_path):
    folder = one_part(tmp_path)
    full = run(folder)
    assert full.stopped == "epochs" and full.epochs == EPOCHS
    assert full.time_to_target is None and full.epochs_to_target is None
    # A value the run reaches first after a few epochs.
    accs = sorted({e.val_acc for e in full.history[2:]})
    target = next(a for a in accs if first_reaching(full.history, a) > 2)
    expected = first_reaching(full.history, target)
    stopped = run(folder, evaluation=Evaluation(target_acc=target))
    assert stopped.stopped == "target"
    assert stopped.epochs == stopped.epochs_to_target == expected
    assert stopped.history[-1].val_acc == full.history[expected - 1].val_acc
    assert stopped.time_to_target == pytest.approx(stopped.seconds)
    summary = stopped.summary()
    assert summary["stopped"] == "target" and summary["epochs_to_target"] == expected
    # Evaluated every 4 epochs, the target is seen at the first evaluation reaching it.
    sparse = run(folder, evaluation=Evaluation(every=4, target_acc=target))
    seen = [e for e in full.history if e.epoch % 4 == 0 and e.val_acc >= target]
    assert sparse.epochs_to_target == (seen[0].epoch if seen else None)


#: The fake clock scripted runs advance and the loop reads (tests set
#: ``trainer._clock`` to read it).
CLOCK = [0.0]


@dataclass(frozen=True)
class Scripted(Strategy):
    """A strategy (unregistered: no name) whose runner trains nothing: each
    step costs ``seconds`` on :data:`CLOCK` (plus ``skew`` per rank) and each
    evaluation gives the next of ``val`` as the validation accuracy (training
    accuracy 0.9 and test accuracy 0.1 throughout)."""

    val: tuple[float, ...] = ()
    seconds: float = 1.0
    skew: float = 0.0

    def runner(self, model, task, settings):
        return ScriptedRun(self, model, task, settings)


class ScriptedRun(Runner):
    def __init__(self, strategy, model, task, settings):
        super().__init__(strategy, model, task, settings, sync=False)
        self.evaluations = 0

    def step(self, epoch, optimizer):
        CLOCK[0] += self.strategy.seconds + self.strategy.skew * distributed.rank()
        return Step(loss=0.0)

    def evaluate(self, step):
        acc = self.strategy.val[self.evaluations]
        self.evaluations += 1
        return 0.9, acc, 0.1


def scripted(data, val, epochs=None, **options):
    """``train`` under :class:`Scripted` (a linear model: the loop needs parameters)."""
    model = nn.Linear(4, 3)
    return train(model, data, epochs or len(val), progress=False,
                 strategy=Scripted(tuple(val), **options.pop("script", {})), **options)


#: Validation accuracies of a run that improves at epochs 1, 2, 5, 9 (worked by hand below).
VAL = [0.50, 0.60, 0.60, 0.55, 0.70, 0.70, 0.65, 0.70, 0.80, 0.80]


@pytest.mark.parametrize("patience, epochs, best", [
    (1, 3, 2),   # epoch 3 is the first without a better accuracy
    (2, 4, 2),   # epochs 3, 4
    (3, 8, 5),   # epochs 6, 7, 8 (epoch 5 improved on 0.60)
    (4, 10, 9),  # never four in a row: the last epoch ends it
])
def test_patience_counts_evaluations_without_a_better_one(tmp_path, patience, epochs, best):
    data = pyg_dist.DistData.load(one_part(tmp_path))
    result = scripted(data, VAL, evaluation=Evaluation(patience=patience))
    assert result.epochs == epochs and result.best_epoch == best
    assert result.stopped == ("patience" if epochs < len(VAL) else "epochs")
    assert result.val_acc == VAL[best - 1]


def test_patience_counts_evaluations_not_epochs(tmp_path):
    """Evaluated every 2 epochs, the evaluations see VAL at epochs 2, 4, 6, 8,
    10: 0.60 (best), 0.55, 0.70 (best), 0.70, 0.80 (best). Never two in a row
    without a better one: patience 2 runs to the end; patience 1 stops at the
    second evaluation, epoch 4."""
    data = pyg_dist.DistData.load(one_part(tmp_path))
    every2 = [v for e, v in enumerate(VAL, 1) if e % 2 == 0]
    result = scripted(data, every2, epochs=10,
                      evaluation=Evaluation(every=2, patience=2))
    assert result.stopped == "epochs" and result.best_epoch == 10
    result = scripted(data, every2, epochs=10, evaluation=Evaluation(every=2, patience=1))
    assert result.stopped == "patience" and result.epochs == 4 and result.best_epoch == 2


class Slow(nn.Module):
    """A model whose every training forward takes one second of a fake clock."""

    def __init__(self, model, clock):
        super().__init__()
        self.model, self.clock = model, clock

    def forward(self, x, edge_index):
        if self.training:
            self.clock[0] += 1.0
        return self.model(x, edge_index)


def test_time_budget_stops_after_the_epoch_that_spends_it(tmp_path, monkeypatch):
    folder = one_part(tmp_path)
    clock = [100.0]
    monkeypatch.setattr(trainer, "_clock", lambda: clock[0])
    data = pyg_dist.DistData.load(folder)
    model = Slow(GNN("sage", 4, 8, 3, dropout=0.0), clock)
    result = train(model, data, EPOCHS, progress=False,
                   evaluation=Evaluation(every=10, time_budget=3.5))
    assert result.stopped == "time_budget"
    assert result.epochs == 4 and result.seconds == 4.0
    # The stopping epoch is evaluated although the schedule says every 10.
    assert [e.evaluated for e in result.history] == [False, False, False, True]
    assert [e.seconds for e in result.history] == [1.0] * 4


def test_schedules_built_from_their_spelling(tmp_path):
    folder = one_part(tmp_path)
    cosine = run(folder, epochs=10,
                 optimizer=Adam(lr=0.1, weight_decay=0.0, schedule="cosine,warmup=2"))
    lrs = [e.lr for e in cosine.history]
    assert lrs[:3] == pytest.approx([0.1 / 3, 0.1 * 2 / 3, 0.1])
    assert lrs[3:] == sorted(lrs[3:], reverse=True) and lrs[-1] < 0.01


def test_a_plateau_schedule_halves_the_rate_after_patience_evaluations(tmp_path):
    """ReduceLROnPlateau(mode="max", patience=2) on the evaluations' accuracy:
    0.5, 0.6 (better), then 0.6 three times: the third makes it halve, so
    epoch 6 trains at 0.05; 0.7 (better), then three more: epoch 10 at 0.025."""
    data = pyg_dist.DistData.load(one_part(tmp_path))
    val = [0.5, 0.6, 0.6, 0.6, 0.6, 0.7, 0.7, 0.7, 0.7, 0.7]
    result = scripted(data, val, optimizer=Adam(lr=0.1, weight_decay=0.0,
                                                schedule="plateau,patience=2"))
    assert [e.lr for e in result.history] == pytest.approx([0.1] * 5 + [0.05] * 4 + [0.025])


def test_a_scheduler_for_another_optimizer_is_refused(tmp_path):
    folder = one_part(tmp_path)
    data = pyg_dist.DistData.load(folder)
    model = GNN("sage", 4, 8, 3)
    mine = torch.optim.Adam(model.parameters(), lr=0.01)
    other = torch.optim.SGD(GNN("sage", 4, 8, 3).parameters(), lr=0.1)
    with pytest.raises(ValueError, match="scheduler made for a different optimizer"):
        train(model, data, 2, progress=False,
              optimizer=(mine, lr_scheduler.CosineAnnealingLR(other, 10)))
    with pytest.raises(ValueError, match="none of the model's parameters"):
        train(model, data, 2, progress=False,
              optimizer=(other, lr_scheduler.CosineAnnealingLR(other, 10)))
    with pytest.raises(ValueError, match="make it with mode='max'"):
        train(model, data, 2, progress=False,
              optimizer=(mine, lr_scheduler.ReduceLROnPlateau(mine, mode="min")))
    with pytest.raises(TypeError, match=r"optimizer=\(opt, scheduler\)"):
        train(model, data, 2, progress=False, optimizer=(mine, "cosine"))


RESUME_EPOCHS, CKPT_EVERY, FAIL_AT = 9, 3, 7
WORLD = 4


class Interrupted(Exception):
    pass


def scheduled_run(folder, ckpt=None, fail_at=None, resume=False, init_seed=0):
    """2 ranks, a user's optimizer and warm-up + cosine scheduler pair."""
    data = pyg_dist.DistData.load(folder)
    torch.manual_seed(init_seed)
    model = GNN("sage", 4, 8, 3, dropout=0.0)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    sched = lr_scheduler.SequentialLR(opt, [lr_scheduler.LinearLR(opt, 0.25, total_iters=3),
                                            lr_scheduler.CosineAnnealingLR(opt, 6)], [3])

    def stop(stats):
        if stats.epoch == fail_at:
            raise Interrupted

    try:
        result = train(model, data, RESUME_EPOCHS, optimizer=(opt, sched), progress=False,
                       callback=stop, checkpoint=Checkpoint(ckpt, every=CKPT_EVERY,
                                                            resume=resume) if ckpt else None)
    except Interrupted:
        return None
    return {"state": {k: v.clone() for k, v in model.state_dict().items()},
            "lrs": [e.lr for e in result.history], "epochs": result.epochs}


def first_launch(folder, ckpt):
    straight = scheduled_run(folder)
    assert scheduled_run(folder, ckpt, fail_at=FAIL_AT) is None
    # A schedule of policies: exact, then no halo (isolated) from epoch 3, exact from 5.
    data = pyg_dist.DistData.load(folder)
    torch.manual_seed(0)
    model = GNN("sage", 4, 8, 3, dropout=0.0)
    seen = []
    result = train(model, data, 6, progress=False,
                   strategy=GraphParallel(halo="exact", phases="3=isolated;5=exact"),
                   callback=lambda s: seen.append(data.edge_index.registry.default.spec()))
    # A budget every rank spends at once: all stop after the first epoch together.
    budget = train(model, data, 5, progress=False, evaluation=Evaluation(time_budget=1e-9))
    # Clocks that disagree: rank r's step takes 1 + r/2 seconds, so the slowest
    # (rank 3) spends 3.5 s in its second epoch, rank 0 in its fourth. Every
    # rank stops by the slowest rank's clock, after epoch 2 (a rank going on
    # alone would wait in the next collective until the timeout).
    trainer._clock = lambda: CLOCK[0]
    skewed = scripted(data, [0.5] * 8, script={"skew": 0.5},
                      evaluation=Evaluation(time_budget=3.5))
    return {"straight": straight, "policies": seen,
            "fwd_bytes": [e.halo_bytes_fwd for e in result.history],
            "budget": (budget.epochs, budget.stopped),
            "skewed": (skewed.epochs, skewed.stopped)}


def second_launch(folder, ckpt):
    return scheduled_run(folder, ckpt, resume=True, init_seed=99)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    root = tmp_path_factory.mktemp("stopping")
    pyg_dist.partition(awkward_graph(num_features=4), WORLD, root / "parts", method="metis")
    args = (str(root / "parts"), str(root / "ckpt"))
    first = pyg_dist.launch(first_launch, WORLD, args=args, timeout=120)
    second = pyg_dist.launch(second_launch, WORLD, args=args, timeout=120)
    return first, second


def test_a_scheduler_resumes_where_it_stopped(ranks):
    first, second = ranks
    for rank, (a, b) in enumerate(zip(first, second)):
        straight = a["straight"]
        assert b["epochs"] == RESUME_EPOCHS
        assert b["lrs"] == pytest.approx(straight["lrs"])
        assert straight["lrs"][0] == pytest.approx(0.05 * 0.25)
        for name, value in straight["state"].items():
            assert_close(b["state"][name], value, what=f"rank {rank}: {name}")


def test_a_policy_schedule_switches_at_its_epoch_on_every_rank(ranks):
    first, _ = ranks
    expected = ["exact", "exact", "isolated", "isolated", "exact", "exact"]
    assert [r["policies"] for r in first] == [expected] * WORLD
    fwd = first[0]["fwd_bytes"]
    assert fwd[2] == fwd[3] == 0
    assert min(fwd[0], fwd[1], fwd[4], fwd[5]) > 0
    assert [r["budget"] for r in first] == [(1, "time_budget")] * WORLD


def test_a_time_budget_stops_every_rank_by_the_slowest_clock(ranks):
    first, _ = ranks
    assert [r["skewed"] for r in first] == [(2, "time_budget")] * WORLD


def test_accuracies_from_the_training_forward_are_one_step_behind(tmp_path):
    """Free evaluation: epoch e reports the accuracies of the weights epoch e
    started from, which a forward of their own measured after epoch e - 1."""
    folder = one_part(tmp_path)
    own = run(folder, epochs=6)
    reused = run(folder, epochs=6, evaluation=Evaluation(from_training=True))
    assert [e.val_acc for e in reused.history[1:]] == [e.val_acc for e in own.history[:-1]]
    assert [e.train_acc for e in reused.history[1:]] == [e.train_acc for e in own.history[:-1]]
    assert [e.loss for e in reused.history] == [e.loss for e in own.history]


def test_accuracies_from_the_training_forward_refuse_what_would_differ(tmp_path):
    folder = one_part(tmp_path)
    data = pyg_dist.DistData.load(folder)
    with pytest.raises(ValueError, match="differs from its evaluation forward"):
        train(GNN("sage", 4, 8, 3, dropout=0.5), data, 2, progress=False,
              evaluation=Evaluation(from_training=True))
    with pytest.raises(ValueError, match=r"convs.0 \(stale:2\), convs.1 \(stale:2\) differ"):
        train(GNN("sage", 4, 8, 3, dropout=0.0), pyg_dist.DistData.load(folder), 2,
              progress=False, strategy=GraphParallel(halo="stale:2"),
              evaluation=Evaluation(from_training=True))
    with pytest.raises(ValueError, match="graph-parallel training under one exact policy"):
        train(GNN("sage", 4, 8, 3, dropout=0.0), data, 2, progress=False,
              strategy=GraphParallel(phases="2=exact"), evaluation=Evaluation(from_training=True))
    with pytest.raises(ValueError, match="leave halo=None"):
        Evaluation(from_training=True, halo="exact")
