#!/usr/bin/env bash
# The GPU check of pyg_dist's kernels, in one run of under 8 minutes:
#   1. the machine: nvidia-smi, python, torch (+ CUDA), triton;
#   2. what is missing for the tests and the benchmark (pytest, torch_geometric),
#      installed with pip from wheels only; torch and triton are never installed,
#      the image's own are what is checked;
#   3. the CUDA tests: pytest tests/ops -q (autotuning off, one config per width);
#   4. the benchmark: python benchmarks/spmm.py --device cuda --feats 16 64 128 256
#      (autotuning on).
#
# Usage, from anywhere:  bash benchmarks/gpu_check.sh
# Logs go to $OUT when it is set, else to a new temporary folder (printed at the
# end). With no network, point PYG_DIST_WHEELS at a folder of wheels
# (pip download --only-binary=:all: pytest torch_geometric ...).
# Every step runs under `timeout`; a failing step does not stop the later ones,
# and the exit status is non-zero when any step failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOG_DIR="${OUT:-$(mktemp -d -t pyg_dist_gpu_check.XXXXXX)}"
PYTHON="${PYTHON:-python}"
mkdir -p "$LOG_DIR"
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# Kernels must compile for the GPU, never run in Triton's interpreter.
unset TRITON_INTERPRET

# Each step's limit in seconds, further cut to what is left of TOTAL (7 min 40 s,
# leaving 20 s of the 8 minutes for start-up and logs). Compiling the kernel
# variants the tests need is most of the test step.
TOTAL=460
T_INFO=30
T_INSTALL=90
T_TESTS=270
T_BENCH=180
DEADLINE=$(($(date +%s) + TOTAL))

FAILED=()

# run_step NAME SECONDS COMMAND...: runs COMMAND under `timeout` (SECONDS, or
# what is left before DEADLINE), tees its output to $LOG_DIR/NAME.log and
# records a failure (or a timeout) without exiting.
run_step() {
    local name="$1" seconds="$2"
    shift 2
    local log="$LOG_DIR/$name.log" start status left
    start=$(date +%s)
    left=$((DEADLINE - start))
    if [[ $left -lt 15 ]]; then
        echo "=== $name: skipped, ${left}s left of ${TOTAL}s" | tee "$log"
        FAILED+=("$name (no time left)")
        return 0
    fi
    if [[ $left -lt $seconds ]]; then
        seconds=$left
    fi
    echo "=== $name (limit ${seconds}s): $*" | tee "$log"
    set +e
    timeout --kill-after=10 "$seconds" "$@" 2>&1 | tee -a "$log"
    status=${PIPESTATUS[0]}
    set -e
    echo "=== $name: exit $status after $(($(date +%s) - start))s" | tee -a "$log"
    if [[ $status -eq 124 || $status -eq 137 ]]; then
        FAILED+=("$name (timed out after ${seconds}s)")
    elif [[ $status -ne 0 ]]; then
        FAILED+=("$name (exit $status)")
    fi
    return 0
}

machine_info() {
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi
    else
        echo "nvidia-smi not found"
    fi
    "$PYTHON" - <<'EOF'
import sys

import torch

print("python", sys.version.split()[0])
print("torch", torch.__version__, "cuda", torch.version.cuda)
try:
    import triton
    print("triton", triton.__version__)
except ImportError as exc:
    sys.exit(f"triton is not importable ({exc}); the image must provide it")
if not torch.cuda.is_available():
    sys.exit("torch.cuda.is_available() is False: this check needs a CUDA device")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"device {i}: {p.name}, sm_{p.major}{p.minor}, {p.total_memory / 2**30:.0f} GiB")
EOF
}

# install_missing MODULE PACKAGE...: pip-installs PACKAGE (wheels only) unless
# MODULE imports already; from $PYG_DIST_WHEELS alone when that is set. Neither
# pytest nor torch_geometric declares a dependency on torch, so pip never
# touches the image's torch; install_deps checks that it did not.
install_missing() {
    local module="$1"
    shift
    if "$PYTHON" -c "import $module" 2>/dev/null; then
        echo "$module: present"
        return 0
    fi
    local source=()
    if [[ -n "${PYG_DIST_WHEELS:-}" ]]; then
        source=(--no-index --find-links "$PYG_DIST_WHEELS")
    fi
    echo "$module: missing, installing $*"
    "$PYTHON" -m pip install --quiet --only-binary=:all: --disable-pip-version-check \
        "${source[@]}" "$@" || return 1
    "$PYTHON" -c "import $module"
}

install_deps() {
    local status=0 torch_before torch_after
    torch_before=$("$PYTHON" -c 'import torch; print(torch.__version__)')
    install_missing pytest pytest || status=1
    install_missing torch_geometric torch_geometric || status=1
    torch_after=$("$PYTHON" -c 'import torch; print(torch.__version__)')
    if [[ "$torch_before" != "$torch_after" ]]; then
        echo "pip replaced the image's torch $torch_before by $torch_after"
        status=1
    fi
    return $status
}

# `timeout` runs programs, not shell functions: the steps' functions reach the
# child shells through the environment.
export PYTHON PYG_DIST_WHEELS="${PYG_DIST_WHEELS:-}"
export -f machine_info install_missing install_deps

run_step info "$T_INFO" bash -c machine_info
if [[ ${#FAILED[@]} -gt 0 ]]; then
    echo "no usable CUDA device or Triton; nothing else to check (logs in $LOG_DIR)"
    exit 2
fi
run_step install "$T_INSTALL" bash -c install_deps
run_step tests "$T_TESTS" env PYG_DIST_TRITON_AUTOTUNE=0 \
    "$PYTHON" -m pytest tests/ops -q -rfEs --durations=10 -p no:cacheprovider \
        --junitxml="$LOG_DIR/pytest.xml"
if [[ -f benchmarks/spmm.py ]]; then
    run_step bench "$T_BENCH" "$PYTHON" benchmarks/spmm.py --device cuda --feats 16 64 128 256
else
    echo "benchmarks/spmm.py is not in this tree" | tee "$LOG_DIR/bench.log"
    FAILED+=("bench (benchmarks/spmm.py missing)")
fi

echo "logs in $LOG_DIR"
if [[ ${#FAILED[@]} -gt 0 ]]; then
    printf 'FAILED: %s\n' "${FAILED[@]}"
    exit 1
fi
echo "all steps passed"
