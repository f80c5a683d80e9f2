#!/usr/bin/env bash
# Distributed counterfactual training on a SLURM cluster, across nodes.
#
#   sbatch scripts/slurm-train.sh --profile tutorial --mode full            # submit the job
#   bash scripts/slurm-train.sh --dry-run --profile tutorial --mode full    # print the launch
#
# srun starts one torchrun per node; each torchrun starts one process per GPU of its node. The
# torchruns find each other through a c10d rendezvous on the job's first node (no fixed ranks
# per node, no MASTER_ADDR to export), and `--kill-on-bad-exit` ends the whole job when one
# node fails. The arguments go to `python -m cfbook.commands.train_profile`; `--dry-run` (first argument) prints
# the command instead of running it, given the SLURM_* variables a job would have.
# Adapt the #SBATCH lines (partition, account, GPUs per node, time) to your cluster.
#
#SBATCH --job-name=cfbook-ct
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=32
#SBATCH --time=01:00:00
#SBATCH --output=cfbook-ct-%j.out
set -euo pipefail

dry_run=0
if [ "${1:-}" = "--dry-run" ]; then
    dry_run=1
    shift
fi
: "${SLURM_JOB_ID:?not inside a SLURM job: submit with sbatch (or set SLURM_* for --dry-run)}"
nodes=${SLURM_NNODES:-${SLURM_JOB_NUM_NODES:?SLURM_NNODES is not set}}
gpus_per_node=${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-1}}
# The rendezvous host: the job's first node (RDZV_HOST overrides, e.g. for a dry run elsewhere).
head_node=${RDZV_HOST:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)}
port=${RDZV_PORT:-29500}

launch=(
    srun --ntasks-per-node=1 --kill-on-bad-exit=1
    torchrun --nnodes="$nodes" --nproc_per_node="$gpus_per_node"
    --rdzv_id="$SLURM_JOB_ID" --rdzv_backend=c10d --rdzv_endpoint="$head_node:$port"
    --max_restarts=0
    -m cfbook.commands.train_profile "$@"
)
if [ "$dry_run" = 1 ]; then
    printf '%q ' "${launch[@]}"
    echo
    exit 0
fi
# sbatch runs a copy of this script: work from the folder the job was submitted from.
cd "${SLURM_SUBMIT_DIR:-.}"
if [ -f .venv/bin/activate ]; then
    source .venv/bin/activate
fi
exec "${launch[@]}"
