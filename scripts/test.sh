#!/usr/bin/env bash
# The whole test suite (multi-rank tests start gloo ranks on 127.0.0.1), on
# PYG_DIST_TEST_WORKERS pytest-xdist workers (default 2: many tests wait on
# ranks, timeouts or links; tests/conftest.py keeps each file's tests, and
# all the namespaced hosts' tests, in one worker).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >&2
# Every rank, command and docs example the suite starts imports pyg_dist anew:
# compiled once into .venv/pycache rather than from source in each process
# (where PYTHONDONTWRITEBYTECODE is set), the suite's processes start about
# 0.7 s of CPU sooner each, and the clone gets no __pycache__ folders.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-$PWD/.venv/pycache}"
exec .venv/bin/python -m pytest -q -n "${PYG_DIST_TEST_WORKERS:-2}" "$@"
