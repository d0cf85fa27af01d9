"""Full-graph training across the ranks: :func:`train`, what it returns, and
the pieces it is made of."""
from pyg_dist.train.loop import (
    EpochStats,
    TrainResult,
    accuracies,
    all_reduce_gradients,
    evaluate,
    global_loss,
    halo_choices,
    sync_parameters,
    train,
    train_step,
)
from pyg_dist.train.post import CorrectSmooth, PostResult, correct_and_smooth

__all__ = ["train", "evaluate", "accuracies", "TrainResult", "EpochStats", "sync_parameters",
           "all_reduce_gradients", "global_loss", "halo_choices", "train_step",
           "correct_and_smooth", "CorrectSmooth", "PostResult"]
