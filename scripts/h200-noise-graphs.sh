#!/bin/bash
# Runs ON the H200 after the grid's parts are in /tmp (scripts/h200-grid.sh's header): the load
# probe's repeatability with CUDA graphs on and in eager mode, one session, one config (the grid's
# trial 7: util 0.012, max-model-len 4096, 32 seqs, fp8 KV; SmolLM2 real weights), FRESH fresh
# servers and WINDOWS windows on one server per mode (benchmarks/noise.py).
# usage: FRESH=3 WINDOWS=2 [MODES=graphs] bash scripts/h200-noise-graphs.sh        JSON and log under $OUT
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"; exec > >(tee -a "$out/noise-graphs.log") 2>&1
t0=$(date +%s)
source scripts/h200-install.sh vllm || exit 1
source scripts/h200-smollm2.sh || exit 1
sed 's/^    enable-prompt-tokens-details: true$/&\n    enforce-eager: true/' benchmarks/spaces/h200-vllm-grid.yaml > /tmp/h200-vllm-grid-eager.yaml
params='{"gpu-memory-utilization": 0.012, "max-model-len": 4096, "max-num-seqs": 32, "kv-cache-dtype": "fp8"}'
for mode in ${MODES:-graphs eager}; do
  space=benchmarks/spaces/h200-vllm-grid.yaml; [ "$mode" = eager ] && space=/tmp/h200-vllm-grid-eager.yaml
  timeout "${LIMIT:-280}" python3 benchmarks/noise.py --space "$space" --params "$params" --fresh "${FRESH:-3}" --windows "${WINDOWS:-2}" --json "$out/noise-$mode.json"
  echo "$mode done after $(( $(date +%s) - t0 ))s"
done
nvidia-smi --query-gpu=index,memory.used --format=csv; ps -eo pid,pgid,cmd | grep -E "vllm|EngineCore" | grep -v grep || echo "no engine process left"
