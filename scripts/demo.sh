#!/usr/bin/env bash
# The demo: partition the embedded synthetic graph (10,000 nodes) into 4 parts
# with METIS and train a 2-layer GCN on 4 local ranks; the last line is JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >&2
exec .venv/bin/pyg-dist train --dataset synthetic --parts 4 --model gcn --epochs 100 --log-every 20 "$@"
