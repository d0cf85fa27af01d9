#!/usr/bin/env bash
# The demo: partition the embedded synthetic graph (10,000 nodes) into 4 parts
# with METIS and train a 2-layer GCN on 4 local ranks; the last line is JSON.
#
# It runs in the active virtual environment ($VIRTUAL_ENV) when that holds
# torch, adding what is missing there; otherwise in .venv, made with only what
# the run needs: PyTorch's CPU wheel first (so no dependency pulls a CUDA
# build), then pyg_dist with torch_geometric, pymetis and ninja (the C++
# kernels compile on first use). The test suite needs more: scripts/setup.sh
# (which the demo's .venv grows into). Extra arguments go to 'pyg-dist train'.
# PYTHON picks the interpreter that makes .venv; TORCH the torch requirement
# (scripts/versions.sh; with PyPI as the only index on Linux, set
# PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu for the CPU build).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
source scripts/versions.sh
start=$SECONDS
say() { echo "demo: $* ($((SECONDS - start)) s)" >&2; }
has() { "$VENV/bin/python" -c "$1" 2>/dev/null; }

if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ] \
    && "$VIRTUAL_ENV/bin/python" -c "import torch" 2>/dev/null; then
    VENV="$VIRTUAL_ENV"
    say "using the active virtual environment $VENV (it holds torch)"
else
    VENV=.venv
    if [ ! -x "$VENV/bin/python" ]; then
        say "making $VENV with $PYTHON"
        "$PYTHON" -m venv "$VENV"
    fi
fi
# pip prints one line per package it collects, and a bar per download
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar on)
if ! has "import torch"; then
    say "installing $TORCH, PyTorch's CPU wheel, first: about 190 MB to download, 0.9 GB" \
        "installed with its 9 dependencies, 1-3 minutes (20 s from pip's cache)"
    "${PIP[@]}" "$TORCH" >&2
fi
here="$(pwd -P)"
if ! has "import os, pyg_dist, torch_geometric, pymetis, ninja
assert os.path.realpath(pyg_dist.__file__).startswith('$here/')"; then
    say "installing pyg_dist (editable, from $here) with torch_geometric, pymetis and ninja:" \
        "about 25 packages, 250 MB installed, under a minute (15 s from pip's cache)"
    pins=()  # CI's versions, where the environment has none of its own
    has "import torch_geometric" || pins+=("$PYG_PIN")
    has "import pymetis" || pins+=("$PYMETIS_PIN")
    "${PIP[@]}" -e ".[cpu-ext]" ${pins[@]+"${pins[@]}"} >&2
fi
say "ready: $VENV; now cutting the graph and starting 4 ranks (a first run also compiles" \
    "the C++ kernels, about a minute, once per environment)"
exec "$VENV/bin/pyg-dist" train --dataset synthetic --parts 4 --model gcn --epochs 100 \
    --log-every 20 "$@"
