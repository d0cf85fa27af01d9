"""Spellings of earlier releases, for :func:`~pyg_dist.train.train`'s
keywords and ``pyg-dist train``'s flags alike: one table (:data:`SPELLINGS`)
of each old name with its spelling now and the option it sets, and one
translation into the option sections a job is made of (as ``--config``
spells them). They go in the next release."""
from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyg_dist.config import Adam, Checkpoint, Evaluation, GradSync, strategy_from_dict
from pyg_dist.halo import parse_policy

__all__ = ["Spelling", "SPELLINGS", "translate", "legacy_keywords", "option_objects"]


@dataclass(frozen=True)
class Spelling:
    """One spelling of an earlier release.

    Attributes:
        old (str): A keyword of ``train`` (``"lr"``) or a flag of
            ``pyg-dist train`` (``"--mode"``).
        new (str): How it is spelled now.
        section (str): The option section it sets (``"optimizer"``, ``"strategy"``, ...).
        field (str): The field of that section.
    """

    old: str
    new: str
    section: str
    field: str


_GROUPED = ("regroup_every", "regroup", "correction", "shrinkage", "regroup_from",
            "clusters_per_rank")
_PIPED = ("stages", "chunks", "initial_rows")

#: Every spelling of earlier releases.
SPELLINGS = (
    Spelling("lr", "optimizer=Adam(lr=...)", "optimizer", "lr"),
    Spelling("weight_decay", "optimizer=Adam(weight_decay=...)", "optimizer", "weight_decay"),
    Spelling("checkpoint", "checkpoint=Checkpoint(dir)", "checkpoint", "dir"),
    Spelling("checkpoint_every", "checkpoint=Checkpoint(dir, every=...)", "checkpoint",
             "every"),
    Spelling("resume", "checkpoint=Checkpoint(dir, resume=True)", "checkpoint", "resume"),
    Spelling("eval_every", "evaluation=Evaluation(every=...)", "evaluation", "every"),
    Spelling("eval_halo", "evaluation=Evaluation(halo=...)", "evaluation", "halo"),
    Spelling("grad_compress", "grad_sync=GradSync(compress=...)", "grad_sync", "compress"),
    Spelling("mode", "strategy=GradientOnly(...) or GraphParallel()", "strategy", "name"),
    *(Spelling(name, f"strategy=GradientOnly({name}=...)", "strategy", name)
      for name in _GROUPED),
    *(Spelling(name, f"strategy=LayerPipeline({name}=...)", "strategy", name)
      for name in _PIPED),
    Spelling("--mode", "--strategy graph-parallel|gradient-only", "strategy", "name"),
    Spelling("--compress", "--halo POLICY,compress=KIND", "strategy", "compress"),
    Spelling("--no-input-cache", "--halo POLICY,cache_inputs=false", "strategy",
             "no_input_cache"),
    Spelling("--clusters-per-part",
             "--clusters-per-rank (train) or partition --clusters-per-part", "strategy",
             "clusters_per_part"),
)
_BY_OLD = {s.old: s for s in SPELLINGS}
#: What ``mode`` spelled, as strategy names.
_MODES = {"exact": "graph-parallel", "gradient-only": "gradient-only"}


def translate(old: dict[str, Any], halo: str | None = None) -> dict[str, dict[str, Any]]:
    """The option sections that the old spellings ``old`` (names of
    :data:`SPELLINGS` with their values) set, as a job's configuration spells
    them (``{"optimizer": {"lr": 0.1}}``); raises, naming the fix, on
    spellings that contradict each other.

    Args:
        old (dict): Old keywords or flags and their values.
        halo (str, optional): The halo policy given in today's spelling, which
            ``--compress`` and ``--no-input-cache`` amend. (default: :obj:`None`)
    """
    sections: dict[str, dict[str, Any]] = {}
    for name, value in old.items():
        spelling = _BY_OLD[name]
        sections.setdefault(spelling.section, {})[spelling.field] = value
    if "checkpoint" in sections and "dir" not in sections["checkpoint"]:
        if sections["checkpoint"].get("every") or sections["checkpoint"].get("resume"):
            raise ValueError("'train' needs checkpoint=<folder> to write or resume "
                             "checkpoints: pass checkpoint=Checkpoint(dir, every=..., "
                             "resume=...)")
        del sections["checkpoint"]
    if sections.get("grad_sync", {}).get("compress") == "none":
        sections["grad_sync"]["compress"] = None
    strategy = _strategy(sections.pop("strategy", {}), halo)
    if strategy:
        sections["strategy"] = strategy
    return sections


