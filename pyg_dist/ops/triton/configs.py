"""Tuning constants and autotune configurations of the Triton SpMM kernels, in
one place.

None of the numbers below has been timed on a GPU yet; each carries what chose
it: register counts from ptxas (which needs no GPU) or the reasoning. Time them
with ``benchmarks/spmm.py --device cuda`` before changing one.
"""
from __future__ import annotations

from typing import Any

import triton

from pyg_dist.runtime import env
from pyg_dist.typing import TRITON_INTERPRET

__all__ = [
    "SPLIT_DEGREE",
    "CHUNK_NNZ",
    "MAX_TILE",
    "INTERPRET_CONFIG",
    "AUTOTUNE_ENABLED",
    "autotune_configs",
    "autotune_args",
    "prune_by_width",
]

#: Rows with more entries than this leave the one-program-per-row kernel and are
#: split into chunks of :data:`CHUNK_NNZ` entries, reduced by several programs
#: and combined by a second pass. Reason (not yet measured): a row program
#: gathers ``BLOCK_E`` (16 to 64) entries per dependent step, so 256 entries are
#: at most 16 steps, a few microseconds, about the launch cost of the two extra
#: kernels the split path needs; longer rows would make the kernel's tail.
SPLIT_DEGREE = 256

#: Entries per chunk of a split row. Half of :data:`SPLIT_DEGREE`, so that a
#: chunk program never does more work than the longest unsplit row and every
#: split row gives at least three chunks to spread over the GPU.
CHUNK_NNZ = 128

#: Largest tile, ``BLOCK_E * BLOCK_F`` elements, of any config. Measured with
#: ptxas for sm_90 (Triton 3.9, bf16, value and halo on): the 64 x 128 tile of
#: the row kernel needs 248 registers at 4 warps (max: a 144-byte spill) and
#: still 143-151 at 8 warps; tiles of 4096 stay at 80-115 registers at 8 warps.
MAX_TILE = 4096

#: The one config used under ``TRITON_INTERPRET=1`` (autotuning needs a GPU).
#: Every interpreted program costs milliseconds, so blocks are large; BLOCK_F =
#: 128 still leaves a second, masked feature block for widths above 128.
INTERPRET_CONFIG = {"BLOCK_E": 32, "BLOCK_F": 128}

#: ``PYG_DIST_TRITON_AUTOTUNE=0`` skips autotuning on CUDA: each kernel then
#: runs the one default config of the feature width (``BLOCK_E`` = 32).
#: Autotuning compiles every candidate for every new width and dtype, minutes
#: for a test suite; the GPU test run uses this switch, benchmarks do not.
AUTOTUNE_ENABLED = env.triton_autotune()

# Candidates autotuning chooses from, per feature width (see prune_by_width).
_BLOCK_E = (16, 32, 64)
_BLOCK_F = (16, 32, 64, 128)
# The default entries per tile without autotuning: 32 covers the average degree
# of the graphs GNNs train on (10 to 50) in one or two steps.
_DEFAULT_BLOCK_E = 32
# Elements of a tile per warp: 512, 16 values per thread. Measured with ptxas
# for sm_90 as above: every candidate tile then compiles to 48-115 registers
# without spilling, while 32 values per thread (64 x 64 at 4 warps) need 152,
# which halves the warps an SM keeps in flight to hide the gather latency. The
# warp count is the tile size over this, between 1 and 8.
_ELEMENTS_PER_WARP = 512
_MAX_WARPS = 8


def _config(block_e: int, block_f: int) -> triton.Config:
    num_warps = min(max(block_e * block_f // _ELEMENTS_PER_WARP, 1), _MAX_WARPS)
    return triton.Config({"BLOCK_E": block_e, "BLOCK_F": block_f}, num_warps=num_warps)


def autotune_configs() -> list[triton.Config]:
    """The configurations every kernel of this package is autotuned over.

    ``BLOCK_E`` is the number of sparse entries (edges, or chunks in the
    combine pass) of one tile and ``BLOCK_F`` its number of features; the warp
    count follows the tile size. :func:`prune_by_width` keeps those that suit
    the feature width of a call. Under ``TRITON_INTERPRET=1`` this is the
    single :data:`INTERPRET_CONFIG`; with autotuning off, one default per
    ``BLOCK_F``.
    """
    if TRITON_INTERPRET:
        return [triton.Config(dict(INTERPRET_CONFIG), num_warps=1)]
    if not AUTOTUNE_ENABLED:
        return [_config(_DEFAULT_BLOCK_E, block_f) for block_f in _BLOCK_F]
    return [
        _config(block_e, block_f)
        for block_f in _BLOCK_F
        for block_e in _BLOCK_E
        if block_e * block_f <= MAX_TILE
    ]


def autotune_args(*key: str) -> dict[str, Any]:
    """The keyword arguments of ``triton.autotune`` for a kernel of this
    package: :func:`autotune_configs`, pruned by :func:`prune_by_width`, tuned
    anew for each value of the kernel arguments named in ``key``."""
    return dict(configs=autotune_configs(), key=list(key),
                prune_configs_by={"early_config_prune": prune_by_width})


def prune_by_width(
    configs: list[triton.Config], named_args: dict[str, Any], **kwargs: Any
) -> list[triton.Config]:
    """Keeps the configs whose ``BLOCK_F`` suits the feature width
    ``named_args["num_feats"]``: the power of two that covers it (capped at the
    largest block) and, when autotuning, half of it, which trades one more
    feature block for a smaller tile. Wider blocks would only load masked
    lanes."""
    widths = sorted({config.kwargs["BLOCK_F"] for config in configs})
    target = min(max(triton.next_power_of_2(int(named_args["num_feats"])), widths[0]), widths[-1])
    allowed = (target, target // 2) if AUTOTUNE_ENABLED else (target,)
    keep = [c for c in configs if c.kwargs["BLOCK_F"] in allowed]
    return keep or configs[:1]
