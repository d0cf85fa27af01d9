"""``pyg_dist.launch``: run a function on several local ranks, from a script or
a notebook, and get every rank's return value back."""
from __future__ import annotations

import io
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, cast

import cloudpickle
import torch

from pyg_dist.runtime import env
from pyg_dist.runtime.distributed import host_store, init, raised_together, shutdown
from pyg_dist.runtime.peers import PeerLost

__all__ = ["launch", "RankFailed"]

_GRACE_SECONDS = 5.0  # SIGTERM -> SIGKILL for ranks that are being stopped
#: What the process that forks the ranks imports once, before any rank starts:
#: a rank then starts in a fraction of a second instead of importing torch and
#: PyG again (seconds each), nor SciPy's graph routines (a quarter of a second;
#: the vertex cover's). pyg_dist itself is not among them: it reads settings
#: such as ``TRITON_INTERPRET`` from the environment as it is imported.
_PRELOAD = ("torch", "torch_geometric", "scipy.sparse.csgraph")
#: After a rank reports a peer lost or failed, how long the launcher waits for
#: that peer's own error (the cause) before raising the report.
_CAUSE_SECONDS = 2.0
#: The signals passed on to the ranks: a scheduler's stop (and SLURM's warning).
_FORWARDED = (signal.SIGTERM, signal.SIGUSR1)


class RankFailed(RuntimeError):
    """A rank died without returning (killed, crashed) or the launch timed out."""


class RemoteTraceback(Exception):
    """Carries the traceback text of an exception raised in another process."""

    def __str__(self) -> str:
        return str(self.args[0])


def launch(
    fn: Callable[..., Any],
    world_size: int,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    timeout: float | None = None,
    backend: str | None = None,
    threads: int | None = None,
    comm_timeout: float | None = None,
) -> list[Any]:
    r"""Runs ``fn(*args, **kwargs)`` on ``world_size`` local processes with the
    process group already initialised (gloo over 127.0.0.1 on a free port, or
    NCCL when CUDA is available), and returns every rank's return value in rank
    order.

    ``fn`` may be defined in a notebook cell or a script's ``__main__``: it is
    shipped to the ranks by value (cloudpickle). If a rank raises, the other
    ranks are stopped and the exception is re-raised here, with the rank's
    traceback attached as its cause (a rank's own error is preferred to the
    ``pyg_dist.runtime.peers.PeerLost`` of a rank that waited for it); a
    rank that dies without returning (killed, crashed) raises
    :class:`RankFailed`. Output the ranks print is shown here when this
    process's output is not a terminal file (e.g. in Jupyter). SIGTERM and
    SIGUSR1 sent to this process are passed on to the ranks, and this process
    keeps waiting for them: :func:`~pyg_dist.train.train` in the ranks then
    stops every rank after the same epoch, saving its checkpoint, and each
    raises ``pyg_dist.train.preemption.Preempted``, re-raised here.

    Args:
        fn (Callable): The function every rank runs.
        world_size (int): Number of ranks.
        args (Sequence, optional): Positional arguments of ``fn``. (default: :obj:`()`)
        kwargs (dict, optional): Keyword arguments of ``fn``. (default: :obj:`None`)
        timeout (float, optional): Seconds after which the ranks are stopped and
            :class:`RankFailed` is raised; :obj:`None` waits as long as they run.
            (default: :obj:`None`)
        backend (str, optional): Process-group backend, see :func:`pyg_dist.init`.
            (default: :obj:`None`)
        threads (int, optional): Intra-op threads per rank; defaults to the
            machine's cores divided among the ranks. (default: :obj:`None`)
        comm_timeout (float, optional): Seconds a collective may wait, see
            :func:`pyg_dist.init`. (default: :obj:`None`)
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"'launch' needs world_size >= 1 (got {world_size!r})")
    payload = cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))
    threads = threads or max(1, (os.cpu_count() or 1) // world_size)
    forward_output = not _has_real_stdout()
    store = host_store("127.0.0.1")
    ctx = _context()
    procs: list[Any] = []
    conns: list[Connection] = []
    forwarding = _Forwarding(procs)
    try:
        for rank in range(world_size):
            parent_end, child_end = ctx.Pipe(duplex=False)
            options = {
                "store": f"127.0.0.1:{store.port}",
                "backend": backend,
                "threads": threads,
                "comm_timeout": comm_timeout,
                "forward_output": forward_output,
                "environ": dict(os.environ),
            }
            proc = ctx.Process(
                target=_run_rank,
                args=(rank, world_size, payload, child_end, options),
                name=f"pyg_dist-rank{rank}",
                daemon=True,
            )
            proc.start()
            child_end.close()
            procs.append(proc)
            conns.append(parent_end)
        return _collect(procs, conns, timeout)
    finally:
        forwarding.restore()
        _stop(procs)
        for conn in conns:
            conn.close()
        del store


def _collect(procs: list, conns: list[Connection], timeout: float | None) -> list[Any]:
    """Waits for every rank's result; on the first failure raises (the caller stops the rest)."""
    world_size = len(procs)
    deadline = None if timeout is None else time.monotonic() + timeout
    results: dict[int, Any] = {}
    open_conns = {conn: rank for rank, conn in enumerate(conns)}
    while len(results) < world_size:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if remaining == 0.0:
            raise RankFailed(
                f"'launch' stopped {world_size - len(results)} rank(s) after the timeout of "
                f"{timeout} s (ranks done: {sorted(results)}); raise the timeout or look for "
                f"a rank stuck in a collective"
            )
        sentinels = {procs[r].sentinel: r for r in range(world_size) if r not in results}
        ready = wait([*open_conns, *sentinels], timeout=remaining)
        for obj in ready:
            if obj in open_conns:
                rank = open_conns[obj]
                try:
                    kind, body = obj.recv()
                except (EOFError, OSError):
                    del open_conns[obj]
                    continue
                if kind == "out":
                    stream, text = body
                    (sys.stdout if stream == "stdout" else sys.stderr).write(text)
                elif kind == "ok":
                    results[rank] = pickle.loads(body)
                    del open_conns[obj]
                else:
                    del open_conns[obj]
                    raise _cause(_rank_exception(rank, world_size, body), body[1], procs,
                                 open_conns, watched={*range(world_size)} - {*results, rank})
        for sentinel, rank in sentinels.items():
            if sentinel in ready and rank not in results and procs[rank].exitcode is not None:
                # Drain a result that raced with the exit.
                conn = conns[rank]
                while conn in open_conns and conn.poll():
                    try:
                        kind, body = conn.recv()
                    except (EOFError, OSError):  # the pipe closed with the process
                        del open_conns[conn]
                        break
                    if kind == "ok":
                        results[rank] = pickle.loads(body)
                        del open_conns[conn]
                    elif kind == "error":
                        raise _rank_exception(rank, world_size, body)
                if rank not in results:
                    raise RankFailed(
                        f"rank {rank} of {world_size} exited with {_describe_exit(procs[rank])} "
                        f"before returning; the other ranks were stopped"
                    )
    return [results[r] for r in range(world_size)]


