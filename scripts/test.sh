#!/usr/bin/env bash
# The whole test suite (multi-rank tests start gloo ranks on 127.0.0.1), on
# PYG_DIST_TEST_WORKERS pytest-xdist workers (default 2: many tests wait on
# ranks, timeouts or links; tests/conftest.py keeps each file's tests, and
# all the namespaced hosts' tests, in one worker).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >&2
# Every rank, command and docs example the suite starts imports torch, PyG and
# pyg_dist anew: from the bytecode pip compiled at install, and pyg_dist's
# compiled by the first process into its __pycache__ folders (git ignores
# them), even where PYTHONDONTWRITEBYTECODE is set. (A PYTHONPYCACHEPREFIX
# folder would make the first processes compile torch and PyG again, about
# 7 s of CPU each.)
unset PYTHONDONTWRITEBYTECODE
exec .venv/bin/python -m pytest -q -n "${PYG_DIST_TEST_WORKERS:-2}" "$@"
