"""How ``pyg-dist`` ends when something goes wrong: an error the user can fix
is one or two lines naming the flag that fixes it, with exit status 2; any
other error is one line and a hint, with status 1; Ctrl-C is one line, with
status 130. ``--debug`` (or ``PYG_DIST_DEBUG=1``) shows the traceback.

The checks here need no graph: the command runs them before it loads one,
so a wrong path fails in a second, with nothing written."""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from pyg_dist.cli.job import Graph
from pyg_dist.datasets.folder_files import GRAPH_FILE, read_info
from pyg_dist.datasets.ogb import OGB
from pyg_dist.datasets.ogb_mag import MAG_FOLDER, MAG_NAME
from pyg_dist.datasets.ogbl import OGBL
from pyg_dist.datasets.planetoid import PLANETOID, missing_raw_files
from pyg_dist.partitioning.io import META_FILE, read_meta
from pyg_dist.runtime import env
from pyg_dist.strategies.grid_3d.folder import grid_ranks, is_grid_folder

__all__ = ["one_line", "UsageError", "SharedUsageError", "EXIT_USAGE", "EXIT_FAILED",
           "EXIT_INTERRUPTED", "reporting", "check_out", "check_parts_dir", "check_dataset",
           "check_graph_folder", "check_link_folder", "check_checkpoint_dir", "check_world"]

#: The exit status of an error the command line can fix (argparse's too).
EXIT_USAGE = 2
#: The exit status of any other error.
EXIT_FAILED = 1
#: The exit status after Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130
#: Where a clone keeps the Planetoid files its examples and tests read.
CLONE_ROOT = "tests/data"


