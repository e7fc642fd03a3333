#!/bin/bash
# Runs ON the H200 (the `device` tool, nvidia-h200): issue 25's proof. After the parts are in /tmp
# (back-to-back calls: scripts/h200-grid.sh's header; this call carries .gpu/mg/3 and .gpu/mg/4):
#   PHASE=tune  bash scripts/h200-goodput.sh   # the goodput tune (search_spaces/h200-vllm-goodput.yaml);
#                                              # rerun to go on (the study stays in runs/ while the machine is warm)
#   PHASE=bench bash scripts/h200-goodput.sh   # the pick on a fresh server under `vllm bench serve` at N and 1.25 N,
#                                              # the N clients shared by SPLIT (4) bench processes
#   STUDY=h200-vllm-goodput-rate PHASE=tune|bench  # the open-loop answer (search_spaces/h200-vllm-goodput-rate.yaml),
#                                              # benched with --request-rate R and 1.15 R, SECONDS_PER_RUN (60) s each
#                                              # (ABOVE_SECONDS: the 1.15 R run's, where a break shows early),
#                                              # split over SPLIT (4) vllm bench processes at R/SPLIT each, merged;
#                                              # ONLY=answer|above: that level alone on its own server (5 minutes each
#                                              # need two commands: SECONDS_PER_RUN=300 ONLY=answer, then ONLY=above)
#   PHASE=confirm CONFIRM=7m STEPS=3           # the pick at its SLO answer for CONFIRM on a fresh server (tune validate --confirm),
#                                              # stepping down 10 % (at most STEPS times) where it breaks;
#                                              # the runs it finished are stored also when `timeout` cuts it, and
#   PHASE=confirm RESUME=1 STEPS=0             # goes on one step below the stored runs' last (the next command)
#   STUDY=h200-sglang-goodput-rate ...         # SGLang (issue 45): a study named *sglang* installs the SGLang parts (/tmp/sg)
#   TRIAL_TIMEOUT=450s                         # tune: the space's budget.trial_timeout cut (a copy in /tmp), so that a short DEADLINE keeps the trial
#   EXECUTOR=inline                            # tune: no Ray (the default where Ray does not import: deps built with NO_RAY=1)
#   DB=path/study.db                           # any phase: start from this committed study when runs/ has none
#                                              # (default docs/data/goodput/$STUDY.db)
#   TRIM_BELOW=R                               # with DB: its confirmation's runs at R and under dropped (scripts/confirm_trim.py),
#                                              # so that PHASE=confirm RESUME=1 runs R's step again
#   FORCE=1                                    # bench: the search's answer also where its confirmation broke and no step held
#   AT=R                                       # bench: at R (and 1.15 R) instead of the study's answer, beside its confirmation run at R
#   DRAIN=120                                  # bench, open loop: a run still going this many s after its arrivals is ended and
#                                              # called behind them; DEADLINE >= start (~90 s) + arrivals + DRAIN + 40
#   PHASE=ab RATE=R AB_SECONDS=60 REPEATS=2    # the tool's open loop at R from senders planned for 1 client core and for
#                                              # all of them, interleaved, on one server (benchmarks/open_loop_ab.py)
#   PHASE=ab RATE=R AB='{}' AB2='{"min_tokens": 128}'   # ... with these two request bodies instead of the two plans
# Everything lands in $OUT: the tune's log and study, the bench results (benchmarks/goodput_crosscheck.py).
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"; study=${STUDY:-h200-vllm-goodput}
engine=vllm; case "$study" in *sglang*) engine=sglang ;; esac
exec > >(tee -a "$out/$study-${PHASE:-tune}.log") 2>&1
t0=$(date +%s)
source scripts/h200-install.sh "$engine" || exit 1
source scripts/h200-smollm2.sh || exit 1
echo "ready after $(( $(date +%s) - t0 ))s"
db=${DB:-docs/data/goodput/$study.db}   # a committed study to go on from, where runs/ has none
if [ ! -f "runs/$study/study.db" ] && [ -f "$db" ]; then
  mkdir -p "runs/$study"
  if [ -n "${TRIM_BELOW:-}" ]; then python3 scripts/confirm_trim.py "$db" "runs/$study/study.db" --study "$study" --below "$TRIM_BELOW" || exit 1
  else cp "$db" "runs/$study/study.db"; fi
