"""Checkpoints of distributed training: every rank's model, optimizer, halo
policy state, ledger and RNG state, written atomically.

::

    ckpt/
      latest.json     {"epoch": 40, "world_size": 4}
      rank_0.pt       rank 0's state after epoch 40
      rank_0.prev.pt  rank 0's state of the checkpoint before
      rank_1.pt       ...

A rank writes ``rank_<r>.pt.tmp``, keeps its previous file as
``rank_<r>.prev.pt`` and renames the new one into place; once every rank has,
every rank writes ``latest.json`` into its own folder, so each machine of a
multi-host job holds a complete checkpoint of its own ranks (no shared storage
needed). On resume the ranks agree on the newest epoch some ``latest.json``
names (all files of that epoch exist by then) and each loads its file of that
epoch, current or previous: an interruption at any point leaves a complete
checkpoint to resume from.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from pyg_dist.halo.layer import registry_of
from pyg_dist.runtime.distributed import all_gather_objects, barrier
from pyg_dist.runtime.distributed import rank as get_rank
from pyg_dist.runtime.distributed import world_size as get_world_size
from pyg_dist.runtime.peers import name

__all__ = ["save_checkpoint", "load_checkpoint", "find_checkpoint"]

LATEST = "latest.json"


def save_checkpoint(folder: str | os.PathLike, epoch: int, model: nn.Module,
                    optimizer: torch.optim.Optimizer, data: Any,
                    extra: dict[str, Any] | None = None) -> None:
    """Writes this rank's state after ``epoch``; collective (every rank calls it).

    Args:
        folder (str or os.PathLike): The checkpoint folder (on each rank's own
            machine); created if missing.
        epoch (int): The epoch just finished.
        model (torch.nn.Module): The model whose ``state_dict`` is saved.
        optimizer (torch.optim.Optimizer): The optimizer whose ``state_dict`` is saved.
        data (DistData or DistHeteroData): The rank's graph: its halo
            policies' state (its registry) and ledger are saved when it has them.
        extra (dict, optional): Anything else to restore with the checkpoint
            (returned by :func:`load_checkpoint`). (default: :obj:`None`)
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rank = get_rank()
    registry = registry_of(data)
    state = {
        "epoch": epoch,
        "world_size": get_world_size(),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "halo": registry.state_dict() if registry is not None else None,
        "ledger": data.ledger.state_dict() if hasattr(data, "ledger") else None,
        "rng": _rng_state(),
        "extra": extra or {},
    }
    tmp, current = folder / f"rank_{rank}.pt.tmp", _rank_file(folder, rank)
    torch.save(state, tmp)
    if current.exists():
        os.replace(current, _rank_file(folder, rank, previous=True))
    os.replace(tmp, current)
    barrier()
    latest = folder / f"{LATEST}.tmp-{rank}"
    latest.write_text(json.dumps({"epoch": epoch, "world_size": get_world_size()}))
    os.replace(latest, folder / LATEST)
    barrier()


def find_checkpoint(folder: str | os.PathLike) -> int | None:
    """The epoch every rank can resume from in ``folder`` (on each rank's own
    machine), or :obj:`None` when no rank has a checkpoint there; collective.
    Raises on every rank when the checkpoint was written by another number of
    ranks or some rank lacks its file of that epoch.

    Args:
        folder (str or os.PathLike): The checkpoint folder.
    """
    folder = Path(folder)
    views = all_gather_objects(_local_view(folder, get_rank()))
    written = [v["latest"] for v in views if v["latest"] is not None]
    if not written:
        return None
    epoch, world = max(written)
    if world != get_world_size():
        raise ValueError(
            f"the checkpoint in '{folder}' was written by {world} ranks but "
            f"{get_world_size()} are running; resume with {world} ranks"
        )
    missing = [r for r, v in enumerate(views) if epoch not in v["epochs"]]
    if missing:
        held = "; ".join(f"{name(r)} has epochs {sorted(views[r]['epochs']) or 'none'}"
                         for r in missing)
        raise ValueError(
            f"the checkpoint of epoch {epoch} in '{folder}' is incomplete: {held}. Every "
            f"machine needs its ranks' rank_<r>.pt files in '{folder}'; copy them back, or start "
            f"without resume"
        )
    return epoch


def load_checkpoint(folder: str | os.PathLike, model: nn.Module,
                    optimizer: torch.optim.Optimizer, data: Any) -> tuple[int, dict[str, Any]]:
    """Restores this rank's state from the last complete checkpoint; returns
    its epoch and the ``extra`` dict saved with it. Collective.

    Args:
        folder (str or os.PathLike): The checkpoint folder.
        model (torch.nn.Module): The model to load the saved ``state_dict`` into.
        optimizer (torch.optim.Optimizer): The optimizer to load the saved
            ``state_dict`` into.
        data (DistData or DistHeteroData): The rank's graph: its halo
            policies' state and ledger are restored when both it and the
            checkpoint have them.
    """
    folder = Path(folder)
    epoch = find_checkpoint(folder)
    if epoch is None:
        raise FileNotFoundError(
            f"no complete checkpoint in '{folder}' (no {LATEST}); train without resume first, "
            f"with checkpoint='{folder}' and checkpoint_every > 0"
        )
    state = _load(folder, get_rank(), epoch)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    registry = registry_of(data)
    if state["halo"] is not None and registry is not None:
        registry.load_state_dict(state["halo"])
    if state["ledger"] is not None and hasattr(data, "ledger"):
        data.ledger.load_state_dict(state["ledger"])
    _set_rng_state(state["rng"])
    return int(state["epoch"]), state["extra"]


def _rank_file(folder: Path, rank: int, previous: bool = False) -> Path:
    return folder / f"rank_{rank}{'.prev' if previous else ''}.pt"


def _local_view(folder: Path, rank: int) -> dict[str, Any]:
    """What this rank finds in its folder: the (epoch, world size) of
    ``latest.json`` and the epochs of its own files."""
    latest = None
    path = folder / LATEST
    if path.is_file():
        content = json.loads(path.read_text())
        latest = (int(content["epoch"]), int(content["world_size"]))
    epochs = {}
    for previous in (False, True):
        file = _rank_file(folder, rank, previous)
        if file.is_file():
            epochs[int(torch.load(file, weights_only=True, mmap=True)["epoch"])] = previous
    return {"latest": latest, "epochs": epochs}


def _load(folder: Path, rank: int, epoch: int) -> dict[str, Any]:
    for previous in (False, True):
        file = _rank_file(folder, rank, previous)
        if file.is_file():
            state = torch.load(file, weights_only=True)
            if state["epoch"] == epoch:
                return state
    raise AssertionError(f"find_checkpoint promised epoch {epoch} in {folder} for rank {rank}")


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
