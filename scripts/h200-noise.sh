#!/bin/bash
# Runs ON the H200 device machine (the `device` tool) in a copy of this repo, after earlier calls
# copied the vLLM bundle parts to /tmp/ge (ENGINE=sglang: SGLang's to /tmp/sg) and the tuner's
# dependency parts to /tmp/gd0, /tmp/gd1
# (scripts/device-parts.md says how). Installs once per warm machine, then measures the load
# probe's noise with benchmarks/noise.py; logs and JSON go to $OUT.
# usage: scripts/h200-noise.sh ARGS...   (passed to benchmarks/noise.py)
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
exec > >(tee -a "$out/h200-noise.log") 2>&1
t0=$(date +%s)
source scripts/h200-install.sh "${ENGINE:-vllm}" || exit 1   # ENGINE=sglang: the SGLang bundle in /tmp/sg
echo "installed after $(( $(date +%s) - t0 ))s"
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv
nproc; python3 -c 'import os; print("affinity", sorted(os.sched_getaffinity(0)))'
python3 benchmarks/noise.py "$@"
rc=$?
nvidia-smi --query-gpu=index,memory.used --format=csv
ps -eo pid,pgid,etime,args | grep -E 'vllm|EngineCore|sglang' | grep -v grep || echo "no engine process left"
echo "exit $rc after $(( $(date +%s) - t0 ))s"
exit $rc
