#!/usr/bin/env bash
# The whole test suite (multi-rank tests spawn gloo ranks on 127.0.0.1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >&2
exec .venv/bin/python -m pytest -q "$@"
