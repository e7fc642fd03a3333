#!/bin/bash
# Runs ON the H200 (the `device` tool, nvidia-h200-x2), after the SGLang and dependency transfer
# calls (scripts/h200-real.sh's header): issue 14's lent-kind part in one 10-minute command.
# A compressed night of search_spaces/h200-x2-tp.yaml (tp 1 and tp 2 trials mixed, packed
# first-fit on both GPUs), then a crash: the driver is killed with SIGKILL while trials run, what it
# left behind is recorded, and a rerun of the same study must sweep it and go on. At the end:
# leftovers (processes, GPU memory) after the run, the front, the partitions over time, the
# exported systemd unit, the report (its timeline: each trial on its partition from its launch).
# Transfers (each call carries at most 64 MiB with the ~9 MB working tree): .gpu/sg/p0 .. p3 one
# per call -> /tmp/sg; .gpu/sg/p4 + .gpu/deps/d1 -> /tmp/sg, /tmp/gd1; .gpu/deps/d0 (60 MiB) in two
# halves: `head -c 31457280 part0 > d0a/half0; tail -c +31457281 part0 > d0b/half1`, d0a (with
# install-deps.sh and SHA256SUMS) -> /tmp/gd0; this call carries .gpu/deps/d0b and joins them.
#   usage: bash scripts/h200-x2-night.sh [seconds before the kill, default 200; 0: no crash, one run]
#   env STUDY (default x2-night), TRIALS (finished trials to ask for, default the space's budget)
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"; exec > >(tee -a "$out/x2-night.log") 2>&1
t0=$(date +%s); kill_after=${1:-200}; study=${STUDY:-x2-night}; space=search_spaces/h200-x2-tp.yaml
trials=(); [ -n "${TRIALS:-}" ] && trials=(--trials "$TRIALS")
if [ -f /tmp/gd0/half0 ] && [ -f .gpu/deps/d0b/half1 ]; then
  cat /tmp/gd0/half0 .gpu/deps/d0b/half1 > /tmp/gd0/tunerdeps.tar.xz.part0 && rm /tmp/gd0/half0
fi
source scripts/h200-install.sh sglang || exit 1
echo "installed after $(( $(date +%s) - t0 ))s"
ls /proc | grep -E '^[0-9]+$' > /tmp/baseline-pids   # every process that lives before the run
leftovers() {  # what the GPUs hold and every process started since the baseline, in words
  echo "--- leftovers ($1) at $(( $(date +%s) - t0 ))s"
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
  # by pid, not by name: SGLang's scheduler processes are multiprocessing spawns whose command
  # line has no "sglang" in it (the crash run's name pattern missed two that the ledger stopped)
  python3 - /tmp/baseline-pids "$$" <<'PY'
import os, sys
base = set(open(sys.argv[1]).read().split()) | {str(os.getpid()), str(os.getppid()), sys.argv[2]}
found = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{pid}/stat").read().rsplit(") ", 1)[1].split()
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        continue
    if pid not in base and stat[0] != "Z" and cmd and not cmd.startswith(("nvidia-smi", "sleep", "tee")):
        found.append(f"{pid} pgid {stat[2]} ppid {stat[1]} {stat[0]} {cmd[:160]}")
print("\n".join(found) or "no process started since the baseline is alive")
PY
}
if [ "$kill_after" -gt 0 ]; then
  python3 -m tuner run --space "$space" --study "$study" "${trials[@]}" --no-remeasure --timeout 480s > "$out/$study-run1.log" 2>&1 &
  driver=$!
  sleep "$kill_after"
  echo "--- kill -9 of the driver (pid $driver) at $(( $(date +%s) - t0 ))s, as a crash would"
  tail -5 "$out/$study-run1.log"
  kill -9 "$driver"; wait "$driver" 2>/dev/null
  sleep 3; leftovers "after kill -9, before the rerun"
fi
# --timeout stops launching; the hard stop (SIGTERM to `tune` alone) leaves time for the tail below
hard=$(( 560 - ($(date +%s) - t0) )); launch=$(( hard - (kill_after > 0 ? 200 : 110) ))
timeout --foreground -s TERM -k 30 "$hard" python3 -m tuner run --space "$space" --study "$study" "${trials[@]}" --no-remeasure --timeout ${launch}s
echo "run exit $? after $(( $(date +%s) - t0 ))s"
leftovers "after the run"
tar czf "$out/runs-$study.tgz" -C runs "$study"
python3 -m tuner status --study "$study" | tail -25
python3 -m tuner trials --study "$study" --out "$out/$study-trials.csv"
python3 -m tuner report --study "$study" --out "$out/$study-report" > /dev/null 2>&1 || echo "report failed"
python3 -m tuner export --study "$study" --format systemd > "$out/$study.service" 2> "$out/$study-export.err"; cat "$out/$study.service" "$out/$study-export.err"
