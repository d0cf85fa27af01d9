"""Checkpoints of distributed training: every rank's model, optimizer, RNG
state and what its run gives to keep (:meth:`~pyg_dist.strategies.Runner.state_dict`:
the strategy, the halo and dropout state and ledger of the graph it trains
on, ...), written atomically.

::

    ckpt/
      latest.json     {"epoch": 40, "world_size": 4, "sha256": {"40": [...], "38": [...]}}
      rank_0.pt       rank 0's state after epoch 40
      rank_0.prev.pt  rank 0's state of the checkpoint before
      rank_1.pt       ...

A rank writes ``rank_<r>.pt.tmp`` and fsyncs it; once every rank has (a
rank that cannot, for a full disk say, makes every rank raise and remove its
temporary file, leaving the previous checkpoint as it was), each keeps its
previous file as ``rank_<r>.prev.pt`` and renames the new one into place;
then every rank writes ``latest.json`` (the same way, with every rank's
sha256 of the newest two epochs) into its own folder, so each machine of a
multi-host job holds a complete checkpoint of its own ranks (no shared
storage needed). On resume the ranks agree on the newest epoch some
``latest.json`` names (all files of that epoch exist by then) and each loads
its file of that epoch, current or previous, once its sha256 matches: an
interruption at any point leaves a complete checkpoint to resume from, and
a damaged file, or one of another run, is refused on every rank together.
When every rank still holds the checkpoint before intact (its ``.prev.pt``
file, whose sha256 ``latest.json`` also records), the ranks resume from that
one instead, and rank 0 prints one warning naming the damaged files.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from pyg_dist.runtime.distributed import all_gather_objects, failing_together
from pyg_dist.runtime.distributed import rank as get_rank
from pyg_dist.runtime.distributed import world_size as get_world_size
from pyg_dist.runtime.peers import name
from pyg_dist.utils.files import file_sha256, payload_bytes, replace_durably, write_file

__all__ = ["save_checkpoint", "load_checkpoint", "find_checkpoint", "restore_rng"]

LATEST = "latest.json"
#: What to do when a checkpoint does not fit.
DISK_FIX = ("free space there (the folder holds two checkpoints and, while one is written, a "
            "third) or choose a checkpoint folder on a filesystem with room")


def save_checkpoint(folder: str | os.PathLike, epoch: int, model: nn.Module,
                    optimizer: torch.optim.Optimizer,
                    extra: dict[str, Any] | None = None) -> None:
    """Writes this rank's state after ``epoch``; collective (every rank calls it).

    Args:
        folder (str or os.PathLike): The checkpoint folder (on each rank's own
            machine); created if missing.
        epoch (int): The epoch just finished.
        model (torch.nn.Module): The model whose ``state_dict`` is saved.
        optimizer (torch.optim.Optimizer): The optimizer whose ``state_dict`` is saved.
        extra (dict, optional): Anything else to restore with the checkpoint
            (returned by :func:`load_checkpoint`): the run's state, the
            result so far. (default: :obj:`None`)
    """
    folder = Path(folder)
    rank, world = get_rank(), get_world_size()
    state = {
        "epoch": epoch,
        "world_size": world,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": _rng_state(),
        "extra": extra or {},
    }
    tmp, current = folder / f"rank_{rank}.pt.tmp", _rank_file(folder, rank)
    what = f"saving the checkpoint of epoch {epoch} in '{folder}'"
    try:
        with failing_together(what):
            folder.mkdir(parents=True, exist_ok=True)
            known = _latest(folder)  # the checkpoint before, whose files become previous
            write_file(tmp, lambda f: torch.save(state, f), f"writing {tmp.name}",
                       payload_bytes(state), DISK_FIX)
            digest = file_sha256(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    digests = all_gather_objects(digest)  # read by every rank before any writes latest.json
    if current.exists():
        os.replace(current, _rank_file(folder, rank, previous=True))
    replace_durably(tmp, current)
    sums = {str(epoch): digests}
    if known is not None and known.get("sha256") and known["epoch"] != epoch:
        sums[str(known["epoch"])] = known["sha256"].get(str(known["epoch"]))
    latest = folder / f"{LATEST}.tmp-{rank}"
    content = json.dumps({"epoch": epoch, "world_size": world, "sha256": sums}).encode()
    with failing_together(f"{what} (its {LATEST})"):  # once every rank has its file in place
        try:
            write_file(latest, lambda f: f.write(content), f"writing {latest.name}",
                       len(content), DISK_FIX)
            replace_durably(latest, folder / LATEST)
        finally:
            latest.unlink(missing_ok=True)


def find_checkpoint(folder: str | os.PathLike) -> int | None:
    """The epoch every rank can resume from in ``folder`` (on each rank's own
    machine), or :obj:`None` when no rank has a checkpoint there; collective.
    Raises on every rank when the checkpoint was written by another number of
    ranks, or some rank lacks its file of that epoch or holds one whose
    sha256 is not the one ``latest.json`` records (damaged, or of another
    run), unless every rank holds the checkpoint before intact: then that
    epoch, with a warning on rank 0 naming the damaged files.

    Args:
        folder (str or os.PathLike): The checkpoint folder.
    """
    return _find(Path(folder))[0]


def load_checkpoint(folder: str | os.PathLike, model: nn.Module,
                    optimizer: torch.optim.Optimizer) -> tuple[int, dict[str, Any]]:
    """Restores this rank's model and optimizer from the last complete
    checkpoint; returns its epoch and the ``extra`` dict saved with it, with
    the RNG state under ``"rng"`` (for :func:`restore_rng`, once whatever
    else the run restores is in place). Collective: a file that is missing,
    damaged or of another run is refused on every rank together, naming it.

    Args:
        folder (str or os.PathLike): The checkpoint folder.
        model (torch.nn.Module): The model to load the saved ``state_dict`` into.
        optimizer (torch.optim.Optimizer): The optimizer to load the saved
            ``state_dict`` into.
    """
    folder = Path(folder)
    epoch, file = _find(folder)
    if epoch is None:
        raise FileNotFoundError(
            f"no complete checkpoint in '{folder}' (no {LATEST}); train without resume first, "
            f"with checkpoint='{folder}' and checkpoint_every > 0"
        )
    assert file is not None, "_find names the file of every rank"
    state: dict[str, Any] = {}
    with failing_together(f"loading the checkpoint of epoch {epoch} in '{folder}'"):
        state = torch.load(file, weights_only=True)
        if int(state["epoch"]) != epoch:
            raise ValueError(f"'{file}' holds epoch {state['epoch']}, not {epoch}; {_FIX}")
        _restore(file, model, optimizer, state)
    return int(state["epoch"]), {**state["extra"], "rng": state["rng"]}


def _restore(file: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
             state: dict[str, Any]) -> None:
    """Loads the model's and optimizer's state of ``file``; a checkpoint of
    another model (other layers or sizes) is named, with what differs."""
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as exc:
        lines = [line.strip().rstrip(".") for line in str(exc).splitlines() if line.strip()]
        detail = "; ".join(lines[1:3] or lines[:1])
        raise ValueError(
            f"'{file}' holds the state of another model or optimizer ({detail}); resume with "
            f"the job that wrote it (its JSON line, pyg-dist train --config FILE), or point "
            f"--checkpoint at a new folder, or start without resume"
        ) from None


_FIX = ("copy back the files this run wrote, resume from another folder, or start without "
        "resume")


def _rank_file(folder: Path, rank: int, previous: bool = False) -> Path:
    return folder / f"rank_{rank}{'.prev' if previous else ''}.pt"


def _latest(folder: Path) -> dict[str, Any] | None:
    """``latest.json`` of ``folder``, or :obj:`None` when there is none."""
    path = folder / LATEST
    if not path.is_file():
        return None
    try:
        content = json.loads(path.read_text())
        content["epoch"], content["world_size"] = int(content["epoch"]), int(content["world_size"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"'{path}' is damaged ({exc}); {_FIX}") from None
    return content


def _find(folder: Path) -> tuple[int | None, Path | None]:
    """The epoch every rank resumes from and this rank's file of it."""
    rank, world = get_rank(), get_world_size()
    view: dict[str, Any] = {}
    with failing_together(f"reading the checkpoint in '{folder}'"):
        view = _local_view(folder, rank)
    views = all_gather_objects(view)
    written = [v["latest"] for v in views if v["latest"] is not None]
    if not written:
        return None, None
    epoch, saved_by = max(written)
    if saved_by != world:
        raise ValueError(
            f"the checkpoint in '{folder}' was written by {saved_by} ranks but "
            f"{world} are running; resume with {saved_by} ranks"
        )
    sums = next((v["sums"] for v in views if v["latest"] == (epoch, saved_by) and v["sums"]),
                None)
    expected = sums.get(str(epoch)) if sums else None
    chosen = [_pick(v["files"], epoch, expected[r] if expected else None)
              for r, v in enumerate(views)]
    missing = [r for r, previous in enumerate(chosen) if previous is None]
    if missing:
        held = "; ".join(_held(folder, r, views[r]["files"], epoch,
                               expected[r] if expected else None) for r in missing)
        fallback = _previous_intact(views, sums or {}, epoch)
        if fallback is None:
            raise ValueError(
                f"the checkpoint of epoch {epoch} in '{folder}' is incomplete: {held}. Every "
                f"machine needs its ranks' rank_<r>.pt files, as written, in '{folder}'; {_FIX}"
            )
        previous_epoch, chosen = fallback
        warning = (f"warning: the checkpoint of epoch {epoch} in '{folder}' is damaged ({held}); "
                   f"every rank holds the one of epoch {previous_epoch} intact: resuming from it")
        if rank == 0 and warning not in _WARNED:  # once, though resuming looks twice
            _WARNED.add(warning)
            print(warning, file=sys.stderr, flush=True)
        epoch = previous_epoch
    return epoch, _rank_file(folder, rank, bool(chosen[rank]))


