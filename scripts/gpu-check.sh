#!/usr/bin/env bash
# The GPU check: exercise cfbook's CUDA paths once on a real GPU and keep what it measures.
#
#   bash scripts/gpu-check.sh
#
# Each step has its own time box (about 13 minutes in all on one GPU), and a step that fails
# or runs out of time does not stop the next one (the script then exits non-zero). It
#   1. runs the CUDA-only tests (pytest -m cuda; $CFBOOK_GPU_TESTS names other test paths);
#   2. trains both stages of the `tutorial` profile and evaluates them:
#      data/tutorial/{full,vanilla}.json, their evaluations and, with papermill, the executed
#      stage notebooks;
#   3. records what the GPU chapters show, run on this GPU, and the seconds per CT epoch of the
#      `tutorial` profile with cf_batchsize 128 and 1024: data/gpu/record.json
#      (python -m cfbook.book.gpu_record; written part by part, so the time box keeps what finished);
#   4. runs the benchmarks on the GPU: the GPU section of benchmarks/RESULTS.md (each block is
#      written as soon as it is measured, so the time box keeps what finished);
#   5. with two GPUs or more: the `tutorial` full stage on 1 and on 2 GPUs (DDP over NCCL),
#      logs in data/scaling/.
# Commit data/tutorial/, data/gpu/, data/scaling/, benchmarks/results.json and RESULTS.md afterwards.
set -uo pipefail
cd "$(dirname "$0")/.."
# The project's .venv; else a python3 that already has torch with CUDA (a GPU machine's image,
# with no registry to install from), running the checkout in place; else make the .venv.
if [ -x .venv/bin/python ]; then
    py=.venv/bin/python
elif python3 -c "import torch, sklearn, psutil, plotly; assert torch.cuda.is_available()" 2>/dev/null; then
    py=python3
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    echo "no .venv: using $(command -v python3) with torch $(python3 -c 'import torch; print(torch.__version__)')"
else
    bash scripts/setup.sh || exit 1
    py=.venv/bin/python
fi
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

step "CUDA-only tests" 120 "$py" -m pytest -q -rs -m cuda ${CFBOOK_GPU_TESTS:-tests/}
if "$py" -c "import papermill, ipykernel" 2>/dev/null; then
    step "tutorial stages" 225 "$py" -m cfbook.commands.pipeline --profile tutorial --stages-only --force
else
    # Without papermill (a bare image): the same training stages, logs and evaluations, without
    # the executed stage notebooks.
    echo "papermill is not installed: training the stages with cfbook.commands.train_profile"
    step "tutorial full stage" 120 "$py" -m cfbook.commands.train_profile --profile tutorial --mode full
    step "tutorial vanilla stage" 45 "$py" -m cfbook.commands.train_profile --profile tutorial --mode vanilla
    step "tutorial evaluation" 120 "$py" -c "from cfbook.book.profiles import get_profile
from cfbook.book.stages import run_evaluation_step
run_evaluation_step(get_profile('tutorial'), device='cuda')"
fi
step "GPU chapters record" 75 "$py" -m cfbook.book.gpu_record
step "GPU benchmarks" 300 "$py" -m benchmarks.run --device cuda --note "scripts/gpu-check.sh" \
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
echo "GPU check passed. Commit data/tutorial/, data/gpu/, data/scaling/, benchmarks/results.json and RESULTS.md."
