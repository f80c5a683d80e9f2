#!/usr/bin/env bash
# The GPU check: exercise cfbook's CUDA paths once on a real GPU and keep what it measures.
#
#   bash scripts/gpu-check.sh
#
# Sized for under 8 minutes on one modern GPU; each step has its own time box, and a step that
# fails or runs out of time does not stop the next one (the script then exits non-zero). It
#   1. trains both stages of the `tutorial` profile (with their evaluation, where the stages
#      write one): data/tutorial/{full,vanilla}.json and the executed stage notebooks;
#   2. runs the CUDA-only tests (pytest -m cuda);
#   3. runs the benchmarks on the GPU: the GPU section of benchmarks/RESULTS.md (each block is
#      written as soon as it is measured, so the time box keeps what finished);
#   4. with two GPUs or more: the `tutorial` full stage on 1 and on 2 GPUs (DDP over NCCL),
#      logs in data/scaling/.
# Commit data/tutorial/, data/scaling/, benchmarks/results.json and RESULTS.md afterwards.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    bash scripts/setup.sh || exit 1
fi
py=.venv/bin/python
export CFBOOK_DEVICE=cuda
failed=()

step() {  # step NAME SECONDS COMMAND...
    local name=$1 seconds=$2 start=$SECONDS
    shift 2
    echo "=== ${name} (time box ${seconds} s)"
    timeout --signal=TERM --kill-after=15 "$seconds" "$@"
    local status=$?
    echo "=== ${name}: exit ${status} after $((SECONDS - start)) s"
    if [ "$status" != 0 ]; then
        failed+=("${name} (exit ${status})")
    fi
}

gpus=$("$py" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
if [ "$gpus" -lt 1 ]; then
    echo "no CUDA GPU visible to torch: nothing to check" >&2
    exit 1
fi
nvidia-smi -L 2>/dev/null || true
echo "torch sees ${gpus} GPU(s)"

step "tutorial stages" 240 "$py" -m cfbook.commands.pipeline --profile tutorial --stages-only --force
step "CUDA-only tests" 60 "$py" -m pytest -q -rs -m cuda tests/
step "GPU benchmarks" 120 "$py" -m benchmarks.run --device cuda --note "scripts/gpu-check.sh" \
    --only speedup,scaling,overhead,throughput,precision,syncs,memory,efficiency
if [ "$gpus" -ge 2 ]; then
    step "DDP on 2 GPUs" 480 "$py" -m cfbook.commands.scaling --profile tutorial --mode full \
        --processes 1 2 --device cuda
else
    echo "=== one GPU: no 2-GPU DDP stage"
fi

if [ "${#failed[@]}" != 0 ]; then
    printf 'GPU check: failed or out of time: %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "GPU check passed. Commit data/tutorial/, data/scaling/, benchmarks/results.json and RESULTS.md."