def _secondary(exc: BaseException, text: str) -> bool:
    """Whether a rank's error ``exc`` (traceback ``text``) may be the echo
    of another rank's failure: a lost or failed peer, or an error out of a
    torch.distributed collective (gloo's "Connection reset by peer")."""
    return isinstance(exc, PeerLost) or "torch/distributed/" in text


def _cause(first: BaseException, text: str, procs: list, open_conns: dict[Connection, int],
           watched: set[int]) -> BaseException:
    """The error to raise: ``first`` (its traceback ``text``), unless it
    reports a peer lost or failed, or came out of a torch.distributed
    collective (a user's own ``dist.barrier``, say): then the cause, if it
    shows within :data:`_CAUSE_SECONDS`: another rank's own error (with its
    traceback), or the exit without a result (killed, crashed) of a rank in
    ``watched``."""
    if not _secondary(first, text):
        return first
    world_size = len(procs)
    deadline = time.monotonic() + _CAUSE_SECONDS
    waiting = dict(open_conns)
    sentinels = {procs[r].sentinel: r for r in watched}
    while (waiting or sentinels) and (left := deadline - time.monotonic()) > 0:
        ready = wait([*waiting, *sentinels], timeout=left)
        for obj in ready:  # messages first: a rank sends its error, then exits
            if obj not in waiting:
                continue
            conn = cast(Connection, obj)
            rank = waiting[conn]
            try:
                kind, body = conn.recv()
            except (EOFError, OSError):
                del waiting[conn]
                continue
            if kind == "out":
                stream, out = body
                (sys.stdout if stream == "stdout" else sys.stderr).write(out)
            elif kind == "ok":
                del waiting[conn]
                sentinels = {k: r for k, r in sentinels.items() if r != rank}
            else:
                exc = _rank_exception(rank, world_size, body)
                if not _secondary(exc, body[1]):
                    return exc
                del waiting[conn]
                sentinels = {k: r for k, r in sentinels.items() if r != rank}
        for obj in ready:
            dead = sentinels.pop(obj, None)  # type: ignore[call-overload]
            if dead is None:
                continue
            procs[dead].join(0.1)  # its exit status
            if procs[dead].exitcode:
                return RankFailed(f"rank {dead} of {world_size} exited with "
                                  f"{_describe_exit(procs[dead])} before returning; the "
                                  f"other ranks were stopped")
    return first


