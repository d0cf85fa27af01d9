#!/usr/bin/env bash
# Creates .venv with PyTorch's CPU wheel first (so no dependency can pull a
# multi-GB CUDA build), then pyg_dist with its test, notebook, docs and Triton extras.
# Idempotent: a second run only checks that everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
source scripts/versions.sh
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    "${PIP[@]}" "$TORCH"
fi
"${PIP[@]}" -e ".[test,triton,notebook,docs]" "$PYG_PIN" "$PYMETIS_PIN" \
    "triton==3.9.0" \
    "sphinx==9.0.4" "myst-nb==1.4.0" "furo==2025.12.19"
.venv/bin/python -c "import torch, torch_geometric, pymetis; print('torch', torch.__version__, '| torch_geometric', torch_geometric.__version__)"
