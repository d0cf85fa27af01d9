"""Failing together: a check or step each rank makes on its own raises on
every rank at once (:func:`raise_together`, :func:`failing_together`), and
work the ranks do together leaves a rank's own error for its peers to name
(:func:`announcing_failures`)."""
from __future__ import annotations

import builtins
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pyg_dist.runtime import peers
from pyg_dist.runtime.distributed.base import Group, is_distributed
from pyg_dist.runtime.distributed.collectives import all_gather_objects

__all__ = [
    "raise_together", "raised_together", "failing_together", "Phase", "announcing_failures",
    "announce_failure", "forget_failure",
]


def raise_together(error: BaseException | None, what: str, group: Group = None) -> None:
    """A check every rank makes on its own (its part file, its checkpoint),
    failed together: if any rank passes an ``error``, every rank raises one
    error listing each failing rank, its host, the error's type and its
    message, so that no rank waits in the next collective for one that gave
    up (:func:`raised_together` tells such errors). Where several ranks
    failed alike (the same type and message: a partition folder cut for
    another number of ranks) the message says it once, on one line. The
    error has
    the type of this rank's error, else that of the first failing rank when
    it is a built-in exception, else :class:`RuntimeError`. In a group of
    one, ``error`` itself is raised.

    Args:
        error (BaseException, optional): This rank's failure; :obj:`None` if
            its check passed.
        what (str): The check, named at the start of the error's message.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    if not is_distributed(group):
        if error is not None:
            raise error
        return
    mine = None if error is None else (type(error).__name__, str(error))
    reports = all_gather_objects(mine, group)
    failed = [(r, report) for r, report in enumerate(reports) if report is not None]
    if not failed:
        return
    message = _failed_on(what, failed, len(reports))
    kind = type(error) if error is not None else _builtin(failed[0][1][0])
    if issubclass(kind, KeyError):  # whose str() would be the repr of the message
        kind = _SharedKeyError
    try:
        exc = kind(message)
    except Exception:
        exc = RuntimeError(message)
    setattr(exc, _SHARED, True)
    raise exc from error


def _failed_on(what: str, failed: list[tuple[int, tuple[str, str]]], ranks: int) -> str:
    """The message of :func:`raise_together`: each failing rank's error on a
    line of its own, or one line where they all failed alike."""
    if len(failed) > 1 and len({report for _, report in failed}) == 1:
        kind, message = failed[0][1]
        who = (f"all {ranks} ranks" if len(failed) == ranks else
               f"{len(failed)} of {ranks} ranks ({', '.join(str(r) for r, _ in failed)})")
        return f"{what} failed alike on {who}: {kind}: {message}"
    lines = "\n".join(f"  {peers.name(r)}: {kind}: {message}" for r, (kind, message) in failed)
    return f"{what} failed on {len(failed)} of {ranks} ranks:\n{lines}"


#: Set on the errors :func:`raise_together` raises (on every rank at once).
_SHARED = "_pyg_dist_raised_together"


def raised_together(error: BaseException) -> bool:
    """Whether ``error`` was raised on every rank at once by
    :func:`raise_together` (or :func:`failing_together`), so the ranks are
    still in step.

    Args:
        error (BaseException): The error.
    """
    return bool(getattr(error, _SHARED, False))


class _SharedKeyError(KeyError):
    """A :class:`KeyError` shared by :func:`raise_together`, shown as its message."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@contextmanager
def failing_together(what: str, group: Group = None) -> Iterator[None]:
    """A step every rank takes on its own (opening its input, checking its
    slice, writing its part), failed together: any :class:`Exception` the
    block raises on any rank is raised after it on every rank, by
    :func:`raise_together`, so that no rank waits in the next collective for
    one that gave up. A ``pyg_dist.runtime.peers.PeerLost`` (a peer that
    cannot take part in sharing the error) and what is no
    :class:`Exception` (``KeyboardInterrupt``, ``SystemExit``) pass as they
    are.

    Args:
        what (str): The step, named at the start of the error's message.
        group (torch.distributed.ProcessGroup, optional): The process group;
            :obj:`None` for the default group. (default: :obj:`None`)
    """
    error = None
    try:
        yield
    except peers.PeerLost:
        raise
    except Exception as exc:  # noqa: BLE001 - every rank raises it below
        error = exc
    raise_together(error, what, group)


@dataclass
class Phase:
    """What a rank is doing inside :func:`announcing_failures`; the block
    updates ``doing`` as it goes.

    Args:
        doing (str): What the rank is doing, as a peer's error names it
            (``"the training step of epoch 3"``).
    """

    doing: str


@contextmanager
def announcing_failures(doing: str) -> Iterator[Phase]:
    """Work the ranks do together, where one rank's error would leave the
    others waiting in their next collective: an :class:`Exception` the block
    raises on this rank alone is left, with what the rank was doing, in the
    process group's store before it propagates
    (``pyg_dist.runtime.peers.report_failure``). A peer whose collective
    fails meanwhile (at once when this rank's process ends, at the timeout
    if it lingers) raises ``pyg_dist.runtime.peers.PeerFailed`` naming
    this rank, what it was doing and its error, instead of waiting or only
    finding it gone. Errors raised on every rank together
    (:func:`raise_together`), a lost peer, and what is no :class:`Exception`
    (``KeyboardInterrupt``, ``SystemExit``) pass unreported.

    Args:
        doing (str): What the block does, as errors name it (``"training"``);
            the yielded :class:`Phase` updates it.
    """
    forget_failure()
    phase = Phase(doing)
    try:
        yield phase
    except Exception as exc:
        announce_failure(phase.doing, exc)
        raise


def announce_failure(doing: str, error: BaseException) -> None:
    """What :func:`announcing_failures` does with an error its block
    raised: leaves it for the peers unless it was raised together, is a
    lost peer, or is no :class:`Exception`.

    Args:
        doing (str): What this rank was doing (``"the training step of epoch 3"``).
        error (BaseException): The error.
    """
    if (is_distributed() and isinstance(error, Exception)
            and not isinstance(error, peers.PeerLost) and not raised_together(error)):
        peers.report_failure(doing, error)


def forget_failure() -> None:
    """Takes back this rank's earlier report (:func:`announce_failure`), at
    the start of new work together: that error was handled, and must not be
    blamed for a later failure."""
    peers.clear_failure()


def _builtin(name: str) -> type[BaseException]:
    kind = getattr(builtins, name, None)
    return kind if isinstance(kind, type) and issubclass(kind, Exception) else RuntimeError