class _Forwarding:
    """Passes :data:`_FORWARDED` signals this process gets on to the ranks
    in ``procs`` alive then (from the main thread only, where Python runs
    signal handlers; an ignored signal stays ignored) until :meth:`restore`."""

    def __init__(self, procs: list[Any]) -> None:
        self.procs = procs
        self.previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in _FORWARDED:
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self.previous[sig] = signal.signal(sig, self._forward)

    def _forward(self, signum: int, frame: Any) -> None:
        for proc in self.procs:
            if proc.is_alive():
                try:
                    os.kill(proc.pid, signum)
                except ProcessLookupError:
                    pass

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous = {}


def _rank_exception(rank: int, world_size: int, body: tuple[bytes | None, str]) -> BaseException:
    pickled, text = body
    exc: BaseException
    try:
        exc = pickle.loads(pickled) if pickled is not None else RankFailed(text.splitlines()[-1])
    except Exception:
        exc = RankFailed(text.splitlines()[-1] if text else "unknown error")
    if raised_together(exc) and not env.debug():
        # every rank raised it, naming the failing ranks: the message says it all
        exc.__cause__ = None
        exc.__suppress_context__ = True
        note = f"(raised on every rank together; {env.DEBUG}=1 shows rank {rank}'s traceback)"
    else:
        exc.__cause__ = RemoteTraceback(f"\n\nrank {rank} of {world_size} raised:\n\n{text}")
        note = f"(raised on rank {rank} of {world_size}; the other ranks were stopped)"
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    return exc


def _describe_exit(proc: Any) -> str:
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _stop(procs: list) -> None:
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + _GRACE_SECONDS
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join()


def _has_real_stdout() -> bool:
    try:
        sys.stdout.fileno()
        return True
    except (AttributeError, io.UnsupportedOperation, ValueError):
        return False


class _ConnWriter(io.TextIOBase):
    """A text stream that forwards writes to the launching process."""

    def __init__(self, conn: Connection, stream: str) -> None:
        self._conn, self._stream = conn, stream

    def write(self, text: str) -> int:
        if text:
            self._conn.send(("out", (self._stream, text)))
        return len(text)

    def isatty(self) -> bool:
        return False


def _context() -> Any:
    """Where ranks come from: forked by multiprocessing's fork server, which
    imports :data:`_PRELOAD` once for every launch of this process (a fresh
    interpreter per rank where the platform has no fork server). Ranks never
    fork from the caller itself: it may hold threads, CUDA or a process group."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(_PRELOAD))  # read when the server first starts
    return ctx


def _exit_with_parent() -> None:
    """Ends this rank when the launching process is gone (killed before it
    could stop its ranks), instead of waiting in a collective until the timeout."""
    parent = mp.parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="pyg_dist-parent-watch", daemon=True).start()


def _run_rank(
    rank: int, world_size: int, payload: bytes, conn: Connection, options: dict[str, Any]
) -> None:
    """Entry point of a rank."""
    _exit_with_parent()
    # A forked rank starts with the fork server's environment: take the launcher's.
    os.environ.clear()
    os.environ.update(options["environ"])
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
    )
    os.environ[env.LAUNCH_STORE] = options["store"]
    os.environ.setdefault("OMP_NUM_THREADS", str(options["threads"]))
    if options["forward_output"]:
        sys.stdout = _ConnWriter(conn, "stdout")  # type: ignore[assignment]
        sys.stderr = _ConnWriter(conn, "stderr")  # type: ignore[assignment]
    torch.set_num_threads(options["threads"])
    try:
        fn, args, kwargs = cloudpickle.loads(payload)
        init(backend=options["backend"], timeout=options["comm_timeout"])
        result = fn(*args, **kwargs)
        message: tuple[str, Any] = ("ok", pickle.dumps(result))
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
        text = traceback.format_exc()
        pickled: bytes | None
        try:
            pickled = pickle.dumps(exc)
            pickle.loads(pickled)  # the caller must be able to rebuild it
        except Exception:
            pickled = None
        message = ("error", (pickled, text))
    try:
        conn.send(message)
    finally:
        conn.close()
        if message[0] == "ok":
            shutdown()
    if message[0] != "ok":
        _exit_at_once()


def _exit_at_once() -> None:
    """Ends a rank whose error has been sent: tearing down a process group
    whose peers stopped or died can hold the process until the launcher's
    grace period ends, and the error is all the caller needs."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(1)
