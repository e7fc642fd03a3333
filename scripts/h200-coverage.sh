#!/bin/bash
# Runs ON the H200 (the `device` tool, nvidia-h200) after the parts are in /tmp (scripts/h200-grid.sh's
# header; this call carries .gpu/mg/3 and .gpu/mg/4): issue 39's coverage data. Each config of
# CONFIGS (JSON objects, ';'-separated) is measured on FRESH (2) fresh servers by benchmarks/noise.py
# (the space's load probe at its target concurrency, 8-16 s windows), into $OUT/coverage-<i>.json;
# a config that would not finish before DEADLINE (s from the start) is left out.
#   CONFIGS='{"max-num-seqs": 256};{"max-model-len": 4096}' bash scripts/h200-coverage.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"; space=${SPACE:-h200-vllm-goodput-rate}
exec > >(tee -a "$out/coverage.log") 2>&1
t0=$(date +%s)
source scripts/h200-install.sh vllm || exit 1
source scripts/h200-smollm2.sh || exit 1
echo "ready after $(( $(date +%s) - t0 ))s"
i=0
IFS=';' read -ra configs <<< "${CONFIGS:?a ;-separated list of JSON params}"
for params in "${configs[@]}"; do
  left=$(( ${DEADLINE:-570} - ($(date +%s) - t0) ))
  if [ "$left" -lt $(( ${FRESH:-2} * 80 + 20 )) ]; then echo "left out ($left s left): $params"; continue; fi
  timeout --foreground -s TERM -k 20 "$(( left - 10 ))" python3 benchmarks/noise.py --space "$space" --params "$params" \
    --fresh "${FRESH:-2}" --windows 0 --duration 8 --max-duration 16 --json "$out/coverage-$i.json"
  echo "config $i exit $? after $(( $(date +%s) - t0 ))s"; i=$(( i + 1 ))
done
nvidia-smi --query-gpu=index,memory.used --format=csv; ps -eo pid,pgid,cmd | grep -E "vllm|EngineCore" | grep -v grep || echo "no engine process left"
