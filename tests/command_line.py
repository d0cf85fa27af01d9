"""``pyg-dist`` run in the test process, as the command runs it.

A command of its own imports torch and PyG twice (its process, then the fork
server its ranks come from): about 8 s of CPU before it does anything. Run
here, its ranks start from the test process's fork server, which imported
them once for every test of the worker. What only a process of its own shows
(the exit status and lines of a failure on a rank, signals, torchrun) is
tested with processes (tests/cli/, test_preemption.py).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from typing import Any


def pyg_dist_command(*args: Any, env: dict[str, str] | None = None,
                     cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """``pyg-dist ARGS`` in this process, with ``env`` added to the
    environment its ranks inherit, in the folder ``cwd``: its stdout, stderr
    and exit status as the interpreter would end it (a ``SystemExit``
    message goes to stderr with status 1, as ``python -m pyg_dist.cli``
    does)."""
    from pyg_dist.cli import main

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    saved, here = dict(os.environ), os.getcwd()
    os.environ.update(env or {})
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code: Any = main(argv)
            except SystemExit as exc:
                code = exc.code
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(saved)
    if isinstance(code, str):
        err.write(code + "\n")
        code = 1
    return subprocess.CompletedProcess(["pyg-dist", *argv], code or 0, out.getvalue(),
                                       err.getvalue())


def json_lines(*args: Any, cwd: str | os.PathLike | None = None) -> list[dict]:
    """The JSON lines ``pyg-dist ARGS`` prints in this process, in ``cwd``;
    asserts exit status 0."""
    out = pyg_dist_command(*args, cwd=cwd)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
