#!/bin/bash
# Runs ON the H200 device machine (the `device` tool) in a copy of this repo, after earlier calls
# copied the engine's bundle parts (vLLM: /tmp/ge, SGLang: /tmp/sg) and the tuner's dependency
# parts (/tmp/gd0, /tmp/gd1) there. Proves issue 11 where it fails, with a real engine:
#  run 1: `tune run` is SIGKILLed mid-probe, then the API server leader too: its engine children
#         (vLLM EngineCore, SGLang scheduler) live on with the GPU memory;
#  run 2: the rerun must stop every process of run 1 and find the GPU back at its baseline before
#         its first trial; its first trial is a memory fraction too small for the weights (a start
#         failure whose words we check also as if no signature knew them); its second is the
#         re-queued good config, whose engine child is SIGKILLed mid-probe: PRUNED crashed_under_load.
# usage: scripts/h200-reliability.sh vllm|sglang        (logs and the study go to $OUT)
set -uo pipefail
engine=${1:?vllm or sglang}
out=${OUT:-/tmp/out}; mkdir -p "$out"
exec > >(tee -a "$out/rel-$engine.log") 2>&1
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
source scripts/h200-install.sh "$engine" || exit 1
stamp "installed"
python3 -c 'import pynvml' 2>/dev/null && echo "pynvml: yes" || echo "pynvml: no (hygiene reads nvidia-smi)"
study=rel-$engine; runs=$PWD/runs/$study; space=/tmp/rel-$engine.yaml
python3 scripts/reliability_space.py "$engine" > "$space" || exit 1
smi() { nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed 's/^/  GPU 0 used: /'; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | sed 's/^/  holder: /'; }
session() { ps -eo pid,ppid,pgid,sid,rss,etime,args --no-headers | awk -v s="$1" '$4 == s' | cut -c1-160; }
requests() { local n; n=$(grep -c 'POST /v1/completions' "$1" 2>/dev/null); echo "${n:-0}"; }
leader_of() { python3 - "$runs/servers" "$1" <<'PY'
import json, pathlib, sys
for p in pathlib.Path(sys.argv[1]).glob("*.json"):
    e = json.loads(p.read_text())
    if e["trial_dir"].endswith("/trials/" + sys.argv[2]):
        print(e["pid"])
PY
}
wait_probing() {  # trial number -> its server's leader pid, once the load probe is well under way
  for _ in $(seq 600); do
    n=$(requests "$runs/trials/$1/server.log"); [ "$n" -ge 40 ] && { leader_of "$1"; return 0; }; sleep 0.5
  done; return 1
}
stamp "baseline"; smi

stamp "run 1"
python3 -m tuner run --space "$space" --study "$study" --no-remeasure -v > "$out/run1-$engine.log" 2>&1 &
tuner=$!
leader=$(wait_probing 0) || { stamp "trial 0 never probed"; tail -30 "$out/run1-$engine.log"; tail -30 "$runs/trials/0/server.log"; kill -9 $tuner; exit 1; }
stamp "trial 0 probing (server leader $leader): kill -9 the tuner (pid $tuner), then the API server"
kill -9 "$tuner"; sleep 2; kill -9 "$leader"; sleep 8
echo "  processes of the server's session $leader after both kills:"; session "$leader"
left1=$(session "$leader" | wc -l); stamp "left after the kills: $left1 process(es) of the server; GPU:"; smi

stamp "run 2 (rerun)"
python3 -m tuner run --space "$space" --study "$study" --no-remeasure -v > "$out/run2-$engine.log" 2>&1 &
rerun=$!
( for _ in $(seq 900); do  # the re-queued good config: the trial after 0 that probes
    for t in $(ls "$runs/trials" 2>/dev/null | sort -n); do
      [ "$t" -gt 0 ] && [ "$(requests "$runs/trials/$t/server.log")" -ge 40 ] && {
        l=$(leader_of "$t"); child=$(ps -eo pid,sid,rss --no-headers | awk -v s="$l" '$2 == s && $1 != s' | sort -k3 -n | tail -1 | awk '{print $1}')
        echo "[killer] trial $t probing: kill -9 engine child $child of leader $l"; ps -o pid,args -p "$child" | cut -c1-120; kill -9 "$child"; exit 0; }
    done; sleep 0.5
  done ) &
killer=$!
sleep 1; stamp "GPU right after the rerun's recovery:"; smi
wait $rerun; rc=$?; kill $killer 2>/dev/null
stamp "rerun exit $rc"; tail -25 "$out/run2-$engine.log"
left2=$(session "$leader" | wc -l); stamp "processes of run 1's server left after the rerun: $left2"; session "$leader"
stamp "GPU after the rerun:"; smi
python3 scripts/reliability_report.py "$runs" "$engine" | tee "$out/report-$engine.txt"
tar czf "$out/runs-rel-$engine.tgz" --exclude=servers -C "$PWD/runs" "$study"
stamp "done"
