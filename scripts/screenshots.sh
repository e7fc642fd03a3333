#!/bin/bash
# Screenshots for docs/: the HTML report and optuna-dashboard, on a study (default: the embedded
# default's, runs/cpu-llamacpp), rendered by headless Chromium.   usage: scripts/screenshots.sh [STUDY] [RUNS_DIR]
set -euo pipefail
study=${1:-cpu-llamacpp}; runs=${2:-runs}; here=$(cd "$(dirname "$0")/.." && pwd)
tune="$here/.venv/bin/tune"; dash="$here/.venv/bin/optuna-dashboard"
chrome=(chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking --hide-scrollbars)
tmp=$(mktemp -d); trap 'kill -- -"$pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT
db="$(cd "$runs" && pwd)/$study/study.db"
"$tune" report --study "$study" --storage "sqlite:///$db" --out "$tmp/report"
"${chrome[@]}" --user-data-dir="$tmp/p0" --window-size=1280,2000 --virtual-time-budget=15000 --screenshot="$here/docs/report-front.png" "file://$tmp/report.html"   # README's picture
"${chrome[@]}" --user-data-dir="$tmp/p1" --window-size=1280,5200 --virtual-time-budget=15000 --screenshot="$here/docs/report-$study.png" "file://$tmp/report.html"
port=$(( 36000 + RANDOM % 2000 ))
setsid "$dash" "sqlite:///$db" --host 127.0.0.1 --port "$port" > "$tmp/dash.log" 2>&1 &
pid=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/api/meta" >/dev/null && break; sleep 0.2; done
"${chrome[@]}" --user-data-dir="$tmp/p2" --window-size=1600,1000 --virtual-time-budget=15000 --screenshot="$here/docs/dashboard-$study.png" "http://127.0.0.1:$port/dashboard/studies/1"
"${chrome[@]}" --user-data-dir="$tmp/p3" --window-size=1600,1000 --virtual-time-budget=15000 --screenshot="$here/docs/dashboard-$study-trials.png" "http://127.0.0.1:$port/dashboard/studies/1/trials"
echo "wrote docs/report-$study.png docs/dashboard-$study.png docs/dashboard-$study-trials.png"
