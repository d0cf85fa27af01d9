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
from pyg_dist.nn.owned import owned_parameters
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
        #: Each bucket's parameters (name, tensor) in its order, as DDP last
        #: laid it out; PowerSGD's saved state waiting for its buckets.
        self._buckets: dict[int, list[tuple[str, Tensor]]] = {}
        self._saved_buckets: dict[str, Any] | None = None
        #: Parameters that hold this rank's rows alone: never summed.
        self.owned = owned_parameters(model)
        summed = [p for p in model.parameters() if p.requires_grad and id(p) not in self.owned]
        if self.compress is not None and distributed.is_distributed() and summed:
            from torch.nn.parallel import DistributedDataParallel

            DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
                model, [n for n, p in model.named_parameters() if id(p) in self.owned])
            group = distributed.new_group()
            self.module = DistributedDataParallel(model, process_group=group,
                                                  forward_sync_buffers=False)
            self.scale = float(distributed.world_size())
            self.state, hook = _hook(self.compress, group, planned_steps)
            if isinstance(self.state, CovapState):
                self.state.register(p for p in model.parameters() if id(p) not in self.owned)
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
            params = [p for p in self.model.parameters()
                      if p.requires_grad and id(p) not in self.owned]
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
        names = {id(p): name for name, p in self.model.named_parameters()}

        def run(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks annotations
            self._launched.append(time.perf_counter())
            params = [(names[id(p)], p) for p in bucket.parameters()]
            before = self._buckets.get(bucket.index())
            if (self._saved_buckets is None and before is not None
                    and [n for n, _ in before] != [n for n, _ in params]
                    and self.compress is not None and self.compress.kind == "powersgd"):
                # DDP laid its buckets out anew (after a process's first step):
                # PowerSGD's flat tensors follow their parameters
                self._saved_buckets = _powersgd_state(state, self._buckets)
                for table in (state.error_dict, state.p_memory_dict, state.q_memory_dict):
                    table.clear()
            self._buckets[bucket.index()] = params
            if self._saved_buckets is not None:
                _restore_powersgd_bucket(state, self._saved_buckets, bucket.index(), params)
                if bucket.is_last():
                    self._saved_buckets = None
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
        """What a checkpoint keeps: the steps, COVAP's residuals, PowerSGD's
        step, error feedback, warm-start factors and random generator."""
        out: dict[str, Any] = {"steps": self.steps}
        if isinstance(self.state, CovapState):
            out["covap"] = self.state.state_dict()
        elif self.compress is not None and self.compress.kind == "powersgd":
            out["powersgd"] = _powersgd_state(self.state, self._buckets)
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = int(state.get("steps", 0))
        if isinstance(self.state, CovapState) and "covap" in state:
            self.state.load_state_dict(state["covap"])
        elif "powersgd" in state and self.state is not None:
            _load_powersgd_state(self.state, state["powersgd"])
            self._saved_buckets = state["powersgd"]


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


#: PowerSGD's counters a resume restores.
_POWERSGD_COUNTERS = ("iter", "total_numel_before_compression",
                      "total_numel_after_compression", "next_stats_report")


def _powersgd_layout(params: list[tuple[str, Tensor]], rank: int) -> list[tuple[str, int, int]]:
    """Each parameter of a bucket, in its order, with its elements and the
    elements of its warm-start factor Q (0 where PowerSGD sends it whole)."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

    out = []
    for name, p in params:
        n, m = p.shape[0], p.numel() // max(p.shape[0], 1)
        r = min(n, m, rank)
        compressed = p.dim() > 1 and powersgd._should_compress(n, m, r, 2)[0]
        out.append((name, p.numel(), m * r if compressed else 0))
    return out


def _powersgd_state(state: Any, orders: dict[int, list[tuple[str, Tensor]]]) -> dict[str, Any]:
    """PowerSGD's state per parameter (DDP lays its buckets out anew in a new
    process, so a bucket's flat tensors would not line up): counters, each
    parameter's error feedback and warm-start factor, the numpy generator;
    plain values and tensors (a checkpoint loads with ``weights_only``)."""
    error: dict[str, Tensor] = {}
    factor: dict[str, Tensor] = {}
    for index, params in orders.items():
        layout = _powersgd_layout(params, state.matrix_approximation_rank)
        if index in state.error_dict:
            pieces = state.error_dict[index].split([numel for _, numel, _ in layout])
            error.update({name: t.clone() for (name, _, _), t in zip(layout, pieces)})
        if index in state.q_memory_dict:
            sizes = [q for _, _, q in layout if q]
            pieces = state.q_memory_dict[index].split(sizes)
            factored = [name for name, _, q in layout if q]
            factor.update({name: t.clone() for name, t in zip(factored, pieces)})
    kind, keys, pos, has_gauss, gauss = state.rng.get_state()
    return {**{name: int(getattr(state, name)) for name in _POWERSGD_COUNTERS},
            "error": error, "factor": factor,
            "rng": [kind, torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss),
                    float(gauss)]}


def _load_powersgd_state(state: Any, saved: dict[str, Any]) -> None:
    """Restores :func:`_powersgd_state`'s counters and generator into
    PowerSGD's ``state``; the tensors wait for their buckets
    (:func:`_restore_powersgd_bucket`)."""
    import numpy as np

    for name in _POWERSGD_COUNTERS:
        setattr(state, name, int(saved[name]))
    kind, keys, pos, has_gauss, gauss = saved["rng"]
    state.rng.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))


def _restore_powersgd_bucket(state: Any, saved: dict[str, Any], index: int,
                             params: list[tuple[str, Tensor]]) -> None:
    """A bucket's error feedback and warm-start factors, laid out in its
    order, from the per-parameter tensors ``saved``."""
    layout = _powersgd_layout(params, state.matrix_approximation_rank)
    if all(name in saved["error"] for name, _, _ in layout):
        state.error_dict[index] = torch.cat([saved["error"][name] for name, _, _ in layout])
    if layout and all(name in saved["factor"] for name, _, q in layout if q):
        factors = [saved["factor"][name] for name, _, q in layout if q]
        if factors:
            state.q_memory_dict[index] = torch.cat(factors)
            rank = state.matrix_approximation_rank
            state.p_memory_dict[index] = factors[0].new_empty(
                sum(min(p.shape[0], p.numel() // p.shape[0], rank) * p.shape[0]
                    for (_, p), (_, _, q) in zip(params, layout) if q))


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
