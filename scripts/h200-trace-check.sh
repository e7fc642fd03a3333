#!/bin/bash
# Runs ON the GPU host (the `device` tool) after the SGLang parts are in /tmp (back-to-back calls,
# scripts/h200-goodput.sh's header; this call or an earlier one carries .gpu/mg/3 and .gpu/mg/4):
# issue 46's independent replay, benchmarks/trace_crosscheck.py on search_spaces/h200-sglang-trace.yaml.
#   RATE=20 SECONDS_EACH=150 bash scripts/h200-trace-check.sh     (DEADLINE=s, default 590, ends it with SIGTERM)
#   BENCH=aiperf REPEATS=N ...   aiperf replays it instead of SGLang's bench, N rounds on fresh servers; aiperf is
#                                installed from its parts in /tmp/ap0..5 (scripts/aiperf-parts.sh) where /tmp/aip has none
#   SPACE=search_spaces/h200-sglang-trace-aiperf.yaml   the space (its trace at full length: aiperf's; default: SGLang's bench's)
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"; exec > >(tee -a "$out/trace-check.log") 2>&1
t0=$(date +%s)
source scripts/h200-install.sh sglang || exit 1
source scripts/h200-smollm2.sh || exit 1
if [ "${BENCH:-sglang}" = aiperf ] && [ ! -x /tmp/aip/bin/aiperf ]; then bash scripts/h200-aiperf.sh || exit 1; fi
echo "ready after $(( $(date +%s) - t0 ))s"; nvidia-smi --query-gpu=name --format=csv,noheader
timeout --foreground -s TERM -k 20 "$(( ${DEADLINE:-590} - ($(date +%s) - t0) - 20 ))" \
  python3 benchmarks/trace_crosscheck.py --space "${SPACE:-search_spaces/h200-sglang-trace.yaml}" --rate "${RATE:-20}" \
  --seconds "${SECONDS_EACH:-150}" --out "$out/trace" --bench "${BENCH:-sglang}" --aiperf /tmp/aip/bin/aiperf --repeats "${REPEATS:-1}"
echo "trace check exit $? after $(( $(date +%s) - t0 ))s"
rm -rf "$out/trace/stubs" "$out/trace/hf"
ps -eo pid,pgid,cmd | grep -E "sglang" | grep -v grep || echo "no engine process left"
