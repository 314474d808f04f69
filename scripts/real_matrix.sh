#!/usr/bin/env bash
# Run the real-SGLang matrix (tests/real) on a GPU node, from the repository root.
#
# With two or more GPUs, the one-GPU tests run in two lanes at once (CUDA_VISIBLE_DEVICES=0 and
# =1; the GPU guard and memory sampler follow that variable), then the two-GPU tests. Results and
# server logs go to $SPEC_SWEEP_REAL_OUT (default /tmp/spec_sweep-real); each lane's pytest output
# to lane-*.log there. SGLang must import (pip install -e ".[sglang]", or the offline bundle:
# scripts/gpu_bundle.py). The model: $SPEC_SWEEP_REAL_MODEL, `smollm2` (default: the real
# checkpoint, scripts/make_real_model.py) or `dummy` (scripts/make_dummy_model.py); the SGLang
# version the specs name: $SPEC_SWEEP_REAL_SGLANG (default: the one that imports). On a lent
# machine of one GPU, scripts/real_session.sh runs a shorter plan within the device budget.
set -uo pipefail
cd "$(dirname "$0")/.."
export SPEC_SWEEP_REAL_OUT="${SPEC_SWEEP_REAL_OUT:-/tmp/spec_sweep-real}"
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
py="${PYTHON:-python3}"
mkdir -p "$SPEC_SWEEP_REAL_OUT"
if [ "${SPEC_SWEEP_REAL_MODEL:-smollm2}" = dummy ]; then
  "$py" scripts/make_dummy_model.py .models/llama-1b --eagle3
else
  "$py" scripts/make_real_model.py .models/smollm2-135m --eagle3
fi
gpus=$(nvidia-smi -L | grep -c '^GPU')
run() {  # lane name, pytest -k expression, CUDA_VISIBLE_DEVICES ("" = all)
  local log="$SPEC_SWEEP_REAL_OUT/lane-$1.log"
  if [ -n "$3" ]; then export CUDA_VISIBLE_DEVICES="$3"; else unset CUDA_VISIBLE_DEVICES; fi
  # one process per lane (pyproject's addopts ask for two xdist workers; a lane has one GPU)
  "$py" -m pytest -p no:cacheprovider -o "addopts=--strict-markers -ra" -q -rA tests/real \
    -k "$2" >"$log" 2>&1
  echo "lane $1: exit $? ($(tail -1 "$log"))"
}
if [ "$gpus" -ge 2 ]; then
  run gpu0 "baseline or variations or oom or ngram" 0 &
  run gpu1 "rejected or eagle3 or sweep" 1 &
  wait
  run tp2 "tp2" ""
else
  run gpu0 "not tp2" ""
fi
