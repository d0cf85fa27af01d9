"""The one home of :mod:`torch.distributed`: the process group
(``pyg_dist.init()``), groups, collectives and point-to-point messages.

No other module of the package calls a collective or sends a message itself;
what is used of :mod:`torch.distributed` elsewhere runs its own communication:
DDP with torch's communication hooks (``pyg_dist.grads.sync``) and
torchrun's error records (``pyg_dist.cli``). Every collective and
point-to-point helper here runs under ``pyg_dist.runtime.peers.guard``, so a peer
lost meanwhile raises ``pyg_dist.runtime.peers.PeerLost`` naming it. The
reductions, broadcasts, gathers and barriers are no-ops in a group of one
process. Point-to-point helpers take the peer's rank in ``group`` (the global
rank for the default group).

Its parts: the process group's facts (``base``), the group itself and new
groups (``groups``), collectives and messages (``collectives``), collectives
over a matrix's rows cut into pieces (``rows``) and failing together
(``failures``). Import the names from here."""
from pyg_dist.runtime.distributed.base import (
    DEFAULT_TIMEOUT,
    GradBucket,
    Group,
    backend,
    collective_device,
    default_device,
    group_id,
    is_distributed,
    is_initialized,
    rank,
    world_size,
)
from pyg_dist.runtime.distributed.collectives import (
    all_gather_objects,
    all_reduce,
    all_reduce_future,
    all_reduce_gradients,
    all_reduce_values,
    all_reduce_with_grad,
    all_to_all_single,
    barrier,
    batch_send_recv,
    broadcast,
    differing_ranks,
    isend,
    recv,
    send,
    sync_tensors,
    wait_all,
)
from pyg_dist.runtime.distributed.failures import (
    Phase,
    announce_failure,
    announcing_failures,
    failing_together,
    forget_failure,
    raise_together,
    raised_together,
)
from pyg_dist.runtime.distributed.groups import host_store, init, new_group, shutdown
from pyg_dist.runtime.distributed.rows import (
    all_gather_rows,
    gather_row_range,
    reduce_row_range,
    reduce_scatter_rows,
    row_piece,
)

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "world_size", "is_distributed", "default_device",
    "collective_device", "all_reduce", "all_reduce_with_grad", "all_reduce_values", "broadcast",
    "barrier", "differing_ranks", "all_gather_objects", "raise_together",
    "failing_together", "announcing_failures", "announce_failure", "forget_failure", "Phase",
    "raised_together", "sync_tensors",
    "all_reduce_gradients", "new_group", "host_store", "DEFAULT_TIMEOUT", "Group", "GradBucket",
    "backend", "group_id", "all_reduce_future", "all_to_all_single", "send", "recv", "isend",
    "batch_send_recv", "wait_all", "row_piece", "reduce_scatter_rows", "all_gather_rows",
    "reduce_row_range", "gather_row_range",
]
