r"""COVAP: each step sends one strided shard in :math:`K` of the gradient,
with error feedback (`COVAP <https://arxiv.org/abs/2311.04499>`_).

Number the model's gradient elements in parameter order (:math:`i = o_p + e`
for element :math:`e` of parameter :math:`p` at offset :math:`o_p`). Step
:math:`t` sends shard :math:`s_t = t \bmod K`, the elements with
:math:`i \equiv s_t \pmod K` (strided, so every parameter tensor moves a
little each step), each DDP bucket with one dense all-reduce of about
:math:`n / K` elements: no top-k, nothing to index. The shards follow the
elements, not DDP's bucket layout (which DDP rebuilds after the first step),
so a resumed run sends what an uninterrupted one sends. Each rank keeps what
it did not send as a residual :math:`e` and adds it back, weighted, first:

.. math::
    c_t = g_t + w_t\, e_{t-1}, \qquad
    \text{sent}_t = c_t[s_t], \qquad
    e_t = c_t \text{ with } c_t[s_t] = 0,

with :math:`w_t` ramping from ``start_weight`` (0.5) to 1 over ``ramp_steps``
(50) steps, damping the residuals of the first, fastest-changing steps. With
:math:`w = 1` nothing is lost: what was sent plus the residual is everything
produced (:math:`\sum_{\tau \le t} \text{sent}_\tau + e_t = \sum_{\tau \le t}
g_\tau`), and with a constant gradient every element carries :math:`K`
steps' worth each time it is sent. :math:`K = 1` is a plain all-reduce,
exactly. The bytes per step are :math:`1/K` of a plain all-reduce.
"""
# no postponed annotations: DDP's register_comm_hook reads the hook's at run time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from pyg_dist.runtime import distributed

__all__ = ["CovapState", "covap_hook", "covap_compress"]


@dataclass
class CovapState:
    """What :func:`covap_hook` keeps: the shard count (0 while
    ``covap:auto`` measures, sending everything), the process group, the
    feedback ramp, the step, each parameter's residual (keyed by its place in
    the model, see :meth:`~pyg_dist.grads.CovapState.register`) and the
    elements sent.

    Args:
        shards (int): :math:`K`; 0 sends everything until it is set.
        process_group: The group the all-reduce runs on.
        ramp_steps (int, optional): Steps over which the residual's weight
            reaches 1. (default: :obj:`50`)
        start_weight (float, optional): The residual's weight at step 0.
            (default: :obj:`0.5`)

    Attributes:
        step (int): Steps taken (a step ends with a step's last bucket).
        residuals (dict[int, torch.Tensor]): Each parameter's residual, by its
            place.
        sent (int): Elements handed the all-reduce so far.
        keys (dict[int, int]): The place of each parameter, by its ``id``.
        offsets (list[int]): The first element of each place, and the total.
        positions (dict[tuple[int, ...], torch.Tensor]): The element positions
            of each bucket's places, cached.
    """

    shards: int
    process_group: Any = None
    ramp_steps: int = 50
    start_weight: float = 0.5
    step: int = 0
    residuals: dict[int, Tensor] = field(default_factory=dict)
    sent: int = 0
    keys: dict[int, int] = field(default_factory=dict)  # id(parameter) -> place
    offsets: list[int] = field(default_factory=lambda: [0])  # place -> first element
    positions: dict[tuple[int, ...], Tensor] = field(default_factory=dict, repr=False)

    def register(self, params: Iterable[Tensor]) -> None:
        """Numbers ``params`` (the model's, in order) and their elements;
        parameters a bucket meets unregistered are numbered as they come."""
        for param in params:
            if id(param) not in self.keys:
                self.keys[id(param)] = len(self.keys)
                self.offsets.append(self.offsets[-1] + param.numel())

    def feedback_weight(self) -> float:
        """:math:`w_t`, the residual's weight at this step."""
        if self.ramp_steps <= 0:
            return 1.0
        ramp = min(1.0, self.step / self.ramp_steps)
        return self.start_weight + (1.0 - self.start_weight) * ramp

    def shard_mask(self, params: list[Tensor]) -> Tensor:
        """``[n]`` bool over a bucket holding ``params``: the elements of this
        step's shard."""
        self.register(params)
        places = tuple(self.keys[id(p)] for p in params)
        index = self.positions.get(places)
        if index is None:
            index = self.positions[places] = torch.cat([
                self.offsets[place] + torch.arange(p.numel(), device=p.device)
                for place, p in zip(places, params)]) % self.shards
        return index == self.step % self.shards

    def residual(self, params: list[Tensor]) -> Tensor | None:
        """The residual of a bucket holding ``params`` (:obj:`None` before any)."""
        self.register(params)
        parts = [self.residuals.get(self.keys[id(p)]) for p in params]
        if all(r is None for r in parts):
            return None
        return torch.cat([p.detach().new_zeros(p.numel()) if r is None else r
                          for p, r in zip(params, parts)])

    def keep(self, params: list[Tensor], residual: Tensor) -> None:
        for p, part in zip(params, residual.split([p.numel() for p in params])):
            self.residuals[self.keys[id(p)]] = part

    def state_dict(self) -> dict[str, Any]:
        return {"shards": self.shards, "step": self.step, "residuals": dict(self.residuals)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.shards, self.step = int(state["shards"]), int(state["step"])
        self.residuals, self.positions = dict(state["residuals"]), {}


def covap_compress(grad: Tensor, residual: Tensor | None, mask: Tensor,
                   weight: float) -> tuple[Tensor, Tensor]:
    """One step of one bucket: the elements to send (``grad`` plus the
    weighted ``residual``, where ``mask``) and the new residual (the rest).
    ``grad`` is overwritten.

    Shapes:
        - **grad**, **residual**, **mask:** :obj:`[n]`
        - **output:** :obj:`[mask.sum()]`, :obj:`[n]`
    """
    if residual is not None:
        grad.add_(residual, alpha=weight)
    sent = grad[mask]
    grad[mask] = 0.0
    return sent, grad.clone()


def covap_hook(state: CovapState, bucket: distributed.GradBucket) -> torch.futures.Future[Tensor]:
    """A DDP communication hook (``ddp.register_comm_hook(state, covap_hook)``)
    averaging this step's shard of each bucket over ``state.process_group``;
    unsent elements come back as zeros (their parameters wait for a later
    step's shard).

    Args:
        state (CovapState): The hook's state, kept across steps.
        bucket (torch.distributed.GradBucket): The bucket of gradients DDP hands over.
    """
    buffer = bucket.buffer()
    mask = None
    if state.shards > 1:
        params = bucket.parameters()
        mask = state.shard_mask(params)
        payload, residual = covap_compress(buffer, state.residual(params), mask,
                                           state.feedback_weight())
        state.keep(params, residual)
    else:
        payload = buffer
    payload.div_(distributed.world_size(state.process_group))
    state.sent += payload.numel()
    if bucket.is_last():
        state.step += 1
    future = distributed.all_reduce_future(payload, state.process_group)

    def unpack(done: torch.futures.Future) -> Tensor:
        reduced = done.value()[0]
        if mask is None:
            return reduced
        buffer.zero_()
        buffer[mask] = reduced
        return buffer

    return future.then(unpack)
