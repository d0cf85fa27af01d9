"""Checkpoints of distributed training: every rank's model, optimizer, halo
policy state, ledger and RNG state, written atomically.

::

    ckpt/
      latest.json     {"epoch": 40, "world_size": 4}, written last, by rank 0
      rank_0.pt       rank 0's state after epoch 40
      rank_1.pt       ...

A rank writes ``rank_<r>.pt.tmp`` and renames it; ``latest.json`` is replaced
only after every rank has renamed its file, so an interruption at any point
leaves the previous complete checkpoint in force.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from pyg_dist.distributed import barrier
from pyg_dist.distributed import rank as get_rank
from pyg_dist.distributed import world_size as get_world_size

__all__ = ["save_checkpoint", "load_checkpoint"]

LATEST = "latest.json"


def save_checkpoint(folder: str | os.PathLike, epoch: int, model: nn.Module,
                    optimizer: torch.optim.Optimizer, data: Any,
                    extra: dict[str, Any] | None = None) -> None:
    """Writes this rank's state after ``epoch``; collective (every rank calls it)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rank = get_rank()
    edge_index: Any = getattr(data, "edge_index", None)
    state = {
        "epoch": epoch,
        "world_size": get_world_size(),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "halo": edge_index.registry.state_dict() if hasattr(edge_index, "registry") else None,
        "ledger": data.ledger.state_dict() if hasattr(data, "ledger") else None,
        "rng": _rng_state(),
        "extra": extra or {},
    }
    tmp = folder / f"rank_{rank}.pt.tmp"
    torch.save(state, tmp)
    os.replace(tmp, folder / f"rank_{rank}.pt")
    barrier()
    if rank == 0:
        latest = folder / f"{LATEST}.tmp"
        latest.write_text(json.dumps({"epoch": epoch, "world_size": get_world_size()}))
        os.replace(latest, folder / LATEST)
    barrier()


def load_checkpoint(folder: str | os.PathLike, model: nn.Module,
                    optimizer: torch.optim.Optimizer, data: Any) -> tuple[int, dict[str, Any]]:
    """Restores this rank's state from the last complete checkpoint; returns
    its epoch and the ``extra`` dict saved with it."""
    folder = Path(folder)
    path = folder / LATEST
    if not path.is_file():
        raise FileNotFoundError(
            f"no complete checkpoint in '{folder}' (no {LATEST}); train without resume first, "
            f"with checkpoint='{folder}' and checkpoint_every > 0"
        )
    latest = json.loads(path.read_text())
    if latest["world_size"] != get_world_size():
        raise ValueError(
            f"the checkpoint in '{folder}' was written by {latest['world_size']} ranks but "
            f"{get_world_size()} are running; resume with {latest['world_size']} ranks"
        )
    state = torch.load(folder / f"rank_{get_rank()}.pt", weights_only=True)
    if state["epoch"] != latest["epoch"]:
        raise ValueError(
            f"'{folder}/rank_{get_rank()}.pt' holds epoch {state['epoch']} but {LATEST} says "
            f"{latest['epoch']}; the checkpoint is inconsistent, start without resume"
        )
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    edge_index: Any = getattr(data, "edge_index", None)
    if state["halo"] is not None and hasattr(edge_index, "registry"):
        edge_index.registry.load_state_dict(state["halo"])
    if state["ledger"] is not None and hasattr(data, "ledger"):
        data.ledger.load_state_dict(state["ledger"])
    _set_rng_state(state["rng"])
    return int(state["epoch"]), state["extra"]


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