fi
if [ "${PHASE:-tune}" = tune ]; then
  python3 -c "import ray" 2>/dev/null || EXECUTOR=${EXECUTOR:-inline}   # deps built with NO_RAY=1: no Ray to start
  hard=$(( ${DEADLINE:-570} - ($(date +%s) - t0) - 25 ))
  space="search_spaces/$study.yaml"
  if [ -n "${TRIAL_TIMEOUT:-}" ]; then   # a shorter trial (its probes' clock) where the device time left is short
    sed "s/^  trial_timeout: .*/  trial_timeout: $TRIAL_TIMEOUT/" "$space" > "/tmp/$study.yaml" && space="/tmp/$study.yaml"
    grep -n "trial_timeout" "$space"
  fi
  timeout --foreground -s TERM -k 30 "$hard" python3 -m tuner run --space "$space" --no-remeasure \
    --study "$study" --timeout "$(( hard - 70 ))s" ${EXECUTOR:+--executor "$EXECUTOR"}
  echo "tune exit $? after $(( $(date +%s) - t0 ))s"
  python3 -m tuner trials --study "$study" --format csv --out "$out/$study-trials.csv"
  python3 -m tuner limits --study "$study" --trial "$(STUDY=$study python3 - <<'PY'
import os
from tuner.app.read import open_existing
from tuner.results.pick import pick
print(pick(open_existing(os.environ["STUDY"], None), "knee").number)
PY
)" || true
elif [ "$PHASE" = ab ]; then
  timeout --foreground -s TERM -k 20 "$(( ${DEADLINE:-570} - ($(date +%s) - t0) - 20 ))" \
    python3 benchmarks/open_loop_ab.py --study "$study" --out "$out/ab" ${RATE:+--rate "$RATE"} \
    --seconds "${AB_SECONDS:-60}" --repeats "${REPEATS:-2}" ${AB:+--request "$AB"} ${AB2:+--request "$AB2"}
  echo "ab exit $? after $(( $(date +%s) - t0 ))s"
elif [ "$PHASE" = confirm ]; then
  left=$(( ${DEADLINE:-570} - ($(date +%s) - t0) - 20 ))  # --timeout: a run that cannot end in it is refused, not cut
  timeout --foreground -s TERM -k 20 "$left" python3 -m tuner validate --study "$study" --confirm --seconds "${CONFIRM:-7m}" \
    --steps "${STEPS:-3}" ${RESUME:+--resume} --timeout "$(( left - 5 ))s"
  echo "confirm exit $? after $(( $(date +%s) - t0 ))s"
  python3 -m tuner status --study "$study" > "$out/$study-status.txt" 2>&1
  python3 -m tuner export --study "$study" --format json > "$out/$study-export.json" 2> "$out/$study-export.err"
else
  timeout --foreground -s TERM -k 20 "$(( ${DEADLINE:-570} - ($(date +%s) - t0) - 20 ))" \
    python3 benchmarks/goodput_crosscheck.py --study "$study" --out "$out/$study-bench${ONLY:+-$ONLY}" \
    --prompts-per-client "${PROMPTS:-20}" --seconds "${SECONDS_PER_RUN:-60}" --split "${SPLIT:-4}" \
    ${ABOVE_SECONDS:+--above-seconds "$ABOVE_SECONDS"} ${ONLY:+--only "$ONLY"} ${FORCE:+--force} ${AT:+--at "$AT"} \
    ${DRAIN:+--drain "$DRAIN"}
  echo "crosscheck exit $? after $(( $(date +%s) - t0 ))s"
  # $OUT brings back 8 files: the parts' summaries (without their per-request arrays, 12 MB a part) in one
  # file, everything else of the bench in one archive, instead of a file per part that did not all come back
  bench="$out/$study-bench${ONLY:+-$ONLY}"
  python3 scripts/bench_parts.py "$bench" > "$bench-parts.jsonl"
  tar czf "$bench.tgz" --exclude='bench-*.json' -C "$out" "$(basename "$bench")" && rm -rf "$bench"
fi
tar czf "$out/runs-$study.tgz" --exclude=servers -C runs "$study"
nvidia-smi --query-gpu=index,memory.used --format=csv; ps -eo pid,pgid,cmd | grep -E "vllm|EngineCore|sglang" | grep -v grep || echo "no engine process left"
