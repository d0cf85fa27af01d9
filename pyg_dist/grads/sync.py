r"""Summing the parameters' gradients over the ranks after backward, and
booking it in the ledger (layer ``"gradients"``, direction ``"grad"``).

Without compression, one flat all-reduce after backward: exactly the sum, as
single-process training needs. With ``compress``, the model runs under
:class:`~torch.nn.parallel.DistributedDataParallel` on a process group of its
own (so gradient buckets travel while backward, and halo exchanges on the
default group, go on), with a communication hook:

* ``"fp16"``: torch's ``fp16_compress_hook`` (half the bytes);
* ``"powersgd:R"``: torch's PowerSGD of rank :math:`R` with error feedback
  and warm start, plain all-reduce for the first tenth of the planned steps
  (at least 2), as its authors advise;
* ``"covap:K"``: :func:`~pyg_dist.grads.covap_hook`, one strided shard in
  :math:`K` per step with ramped error feedback;
* ``"covap:auto"``: plain all-reduce for ``warmup`` steps, timing each step's
  all-reduce (first bucket launched to last one done) and backward's compute
  (its wall time minus the wait after the last bucket launched), then
  :math:`K = \lceil t_{comm} / t_{backward} \rceil` (the slowest rank's
  figures), so the all-reduce fits under backward.

DDP's hooks average; the loss is scaled by the world size before backward, so
the result is the sum either way (exactly, for a power-of-two world size).
Bytes booked are what each rank hands the all-reduce per step (a plain
all-reduce: the gradients' size); ``seconds`` the wait after backward's
compute, ``overlapped`` the rest of the all-reduce's time.
"""
from __future__ import annotations

import math
import time
from typing import Any, cast

import torch
from torch import Tensor, nn

from pyg_dist.grads.covap import CovapState, covap_hook
from pyg_dist.grads.spec import GradCompress, parse_grad_compress
from pyg_dist.halo.ledger import GRADIENTS
from pyg_dist.nn.drift import mark_summed
from pyg_dist.runtime import distributed

__all__ = ["GradientSync", "LAYER", "MAX_SHARDS"]

#: The ledger's name for the gradient all-reduce.
LAYER = "gradients"
#: The most shards ``covap:auto`` picks.
MAX_SHARDS = 64