class UsageError(SystemExit):
    """An error fixed on the command line: its message starts with
    ``pyg-dist COMMAND:`` and names the flag that fixes it; the process
    exits with :data:`EXIT_USAGE`.

    Args:
        message (str): The whole message, one or two lines.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = EXIT_USAGE


class SharedUsageError(UsageError):
    """A :class:`UsageError` that every rank torchrun started finds alike
    (the ranks it started against the job's parts): rank 0 says it, and
    hands it to torchrun as its error, so that torchrun's summary of the
    failed job shows the line instead of a traceback; the other ranks exit
    with the same status in silence.

    Args:
        message (str): The whole message, one line.
    """


#: Seconds the silent ranks of a :class:`SharedUsageError` wait before they
#: exit, so that rank 0's error is the one torchrun reports (torchrun stops
#: them as soon as rank 0 has exited).
QUIET_RANK_SECONDS = 10.0


def reporting(command: str, run: Callable[[], int], debug: bool = False,
              bar: bool = False) -> int:
    """Runs ``run`` and reports how it failed in the terms of ``pyg-dist
    COMMAND``: a :class:`SystemExit` with a message (the command's own
    errors, on this process or raised on a rank) is printed and raised again
    as a :class:`UsageError`; Ctrl-C and any other exception are one line
    each, with :data:`EXIT_INTERRUPTED` and :data:`EXIT_FAILED`. With
    ``debug`` (or ``PYG_DIST_DEBUG=1``) the traceback is shown as well.

    Args:
        command (str): The command, as the user typed it (``"train"``).
        run (Callable): What the command does; returns its exit status.
        debug (bool, optional): Show tracebacks. (default: :obj:`False`)
        bar (bool, optional): Whether a rank may have left a progress bar
            on the last line, which Ctrl-C's line then starts below.
            (default: :obj:`False`)
    """
    debug = debug or env.debug()
    try:
        return run()
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print(f"{chr(10) if bar else ''}pyg-dist {command}: interrupted (Ctrl-C)",
              file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except SystemExit as exc:
        if not isinstance(exc.code, str) and not isinstance(exc, UsageError):
            raise
        if debug:
            traceback.print_exc()
        message = str(exc)
        if not message.startswith("pyg-dist"):  # raised where the command is not known
            message = f"pyg-dist {command}: {message}"
        if isinstance(exc, SharedUsageError) and env.under_torchrun():
            _say_once(message)
        else:
            print(message, file=sys.stderr, flush=True)
        raise UsageError(message) from None
    except Exception as exc:  # noqa: BLE001 - every failure ends in words
        if debug:
            traceback.print_exc()
        where = [note for note in getattr(exc, "__notes__", []) if note.startswith("(raised")]
        print(f"pyg-dist {command}: {type(exc).__name__}: {one_line(exc)}", file=sys.stderr)
        print(f"{where[0][:-1] + '; ' if where else '('}run again with --debug (or "
              f"{env.DEBUG}=1) to see the traceback)", file=sys.stderr, flush=True)
        return EXIT_FAILED


def _say_once(message: str) -> None:
    """A :class:`SharedUsageError` under torchrun: said by rank 0 and written
    to torchrun's error file (the root cause its summary shows); the other
    ranks wait a moment and say nothing."""
    if os.environ.get("RANK") != "0":
        time.sleep(QUIET_RANK_SECONDS)
        return
    print(message, file=sys.stderr, flush=True)
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:
        record = {"message": {"message": message, "extraInfo": {
            "py_callstack": message, "timestamp": str(int(time.time()))}}}
        try:
            with open(error_file, "w") as f:
                json.dump(record, f)
        except OSError:
            pass  # torchrun then says how to enable tracebacks instead


def check_world(command: str, world: int, parts: int | None, parts_dir: str | None,
                ranks_per_part: int = 1) -> None:
    """Under torchrun, before any rank joins the process group: refuses
    ``--parts`` (or a ``--parts-dir``) that does not fit the ``world`` ranks
    torchrun started, with a :class:`SharedUsageError` (one line, said once).

    Args:
        command (str): The command (``"train"``, ``"plan"``, ``"partition"``).
        world (int): The ranks torchrun started (``WORLD_SIZE``).
        parts (int, optional): ``--parts``, if given.
        parts_dir (str, optional): ``--parts-dir``, if given (and checked by
            :func:`check_parts_dir`).
        ranks_per_part (int, optional): Ranks that share a part (a layer
            pipeline's stages). (default: :obj:`1`)
    """
    if parts is not None and parts != world:
        raise SharedUsageError(
            f"pyg-dist {command}: --parts {parts} but torchrun started {world} ranks "
            f"(--nnodes times --nproc-per-node); pass --parts {world} (or leave it out), or "
            f"start {parts} ranks")
    if parts_dir is not None and is_grid_folder(parts_dir):
        if grid_ranks(parts_dir) != world:
            raise SharedUsageError(
                f"pyg-dist {command}: --parts-dir {parts_dir} is a grid folder of "
                f"{grid_ranks(parts_dir)} ranks but torchrun started {world}; start "
                f"{grid_ranks(parts_dir)} (--nnodes times --nproc-per-node)")
    elif parts_dir is not None and (Path(parts_dir) / META_FILE).is_file():
        cut = read_meta(parts_dir).num_parts
        if cut * ranks_per_part != world:
            raise SharedUsageError(
                f"pyg-dist {command}: --parts-dir {parts_dir} is cut into {cut} parts for "
                f"{cut * ranks_per_part} ranks but torchrun started {world} ranks; start "
                f"{cut * ranks_per_part} (--nnodes times --nproc-per-node), or cut the graph "
                f"again with 'pyg-dist partition --parts {world // ranks_per_part}'")


def one_line(error: BaseException) -> str:
    """The error's message in one line: its first, and where that only
    heads a list (``"... failed on 1 of 4 ranks:"``), the list's first entry
    (the failing rank's own message and its fix) and how many more there are.

    Args:
        error (BaseException): The error.
    """
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if not lines[0].endswith(":") or len(lines) == 1:
        return lines[0]
    more = len(lines) - 2
    return f"{lines[0]} {lines[1]}" + (f" (and {more} more)" if more else "")


def check_out(command: str, out: str, overwrite: bool) -> None:
    """Refuses an output folder ``--out`` that exists (unless ``overwrite``)
    or is a file.

    Args:
        command (str): The command (``"partition"``, ``"convert"``).
        out (str): The folder to write.
        overwrite (bool): Whether ``--overwrite`` was given.
    """
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UsageError(f"pyg-dist {command}: --out {out} is a file; name a folder to write")
    if path.exists() and not overwrite:
        raise UsageError(f"pyg-dist {command}: --out {out} exists; pass --overwrite to "
                         f"replace it, or name a new folder")


def check_checkpoint_dir(command: str, folder: str | os.PathLike | None) -> None:
    """Refuses a ``--checkpoint`` that names a file (the ranks would train
    until their first checkpoint and fail there).

    Args:
        command (str): The command (``"train"``).
        folder (str or os.PathLike, optional): ``--checkpoint``, if given.
    """
    if folder is not None and Path(folder).exists() and not Path(folder).is_dir():
        raise UsageError(f"pyg-dist {command}: --checkpoint {folder} is a file; name a folder "
                         f"for the checkpoints (it is created if missing)")


def check_parts_dir(command: str, parts_dir: str, ranks: int | None = None,
                    ranks_per_part: int = 1) -> int:
    """The part count of partition folder ``--parts-dir``, or an error
    naming the fix: a missing folder, one without ``meta.json``, one cut for
    another number of ranks than ``--parts`` (``ranks``).

    Args:
        command (str): The command (``"train"``, ``"plan"``).
        parts_dir (str): The folder.
        ranks (int, optional): ``--parts``, if given. (default: :obj:`None`)
        ranks_per_part (int, optional): Ranks that share a part (a layer
            pipeline's stages). (default: :obj:`1`)
    """
    path = Path(parts_dir)
    cut = (f"cut one with 'pyg-dist partition --dataset NAME --parts P --out {parts_dir}', "
           f"or leave --parts-dir out to cut the graph for this run")
    if path.exists() and not path.is_dir():
        raise UsageError(f"pyg-dist {command}: --parts-dir {parts_dir} is a file; name the "
                         f"partition folder (the --out of pyg-dist partition)")
    if not path.is_dir():
        raise UsageError(f"pyg-dist {command}: --parts-dir {parts_dir}: no such folder; {cut}")
    if is_grid_folder(path):  # written for one 3D grid (partition --distributed --grid)
        grid = grid_ranks(path)
        if ranks is not None and ranks != grid:
            raise UsageError(f"pyg-dist {command}: --parts {ranks} does not fit --parts-dir "
                             f"{parts_dir}, a grid folder of {grid} ranks; leave --parts out")
        return grid
    if not (path / META_FILE).is_file():
        raise UsageError(f"pyg-dist {command}: --parts-dir {parts_dir} is not a partition "
                         f"folder (no {META_FILE}); {cut}")
    try:
        parts = read_meta(path).num_parts
    except ValueError as exc:
        raise UsageError(f"pyg-dist {command}: --parts-dir {parts_dir}: {exc}") from None
    if ranks is not None and ranks != parts * ranks_per_part:
        raise UsageError(
            f"pyg-dist {command}: --parts {ranks} does not fit --parts-dir {parts_dir}, cut "
            f"into {parts} parts for {parts * ranks_per_part} ranks; leave --parts out, or "
            f"cut the graph again with 'pyg-dist partition --parts {ranks // ranks_per_part}'")
    return parts


def check_dataset(command: str, graph: Graph) -> None:
    """Refuses a dataset whose files are not under ``--root`` (Planetoid's
    raw files, OGB's downloaded folder), saying where they must go; nothing
    is downloaded.

    Args:
        command (str): The command.
        graph (Graph): The graph the options name.
    """
    name, root = graph.dataset, graph.root
    if name in PLANETOID:
        folder = f"{PLANETOID[name]}/raw"
        if root is None:
            raise UsageError(f"pyg-dist {command}: --dataset {name} reads {folder} under "
                             f"--root DIR; pass --root (a clone holds Cora's: --root "
                             f"{CLONE_ROOT})")
        missing = missing_raw_files(name, root)
        if missing:
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            raise UsageError(
                f"pyg-dist {command}: --dataset {name}: no {missing[0].name}{more} in "
                f"{Path(root) / folder}; put Planetoid's raw files there, or pass the --root "
                f"that holds {folder} (a clone: --root {CLONE_ROOT}); nothing is downloaded")
    elif name in OGB or name in OGBL or name == MAG_NAME:
        folder = (MAG_FOLDER if name == MAG_NAME
                  else OGB[name].folder if name in OGB else OGBL[name].folder)
        if root is None:
            raise UsageError(f"pyg-dist {command}: --dataset {name} reads OGB's downloaded "
                             f"folder {folder}/ under --root DIR; pass --root")
        if not (Path(root) / folder / "raw").is_dir():
            raise UsageError(
                f"pyg-dist {command}: --dataset {name}: no {folder}/raw in --root {root}; "
                f"pyg_dist does not download: fetch it with OGB on a machine with internet "
                f"(docs/partitioning.md#datasets) and pass the folder holding {folder}/")


def check_graph_folder(command: str, folder: str) -> None:
    """Refuses an ``--input`` that is not a graph folder.

    Args:
        command (str): The command.
        folder (str): The folder.
    """
    path = Path(folder)
    write = f"write one with 'pyg-dist convert --dataset NAME --out {folder}'"
    if not path.is_dir():
        raise UsageError(f"pyg-dist {command}: --input {folder}: no such folder; {write}")
    if not (path / GRAPH_FILE).is_file():
        raise UsageError(f"pyg-dist {command}: --input {folder} is not a graph folder (no "
                         f"{GRAPH_FILE}); {write}")


def check_link_folder(command: str, folder: str) -> None:
    """Refuses an ``--input`` graph folder without a link split (``--task link``).

    Args:
        command (str): The command.
        folder (str): A graph folder (:func:`check_graph_folder`).
    """
    try:
        info = read_info(folder)
    except ValueError as exc:
        raise UsageError(f"pyg-dist {command}: --input {folder}: {exc}") from None
    if not info.get("link"):
        raise UsageError(
            f"pyg-dist {command} --task link: --input {folder} holds no link split; write "
            f"one with 'pyg-dist convert --task link --dataset NAME --out {folder}' or "
            f"pyg_dist.datasets.write_graph_folder((train_data, val_data, test_data), "
            f"'{folder}'), or drop --task link to cut a node task"
        )
