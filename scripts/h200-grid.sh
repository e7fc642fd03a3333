#!/bin/bash
# Runs ON the H200 (the `device` tool, nvidia-h200): the real GPU table of the search-efficiency
# benchmark, benchmarks/spaces/h200-vllm-grid.yaml (24 vLLM configs, SmolLM2 real weights, CUDA
# graphs on), every config launched once, the screen off. Before it, back-to-back calls copy the
# parts (scripts/gpu-parts.sh builds them here) to /tmp, each under 64 MiB with the working tree:
#   .gpu/v0 -> /tmp/ge    .gpu/v1 -> /tmp/ge    .gpu/v2 -> /tmp/ge
#   .gpu/deps/d0 + .gpu/mg/0 -> /tmp/gd0, /tmp/mg0   (d1 + mg/1, d2 + mg/2 likewise)
# and this call carries .gpu/mg/3 and .gpu/mg/4 (scripts/h200-smollm2.sh copies them). Rerun it to
# go on: the study in runs/ stays while the machine is warm; on a fresh machine it resumes from the
# committed study, docs/data/grid/h200-vllm-grid.db (measured configs are not launched again; the
# rest wait in its queue). Commit the study back after each session:
#   tar xzf runs-h200-vllm-grid.tgz -C /tmp && cp /tmp/h200-vllm-grid/study.db docs/data/grid/h200-vllm-grid.db
#   python benchmarks/gpu_table.py docs/data/grid/h200-vllm-grid.db
# usage: bash scripts/h200-grid.sh        DEADLINE=s (default 560) stops tune with SIGTERM
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"; exec > >(tee -a "$out/grid.log") 2>&1
t0=$(date +%s)
source scripts/h200-install.sh vllm || exit 1
echo "installed after $(( $(date +%s) - t0 ))s"
source scripts/h200-smollm2.sh || exit 1
echo "model ready after $(( $(date +%s) - t0 ))s"
if [ ! -f runs/h200-vllm-grid/study.db ] && [ -f docs/data/grid/h200-vllm-grid.db ]; then
  mkdir -p runs/h200-vllm-grid && cp docs/data/grid/h200-vllm-grid.db runs/h200-vllm-grid/study.db   # resume what earlier sessions measured
fi
hard=$(( ${DEADLINE:-560} - ($(date +%s) - t0) - 25 ))
timeout --foreground -s TERM -k 30 "$hard" python3 -m tuner run --space benchmarks/spaces/h200-vllm-grid.yaml \
  --study h200-vllm-grid --no-screen --no-remeasure --timeout "$(( hard - 60 ))s"
echo "tune exit $? after $(( $(date +%s) - t0 ))s"
python3 -m tuner trials --study h200-vllm-grid --format csv --out "$out/h200-vllm-grid-trials.csv"
tar czf "$out/runs-h200-vllm-grid.tgz" --exclude=servers -C runs h200-vllm-grid
nvidia-smi --query-gpu=index,memory.used --format=csv; ps -eo pid,pgid,cmd | grep -E "vllm|EngineCore" | grep -v grep || echo "no engine process left"
