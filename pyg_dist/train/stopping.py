"""The evaluation's stop rules: a target accuracy, patience, a time budget.
Every decision is taken from values all ranks agree on (global accuracies, the
slowest rank's clock), so every rank stops after the same epoch."""
from __future__ import annotations

from pyg_dist.runtime import distributed
from pyg_dist.strategies.settings import Evaluation
from pyg_dist.train.result import EpochStats, TrainResult

__all__ = ["StopRules"]


class StopRules:
    """Decides after each evaluation whether training stops, and why.

    Args:
        evaluation (Evaluation): The rules.
        result (TrainResult): The result so far (a resumed run's history
            counts toward patience).
    """

    def __init__(self, evaluation: Evaluation, result: TrainResult) -> None:
        self.evaluation = evaluation
        # Evaluations since the best one (a resumed run counts from its history).
        self.waited = sum(1 for e in result.history if e.evaluated and e.epoch > result.best_epoch)

    def elapsed(self, seconds: float) -> float:
        """The training seconds every rank goes by: with a time budget, the
        slowest rank's ``seconds`` (collective: every rank calls it once per
        epoch); without one, this rank's own.

        Args:
            seconds (float): This rank's seconds of training so far.
        """
        if self.evaluation.time_budget is None:
            return seconds
        return distributed.all_reduce_values([seconds], op="max")[0]

    def over_budget(self, elapsed: float) -> bool:
        """Whether ``elapsed`` (from :meth:`elapsed`) spent the time budget.

        Args:
            elapsed (float): The seconds every rank goes by.
        """
        budget = self.evaluation.time_budget
        return budget is not None and elapsed >= budget

    def after(self, stats: EpochStats, result: TrainResult, elapsed: float) -> str | None:
        """Why training stops after the evaluation ``stats`` (:obj:`None`: it
        goes on); the same on every rank.

        Args:
            stats (EpochStats): The epoch just evaluated.
            result (TrainResult): The result so far, its best epoch updated.
            elapsed (float): The seconds every rank goes by (:meth:`elapsed`).
        """
        rules = self.evaluation
        self.waited = 0 if result.best_epoch == stats.epoch else self.waited + 1
        if rules.target_acc is not None and stats.val_acc >= rules.target_acc:
            if result.epochs_to_target is None:
                result.time_to_target, result.epochs_to_target = result.seconds, stats.epoch
            return "target"
        if rules.patience is not None and self.waited >= rules.patience:
            return "patience"
        if self.over_budget(elapsed):
            return "time_budget"
        return None
