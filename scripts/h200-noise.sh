#!/bin/bash
# Runs ON the H200 device machine (the `device` tool) in a copy of this repo, after earlier calls
# copied the vLLM bundle parts to /tmp/ge and the tuner's dependency parts to /tmp/gd0, /tmp/gd1
# (scripts/device-parts.md says how). Installs once per warm machine, then measures the load
# probe's noise with benchmarks/noise.py; logs and JSON go to $OUT.
# usage: scripts/h200-noise.sh ARGS...   (passed to benchmarks/noise.py)
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
exec > >(tee -a "$out/h200-noise.log") 2>&1
t0=$(date +%s)
if [ ! -f /tmp/site/.tuner-installed ]; then
  bash /tmp/ge/install-on-host.sh /tmp/ge > /tmp/install.log 2>&1 || { tail -20 /tmp/install.log; exit 1; }
  TARGET=/tmp/site2 bash /tmp/gd0/install-deps.sh /tmp/gd0 /tmp/gd1 > /tmp/deps.log 2>&1 || { tail -20 /tmp/deps.log; exit 1; }
  touch /tmp/site/.tuner-installed
  echo "installed after $(( $(date +%s) - t0 ))s"
fi
export PYTHONPATH=$PWD:/tmp/site:/tmp/site2 VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv
nproc; python3 -c 'import os; print("affinity", sorted(os.sched_getaffinity(0)))'
python3 benchmarks/noise.py "$@"
rc=$?
nvidia-smi --query-gpu=index,memory.used --format=csv
ps -eo pid,pgid,etime,args | grep -E 'vllm|EngineCore' | grep -v grep || echo "no engine process left"
echo "exit $rc after $(( $(date +%s) - t0 ))s"
exit $rc