class GradientSync:
    """Runs ``model`` and sums its gradients over the ranks after backward
    (see the module docstring).

    Args:
        model (torch.nn.Module): The model (its parameters start equal on
            every rank).
        compress (str, optional): :obj:`None`/``"none"``, ``"fp16"``,
            ``"powersgd:R"``, ``"covap:K"`` or ``"covap:auto"``.
            (default: :obj:`None`)
        ledger (Ledger, optional): Where each step's gradient traffic is
            booked. (default: :obj:`None`)
        planned_steps (int, optional): Steps planned (PowerSGD's plain
            start). (default: :obj:`200`)
        warmup (int, optional): Steps ``covap:auto`` measures (the first is
            not counted). (default: :obj:`3`)
    """

    def __init__(self, model: nn.Module, compress: str | GradCompress | None = None,
                 ledger: Any = None, planned_steps: int = 200, warmup: int = 3) -> None:
        self.model, self.ledger, self.warmup = model, ledger, warmup
        mark_summed(model)  # its Dist layers' gradients are summed: nothing to warn of
        self.compress = parse_grad_compress(compress)
        self.module: nn.Module = model
        self.scale, self.state = 1.0, cast(Any, None)
        self.steps = 0
        self._launched: list[float] = []
        self._done: list[float] = []
        self._counted = 0
        self._timings: list[tuple[float, float]] = []
        if self.compress is not None and distributed.is_distributed():
            from torch.nn.parallel import DistributedDataParallel

            group = distributed.new_group()
            self.module = DistributedDataParallel(model, process_group=group,
                                                  forward_sync_buffers=False)
            self.scale = float(distributed.world_size())
            self.state, hook = _hook(self.compress, group, planned_steps)
            if isinstance(self.state, CovapState):
                self.state.register(model.parameters())
            self.module.register_comm_hook(self.state, self._timed(hook))

    @property
    def hooked(self) -> bool:
        """Whether gradients travel in DDP's hook (else one all-reduce after backward)."""
        return self.module is not self.model

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def backward(self, loss: Tensor) -> None:
        """``loss.backward()`` and the sum of the gradients over the ranks."""
        start = time.perf_counter()
        self._launched, self._done = [], []
        if not self.hooked:
            loss.backward()
            begin = time.perf_counter()
            params = [p for p in self.model.parameters() if p.requires_grad]
            distributed.all_reduce_gradients(params)
            end = time.perf_counter()
            if distributed.is_distributed():
                numel = sum(p.numel() * p.element_size() for p in params)
                self._book(numel, 1, end - begin, 0.0)
            return
        before = self._counted
        (loss * self.scale).backward()
        end = time.perf_counter()
        last = max(self._launched, default=end)
        blocked = max(end - last, 0.0)
        span = max(self._done, default=end) - min(self._launched, default=end)
        self._book(self._counted - before, len(self._launched), blocked,
                   max(span - blocked, 0.0))
        if isinstance(self.state, CovapState) and self.state.shards == 0:  # covap:auto measures
            self._timings.append((span, end - start - blocked))
            if self.steps == self.warmup:
                self._choose_shards()

    def _book(self, sent: int, exchanges: int, blocked: float, overlapped: float) -> None:
        self.steps += 1
        if self.ledger is not None:
            self.ledger.record(LAYER, GRADIENTS, bytes_sent=sent, bytes_recv=sent,
                               exchanges=exchanges, seconds=blocked, overlapped=overlapped)

    def _timed(self, hook: Any) -> Any:
        def run(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks annotations
            self._launched.append(time.perf_counter())
            plain = _plain_bytes(self.compress, state, bucket)
            before = _elements_sent(state)
            future = hook(state, bucket)
            if plain is None:  # the hook counts the elements it all-reduces
                plain = 4 * (_elements_sent(state) - before)
            self._counted += plain

            def done(fut: torch.futures.Future[Tensor]) -> Tensor:
                self._done.append(time.perf_counter())
                return fut.value()

            return future.then(done)

        return run

    def _choose_shards(self) -> None:
        """``covap:auto``: K from the warm-up steps after the first (collective)."""
        assert isinstance(self.state, CovapState), "covap:auto keeps a CovapState"
        measured = self._timings[1:] or self._timings
        comm = sum(t[0] for t in measured) / len(measured)
        compute = sum(t[1] for t in measured) / len(measured)
        comm, compute = distributed.all_reduce_values([comm, compute], "max")
        shards = min(MAX_SHARDS, max(1, math.ceil(comm / max(compute, 1e-9))))
        self.state.shards = shards
        if self.ledger is not None:
            self.ledger.notes[LAYER] = {"choice": f"covap:{shards}", "from_step": self.steps,
                                        "comm_seconds": round(comm, 6),
                                        "backward_seconds": round(compute, 6)}

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: the steps and COVAP's residuals."""
        out: dict[str, Any] = {"steps": self.steps}
        if isinstance(self.state, CovapState):
            out["covap"] = self.state.state_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = int(state.get("steps", 0))
        if isinstance(self.state, CovapState) and "covap" in state:
            self.state.load_state_dict(state["covap"])


def _hook(compress: GradCompress, group: Any, planned_steps: int) -> tuple[Any, Any]:
    """The DDP hook of ``compress`` and its state."""
    if compress.kind == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import (
            fp16_compress_hook,
        )

        return group, fp16_compress_hook
    if compress.kind == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

        state = powersgd.PowerSGDState(
            process_group=group, matrix_approximation_rank=compress.value,
            start_powerSGD_iter=max(2, planned_steps // 10), use_error_feedback=True,
            warm_start=True, random_seed=0)
        return state, powersgd.powerSGD_hook
    return CovapState(compress.value, group), covap_hook


def _plain_bytes(compress: GradCompress | None, state: Any, bucket: Any) -> int | None:
    """Bytes one bucket hands the all-reduce, where that follows from its
    size; :obj:`None` where the hook counts them (COVAP, PowerSGD once
    compressing)."""
    if compress is None or compress.kind == "covap":
        return None
    numel = bucket.buffer().numel()
    if compress.kind == "fp16":
        return 2 * numel
    if state.iter < state.start_powerSGD_iter:  # a plain all-reduce at first
        return 4 * numel
    return None


def _elements_sent(state: Any) -> int:
    """The elements a hook's state says it has all-reduced so far."""
    if isinstance(state, CovapState):
        return state.sent
    return getattr(state, "total_numel_after_compression", 0)
