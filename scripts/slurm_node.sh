#!/usr/bin/env bash
# One node of a SLURM job (scripts/slurm.sbatch runs it once per node with
# srun): torchrun for this node's ranks, its rendezvous taken from SLURM's
# variables, then 'pyg-dist train' with the arguments given.
#
#   SLURM_JOB_NODELIST  the job's hosts; the first is the master (scontrol
#                       expands it; without scontrol: 'a,b' and 'node[01-04]')
#   SLURM_NNODES        torchrun's --nnodes
#   SLURM_NODEID        torchrun's --node-rank
#   SLURM_JOB_ID        picks the master port: 20000 + job id mod 10000
#
# RANKS_PER_NODE (default: the node's GPUs, else 1), MASTER_ADDR and
# MASTER_PORT override what SLURM's variables give; PYTHON is the interpreter
# with pyg_dist installed (default: .venv/bin/python, else python3).
# SIGUSR1 (sbatch --signal=USR1@T) and SIGTERM reach every rank (torchrun
# passes them on): each finishes its epoch, saves its checkpoint and exits
# with status 75; SHUTDOWN_TIMEOUT (default 100 s) is how long torchrun waits
# for that before it kills the ranks. DRY_RUN=1 prints the command only.
set -euo pipefail
missing=()
for name in SLURM_JOB_NODELIST SLURM_NNODES SLURM_NODEID; do
    [ -n "${!name:-}" ] || missing+=("$name")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "slurm_node.sh: ${missing[*]} not set; run it under SLURM (srun, from" \
         "scripts/slurm.sbatch), or set them by hand" >&2
    exit 2
fi

first_host() {
    if command -v scontrol >/dev/null 2>&1; then
        scontrol show hostnames "$1" | head -n 1
    elif [[ "$1" =~ ^([^,\[]+)\[([0-9]+) ]]; then  # node[01-04,07] -> node01
        echo "${BASH_REMATCH[1]}${BASH_REMATCH[2]}"
    else                                            # a,b -> a
        echo "${1%%,*}"
    fi
}

if [ -z "${PYTHON:-}" ]; then
    PYTHON=python3
    [ -x .venv/bin/python ] && PYTHON=.venv/bin/python
fi
MASTER_ADDR="${MASTER_ADDR:-$(first_host "$SLURM_JOB_NODELIST")}"
MASTER_PORT="${MASTER_PORT:-$((20000 + ${SLURM_JOB_ID:-0} % 10000))}"
RANKS_PER_NODE="${RANKS_PER_NODE:-${SLURM_GPUS_ON_NODE:-1}}"
command=("$PYTHON" -m torch.distributed.run
    --nnodes "$SLURM_NNODES" --node-rank "$SLURM_NODEID" --nproc-per-node "$RANKS_PER_NODE"
    --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT"
    --signals-to-handle SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1
    --shutdown-timeout "${SHUTDOWN_TIMEOUT:-100}"
    -m pyg_dist.cli train "$@")
echo "slurm_node.sh: node $SLURM_NODEID of $SLURM_NNODES, $RANKS_PER_NODE ranks, master" \
     "$MASTER_ADDR:$MASTER_PORT: ${command[*]}" >&2
if [ -n "${DRY_RUN:-}" ]; then
    exit 0
fi
exec "${command[@]}"
