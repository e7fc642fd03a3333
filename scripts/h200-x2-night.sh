#!/bin/bash
# Runs ON the H200 (the `device` tool, nvidia-h200-x2), after the SGLang and dependency transfer
# calls (scripts/h200-real.sh's header): issue 14's lent-kind part in one 10-minute command.
# A compressed night of search_spaces/h200-x2-tp.yaml (tp 1 and tp 2 trials mixed, packed
# first-fit on both GPUs), then a crash: the driver is killed with SIGKILL while trials run, what it
# left behind is recorded, and a rerun of the same study must sweep it and go on. At the end:
# leftovers (processes, GPU memory) after the run, the front, the partitions over time, the
# exported systemd unit.      usage: bash scripts/h200-x2-night.sh [seconds before the kill, default 200]
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"; exec > >(tee -a "$out/x2-night.log") 2>&1
t0=$(date +%s); kill_after=${1:-200}; study=x2-night; space=search_spaces/h200-x2-tp.yaml
source scripts/h200-install.sh sglang || exit 1
echo "installed after $(( $(date +%s) - t0 ))s"
leftovers() {  # what the GPUs hold and which engine processes live, in words
  echo "--- leftovers ($1) at $(( $(date +%s) - t0 ))s"
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
  ps -eo pid,pgid,ppid,stat,args | grep -E "sglang|tuner run|raylet|gcs_server|ray::" | grep -v -E "grep|defunct" || echo "no engine, tune or Ray process"
}
python3 -m tuner run --space "$space" --study "$study" --timeout 480s > "$out/x2-night-run1.log" 2>&1 &
driver=$!
sleep "$kill_after"
echo "--- kill -9 of the driver (pid $driver) at $(( $(date +%s) - t0 ))s, as a crash would"
tail -5 "$out/x2-night-run1.log"
kill -9 "$driver"; wait "$driver" 2>/dev/null
sleep 3; leftovers "after kill -9, before the rerun"
hard=$(( 560 - ($(date +%s) - t0) ))
timeout --foreground -s TERM -k 30 "$hard" python3 -m tuner run --space "$space" --study "$study" --timeout $(( hard - 200 ))s
echo "rerun exit $? after $(( $(date +%s) - t0 ))s"
leftovers "after the rerun"
tar czf "$out/runs-$study.tgz" -C runs "$study"
python3 -m tuner status --study "$study" | tail -25
python3 -m tuner trials --study "$study" --out "$out/$study-trials.csv"
python3 -m tuner export --study "$study" --format systemd 2>&1 | tail -40