def _strategy(given: dict[str, Any], halo: str | None) -> dict[str, Any]:
    """The strategy section of old spellings: a mode, the gradient-only and
    pipeline options, the halo's compression and input cache."""
    mode = given.pop("name", None)
    if mode is not None and mode not in _MODES:
        raise ValueError(f"'train' got mode='{mode}'; use one of {', '.join(_MODES)} (or "
                         f"strategy=GraphParallel() / GradientOnly(...))")
    out: dict[str, Any] = {} if mode is None else {"name": _MODES[mode]}
    compress, uncached = given.pop("compress", None), given.pop("no_input_cache", False)
    if compress is not None or uncached:
        out["halo"] = parse_policy(halo or "exact", compress, not uncached).spec()
    if "clusters_per_part" in given:  # the flag: gradient-only's option, by its name now
        out["clusters_per_rank"] = given.pop("clusters_per_part")
    grouped = {k: given[k] for k in _GROUPED if k in given}
    piped = {k: given[k] for k in _PIPED if k in given}
    if mode == "gradient-only":
        out.update(grouped)
    elif grouped.get("clusters_per_rank") is not None:
        raise ValueError(f"'train' takes clusters_per_rank in mode='gradient-only' only (got "
                         f"mode='{mode or 'exact'}'); leave it out, or pass "
                         f"strategy=GradientOnly(...)")
    if piped.get("stages", 1) > 1 or piped.get("chunks", 1) > 1:
        if mode == "gradient-only":
            raise ValueError("'train' with stages or chunks (a layer pipeline) does not take "
                             "mode='gradient-only'; choose one strategy")
        out = {"name": "layer-pipeline", "stages": 1, **piped}
    return out


def option_objects(sections: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``train``'s option objects of the sections :func:`translate` gave.

    Args:
        sections (dict): Option sections, as a job's configuration spells them.
    """
    out: dict[str, Any] = {}
    makers: dict[str, Callable[[dict[str, Any]], Any]] = {
        "optimizer": Adam.from_dict, "checkpoint": Checkpoint.from_dict,
        "evaluation": Evaluation.from_dict, "grad_sync": GradSync.from_dict,
        "strategy": strategy_from_dict}
    for section, values in sections.items():
        out[section] = makers[section](values)
    return out


def legacy_keywords(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Lets ``fn`` (:func:`~pyg_dist.train.train`) take the keywords of
    earlier releases, with one :class:`DeprecationWarning` naming each one's
    new spelling; the option objects given in today's spelling win."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        old = {k: kwargs.pop(k) for k in list(kwargs) if k in _BY_OLD and k != "checkpoint"}
        if isinstance(kwargs.get("checkpoint"), (str, os.PathLike)):
            old["checkpoint"] = kwargs.pop("checkpoint")
        if old:
            spelled = "; ".join(f"{k}= -> {_BY_OLD[k].new}" for k in old)
            warnings.warn(f"'train' keywords of earlier releases are deprecated and go in the "
                          f"next one: {spelled} (pyg_dist.config)", DeprecationWarning,
                          stacklevel=2)
            for name, value in option_objects(translate(old)).items():
                if kwargs.get(name) is None:
                    kwargs[name] = value
        return fn(*args, **kwargs)

    return wrapper
