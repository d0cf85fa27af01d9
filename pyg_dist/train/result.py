"""What :func:`~pyg_dist.train.train` returns: every epoch's global
statistics (:class:`EpochStats`) and the run's result (:class:`TrainResult`)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["EpochStats", "TrainResult"]


@dataclass
class EpochStats:
    """One epoch, identical on every rank (all quantities are global).

    ``halo_bytes_fwd`` / ``halo_bytes_bwd`` are the bytes all ranks sent in
    the training step (halo rows, halo gradients) under the layers' policies;
    ``halo_bytes_eval`` those of the (exact) evaluation. ``comm_seconds`` is
    the time the average rank was blocked on halo exchanges, ``overlapped_seconds``
    the time exchanges travelled while it computed (pipelining).
    ``grad_bytes`` are the bytes all ranks handed the parameter gradients'
    all-reduce (compressed or not), ``grad_seconds`` the time the average
    rank waited for it after backward; ``regroup_seconds`` the time the
    average rank spent loading clusters (gradient-only mode). In a layer
    pipeline, ``stage_bytes`` are the activations and gradients all ranks sent
    between stages in training (evaluation's count as ``halo_bytes_eval``),
    ``stage_seconds`` the time the average rank waited for them. In
    feature-parallel training, ``all_to_all_bytes`` are the bytes all ranks
    sent between column slices and row blocks in training (forward and
    backward; evaluation's count as ``halo_bytes_eval``),
    ``all_to_all_seconds`` the time the average rank waited for them.

    Attributes:
        epoch (int): The epoch, from :obj:`1`.
        loss (float): The training loss of the epoch's step (all ranks' nodes).
        train_acc (float): Accuracy on ``train_mask``.
        val_acc (float): Accuracy on ``val_mask``.
        test_acc (float): Accuracy on ``test_mask``.
        halo_bytes_fwd (int): Halo rows' bytes all ranks sent in the training step.
        halo_bytes_bwd (int): Halo gradients' bytes all ranks sent in the training step.
        halo_bytes_eval (int): Bytes all ranks sent in the (exact) evaluation.
        comm_seconds (float): Seconds the average rank was blocked on halo exchanges.
        overlapped_seconds (float): Seconds exchanges travelled while the
            average rank computed.
        seconds (float): Seconds of the epoch.
        grad_bytes (int, optional): Bytes all ranks handed the gradients'
            all-reduce. (default: :obj:`0`)
        grad_seconds (float, optional): Seconds the average rank waited for it
            after backward. (default: :obj:`0.0`)
        regroup_seconds (float, optional): Seconds the average rank spent
            loading clusters (gradient-only mode). (default: :obj:`0.0`)
        stage_bytes (int, optional): Bytes all ranks sent between pipeline
            stages in training. (default: :obj:`0`)
        stage_seconds (float, optional): Seconds the average rank waited for
            them. (default: :obj:`0.0`)
        all_to_all_bytes (int, optional): Bytes all ranks sent in the
            all-to-alls of feature-parallel training. (default: :obj:`0`)
        all_to_all_seconds (float, optional): Seconds the average rank
            waited for them. (default: :obj:`0.0`)
        gather_bytes (int, optional): Bytes all ranks sent gathering rows by
            global id (a link task's pairs, in training and evaluation;
            :func:`pyg_dist.gather`). (default: :obj:`0`)
        gather_seconds (float, optional): Seconds the average rank spent
            in those exchanges. (default: :obj:`0.0`)
        train_seconds (float, optional): Seconds of the average rank in the
            training step (forward, backward, gradient sum, optimizer).
            (default: :obj:`0.0`)
        forward_seconds (float, optional): Seconds of the average rank in the
            step's forward alone. (default: :obj:`0.0`)
        eval_seconds (float, optional): Seconds of the average rank in
            evaluation. (default: :obj:`0.0`)
        evaluated (bool, optional): Whether the accuracies were measured after
            this epoch (else repeated from the last evaluation).
            (default: :obj:`True`)
        lr (float, optional): The learning rate of this epoch's step (of the
            first parameter group). (default: :obj:`0.0`)
    """

    epoch: int
    loss: float
    train_acc: float
    val_acc: float
    test_acc: float
    halo_bytes_fwd: int
    halo_bytes_bwd: int
    halo_bytes_eval: int
    comm_seconds: float
    overlapped_seconds: float
    seconds: float
    grad_bytes: int = 0
    grad_seconds: float = 0.0
    regroup_seconds: float = 0.0
    stage_bytes: int = 0
    stage_seconds: float = 0.0
    all_to_all_bytes: int = 0
    all_to_all_seconds: float = 0.0
    gather_bytes: int = 0
    gather_seconds: float = 0.0
    train_seconds: float = 0.0
    forward_seconds: float = 0.0
    eval_seconds: float = 0.0
    evaluated: bool = True
    lr: float = 0.0


@dataclass
class TrainResult:
    """What :func:`train` returns: the history, the test accuracy at the epoch
    of best validation accuracy, what policies that choose for themselves
    (:class:`~pyg_dist.halo.Auto`) chose per layer, predicted and measured,
    and why training stopped (one of :data:`~pyg_dist.config.STOPS`).

    ``time_to_target`` are the seconds of training (evaluations included)
    until validation accuracy first reached the evaluation's ``target_acc``,
    ``epochs_to_target`` the epochs; :obj:`None` while it has not.

    Attributes:
        history (list[EpochStats]): Every epoch trained, in order.
        best_epoch (int): The epoch of best validation accuracy.
        val_acc (float): The best validation accuracy.
        test_acc (float): The test accuracy at :obj:`best_epoch`.
        seconds (float): Seconds of training, evaluations included.
        halo_choices (dict): What policies that choose for themselves chose,
            per layer (see :func:`halo_choices`).
        stopped (str): Why training stopped, one of
            :data:`~pyg_dist.config.STOPS`.
        time_to_target (float, optional): Seconds until validation accuracy
            first reached the target.
        epochs_to_target (int, optional): Epochs until it did.
        setup (dict, optional): How the strategy set the run up: the halo
            policy of layers that set none (``"halo"``, its spec), whether a
            static input's halo was fetched once (``"input_cache"``), and
            what the strategy adds (gradient-only: ``"clusters_per_rank"``).
        plan (dict, optional): Under ``strategy="auto"``, the chosen strategy
            with its predicted epoch seconds and bytes beside the measured
            ones (see :mod:`pyg_dist.strategies.planner`).
        best_state (dict, optional): This rank's model ``state_dict`` at
            :obj:`best_epoch` (kept in checkpoints, so a resumed run has it
            too), for a step that starts from the best weights (Correct &
            Smooth); :obj:`None` before any evaluation.
    """

    history: list[EpochStats] = field(default_factory=list)
    best_epoch: int = 0
    val_acc: float = 0.0
    test_acc: float = 0.0
    seconds: float = 0.0
    halo_choices: dict[str, dict[str, Any]] = field(default_factory=dict)
    plan: dict[str, Any] | None = None
    stopped: str = "epochs"
    time_to_target: float | None = None
    epochs_to_target: int | None = None
    setup: dict[str, Any] = field(default_factory=dict)
    best_state: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def epochs(self) -> int:
        return len(self.history)

    def total(self, key: str) -> float:
        return sum(getattr(e, key) for e in self.history)

    @property
    def halo_bytes(self) -> int:
        """Everything all ranks sent: training (both directions) and evaluation."""
        return int(self.total("halo_bytes_fwd") + self.total("halo_bytes_bwd")
                   + self.total("halo_bytes_eval"))

    def summary(self) -> dict[str, Any]:
        comm, overlapped = self.total("comm_seconds"), self.total("overlapped_seconds")
        return {
            "test_acc": self.test_acc,
            "val_acc": self.val_acc,
            "best_epoch": self.best_epoch,
            "epochs": self.epochs,
            "halo_bytes": self.halo_bytes,
            "halo_bytes_fwd": int(self.total("halo_bytes_fwd")),
            "halo_bytes_bwd": int(self.total("halo_bytes_bwd")),
            "halo_bytes_eval": int(self.total("halo_bytes_eval")),
            "comm_seconds": round(comm, 4),
            "grad_bytes": int(self.total("grad_bytes")),
            "grad_seconds": round(self.total("grad_seconds"), 4),
            "regroup_seconds": round(self.total("regroup_seconds"), 4),
            "stage_bytes": int(self.total("stage_bytes")),
            "stage_seconds": round(self.total("stage_seconds"), 4),
            "all_to_all_bytes": int(self.total("all_to_all_bytes")),
            "all_to_all_seconds": round(self.total("all_to_all_seconds"), 4),
            "gather_bytes": int(self.total("gather_bytes")),
            "gather_seconds": round(self.total("gather_seconds"), 4),
            "overlap_fraction": round(overlapped / (comm + overlapped), 4)
            if comm + overlapped > 0 else 0.0,
            "seconds": round(self.seconds, 3),
            **{key: round(self.total(key), 4) for key in ("train_seconds", "forward_seconds",
                                                          "eval_seconds")},
            "stopped": self.stopped,
            "time_to_target": None if self.time_to_target is None
            else round(self.time_to_target, 3),
            "epochs_to_target": self.epochs_to_target,
            **({"halo_choices": self.halo_choices} if self.halo_choices else {}),
            **({"plan": self.plan} if self.plan else {}),
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary(), "history": [asdict(e) for e in self.history]}

    @property
    def last_accuracies(self) -> tuple[float, float, float]:
        """The last epoch's train, validation and test accuracies (nan before any)."""
        if not self.history:
            return float("nan"), float("nan"), float("nan")
        last = self.history[-1]
        return last.train_acc, last.val_acc, last.test_acc

    def record_best(self, stats: EpochStats, model: Any) -> None:
        """Makes ``stats`` the best epoch, keeping ``model``'s state, when it
        was evaluated and its validation accuracy beats the best so far (or
        none was evaluated before).

        Args:
            stats (EpochStats): The epoch just trained.
            model (torch.nn.Module): The model after it.
        """
        if stats.evaluated and (stats.val_acc > self.val_acc or self.best_epoch == 0):
            self.best_epoch = stats.epoch
            self.val_acc, self.test_acc = stats.val_acc, stats.test_acc
            self.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the result so far."""
        return {"history": [asdict(e) for e in self.history], "best_epoch": self.best_epoch,
                "val_acc": self.val_acc, "test_acc": self.test_acc, "seconds": self.seconds,
                "time_to_target": self.time_to_target,
                "epochs_to_target": self.epochs_to_target, "best_state": self.best_state}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> TrainResult:
        """The result :meth:`state_dict` kept.

        Args:
            state (dict): What :meth:`state_dict` returned.
        """
        return cls([EpochStats(**e) for e in state.get("history", [])],
                   state.get("best_epoch", 0), state.get("val_acc", 0.0),
                   state.get("test_acc", 0.0), state.get("seconds", 0.0),
                   time_to_target=state.get("time_to_target"),
                   epochs_to_target=state.get("epochs_to_target"),
                   best_state=state.get("best_state"))