#: The fallback warnings this process printed.
_WARNED: set[str] = set()


def _previous_intact(views: list[dict[str, Any]], sums: dict[str, Any],
                     epoch: int) -> tuple[int, list[bool | None]] | None:
    """The epoch before ``epoch`` that ``latest.json`` records a sha256 of
    for every rank and every rank's file of which matches it, with which of
    each rank's files holds it; :obj:`None` when there is no such epoch."""
    older = [int(e) for e in sums if int(e) < epoch and sums[e]]
    if not older:
        return None
    previous = max(older)
    chosen = [_pick(v["files"], previous, sums[str(previous)][r]) for r, v in enumerate(views)]
    return None if any(c is None for c in chosen) else (previous, chosen)


def _pick(files: list[dict[str, Any]], epoch: int, digest: str | None) -> bool | None:
    """Whether a rank's file of ``epoch`` is its previous one (or
    :obj:`None` when it has none): the one whose sha256 is ``digest`` or,
    for checkpoints that record none, the one that says it holds ``epoch``."""
    for file in files:
        if (file["sha256"] == digest) if digest is not None else (file["epoch"] == epoch):
            return bool(file["previous"])
    return None


def _held(folder: Path, rank: int, files: list[dict[str, Any]], epoch: int,
          digest: str | None) -> str:
    """What rank ``rank`` holds instead of its file of ``epoch``."""
    if not files:
        return f"{name(rank)} has epochs none (no rank_{rank}.pt)"
    parts = []
    for file in files:
        path = folder / file["name"]
        if file["error"]:
            parts.append(f"'{path}' cannot be read ({file['error']})")
        elif digest is not None and file["epoch"] == epoch:
            parts.append(f"'{path}' (epoch {file['epoch']}) does not match the sha256 "
                         f"{LATEST} records for rank {rank} at epoch {epoch}: its bytes "
                         f"changed after it was written (flipped or cut off) or it comes from "
                         f"another run")
        else:
            parts.append(f"'{path}' holds epoch {file['epoch']}")
    return f"{name(rank)}: " + ", ".join(parts)


def _local_view(folder: Path, rank: int) -> dict[str, Any]:
    """What this rank finds in its folder: the (epoch, world size) and sums
    of ``latest.json``, and its own files (sha256, epoch); temporary files
    a killed save left behind are removed."""
    for stale in (folder / f"rank_{rank}.pt.tmp", folder / f"{LATEST}.tmp-{rank}"):
        stale.unlink(missing_ok=True)
    latest = _latest(folder)
    files = []
    for previous in (False, True):
        file = _rank_file(folder, rank, previous)
        if not file.is_file():
            continue
        epoch, error = None, None
        try:
            epoch = int(torch.load(file, weights_only=True, mmap=True)["epoch"])
        except Exception as exc:  # noqa: BLE001 - a damaged file is named, not raised alone
            error = " ".join(str(exc).split())[:200] or type(exc).__name__
        files.append({"name": file.name, "previous": previous, "sha256": file_sha256(file),
                      "epoch": epoch, "error": error})
    return {"latest": None if latest is None else (latest["epoch"], latest["world_size"]),
            "sums": None if latest is None else latest.get("sha256"), "files": files}


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Sets the RNG state a checkpoint saved (``load_checkpoint(...)[1]["rng"]``).

    Args:
        state (dict): The saved state.
    """
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
