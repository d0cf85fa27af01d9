#!/usr/bin/env bash
# Builds the documentation site into docs/_build/html (API reference from the
# docstrings, the guides, the notebooks executed); warnings are
# errors. Extra arguments go to sphinx-build (e.g. -D nb_execution_mode=off).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >&2
exec .venv/bin/python -m sphinx -W --keep-going -b html "$@" docs docs/_build/html
