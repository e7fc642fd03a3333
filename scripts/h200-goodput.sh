#!/bin/bash
# Runs ON the H200 (the `device` tool, nvidia-h200): issue 25's proof. After the parts are in /tmp
# (back-to-back calls: scripts/h200-grid.sh's header; this call carries .gpu/mg/3 and .gpu/mg/4):
#   PHASE=tune  bash scripts/h200-goodput.sh   # the goodput tune (search_spaces/h200-vllm-goodput.yaml);
#                                              # rerun to go on (the study stays in runs/ while the machine is warm)
#   PHASE=bench bash scripts/h200-goodput.sh   # the pick on a fresh server under `vllm bench serve` at N and 1.25 N
# Everything lands in $OUT: the tune's log and study, the bench results (benchmarks/goodput_crosscheck.py).
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"; exec > >(tee -a "$out/goodput-${PHASE:-tune}.log") 2>&1
t0=$(date +%s)
source scripts/h200-install.sh vllm || exit 1
source scripts/h200-smollm2.sh || exit 1
echo "ready after $(( $(date +%s) - t0 ))s"
if [ "${PHASE:-tune}" = tune ]; then
  if [ ! -f runs/h200-vllm-goodput/study.db ] && [ -f docs/data/goodput/h200-vllm-goodput.db ]; then
    mkdir -p runs/h200-vllm-goodput && cp docs/data/goodput/h200-vllm-goodput.db runs/h200-vllm-goodput/study.db
  fi
  hard=$(( ${DEADLINE:-570} - ($(date +%s) - t0) - 25 ))
  timeout --foreground -s TERM -k 30 "$hard" python3 -m tuner run --space search_spaces/h200-vllm-goodput.yaml \
    --study h200-vllm-goodput --timeout "$(( hard - 70 ))s"
  echo "tune exit $? after $(( $(date +%s) - t0 ))s"
  python3 -m tuner trials --study h200-vllm-goodput --format csv --out "$out/h200-vllm-goodput-trials.csv"
  python3 -m tuner limits --study h200-vllm-goodput --trial "$(python3 - <<'PY'
from tuner.cli._common import open_existing
from tuner.pick import pick
print(pick(open_existing("h200-vllm-goodput", None), "knee").number)
PY
)" || true
else
  timeout --foreground -s TERM -k 20 "$(( ${DEADLINE:-570} - ($(date +%s) - t0) - 20 ))" \
    python3 benchmarks/goodput_crosscheck.py --study h200-vllm-goodput --out "$out/bench-${PROMPTS:-20}" --prompts-per-client "${PROMPTS:-20}"
  echo "crosscheck exit $? after $(( $(date +%s) - t0 ))s"
fi
tar czf "$out/runs-h200-vllm-goodput.tgz" --exclude=servers -C runs h200-vllm-goodput
nvidia-smi --query-gpu=index,memory.used --format=csv; ps -eo pid,pgid,cmd | grep -E "vllm|EngineCore" | grep -v grep || echo "no engine process left"
