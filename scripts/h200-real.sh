#!/bin/bash
# Runs ON the H200 (the `device` tool, nvidia-h200-x2 for two partitions): real weights, real tunes.
# Before it, five back-to-back calls copy the engine and dependency parts and SmolLM2's GGUF pieces
# (scripts/gguf-parts.sh) to /tmp, each carrying one engine part and one GGUF piece:
#   .gpu/v0 + .gpu/mg/0 -> /tmp/ge, /tmp/mg0   .gpu/v1 + .gpu/mg/1   .gpu/v2 + .gpu/mg/2
#   .gpu/deps/d0 -> /tmp/gd0                   .gpu/deps/d1 + .gpu/mg/3 -> /tmp/gd1, /tmp/mg3
# and this call carries .gpu/mg/4.   usage: bash scripts/h200-real.sh vllm|sglang kv|tune|all
set -uo pipefail
engine=${1:?vllm or sglang}; what=${2:-all}
out=${OUT:-/tmp/out}; mkdir -p "$out"; exec > >(tee -a "$out/real-$engine-$what.log") 2>&1
t0=$(date +%s)
source scripts/h200-install.sh "$engine" || exit 1
echo "installed after $(( $(date +%s) - t0 ))s"
source scripts/h200-smollm2.sh || exit 1
echo "model ready after $(( $(date +%s) - t0 ))s"; ls -la /tmp/smollm2
space=${SPACE:-search_spaces/h200-$engine-smollm2.yaml}
if [ "$what" = kv ] || [ "$what" = all ]; then
  if [ "$engine" = vllm ]; then dtypes=auto,fp8,fp8_e5m2; fixed=(--set gpu-memory-utilization=0.2 --set max-model-len=16384 --set max-num-seqs=64)
  else dtypes=auto,fp8_e4m3; fixed=(--set mem-fraction-static=0.2 --set context-length=16384 --set max-running-requests=64); fi
  timeout 360 python3 benchmarks/kv_precision.py "$space" kv-cache-dtype "$dtypes" "${fixed[@]}" --repeats 2 --distractors 0 --served 64 --out "$out/kv-$engine.json"
  echo "kv done after $(( $(date +%s) - t0 ))s"
fi
if [ "$what" = tune ] || [ "$what" = all ]; then
  study=$(basename "$space" .yaml)
  # --timeout only stops launching; a trial launched just before it runs on. DEADLINE (s from this
  # script's start, default 550) stops the run with SIGTERM (its trials are stopped and recorded)
  # so the status, front, exports and tarball below still fit in the device's 10-minute command.
  # --foreground: the signal goes to `tune` alone, not to its process group (Ray's head processes
  # in it, terminated first, left the driver unable to stop its trials: it was killed at -k).
  hard=$(( ${DEADLINE:-550} - ($(date +%s) - t0) ))
  timeout --foreground -s TERM -k 40 "$hard" python3 -m tuner run --space "$space" --study "$study" --no-remeasure --timeout ${TUNE_TIMEOUT:-510s}
  echo "tune exit $? after $(( $(date +%s) - t0 ))s"
  tar czf "$out/runs-$study.tgz" -C runs "$study"
  python3 -m tuner status --study "$study" | tail -30
  python3 -m tuner pareto --study "$study" --out "$out/$study-pareto" | tail -20
  for n in 4096 8192; do python3 -m tuner export --study "$study" --pick max-context --min-context $n --format cmd 2>&1 | tail -3; done
  python3 -m tuner trials --study "$study" --out "$out/$study-trials.csv"
fi
nvidia-smi --query-gpu=index,memory.used --format=csv; ps -eo pid,pgid,cmd | grep -E "vllm|sglang" | grep -v grep || echo "no engine process left"
