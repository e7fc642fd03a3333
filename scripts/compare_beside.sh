#!/usr/bin/env bash
# `tune compare --repeats 2` of a real study against its own copy (what
# tests/test_compare.py::test_a_study_compared_with_its_own_copy_ties runs), ROUNDS times in each of
# two arrangements, interleaved round by round, with a neighbour beside it:
#   shared: the neighbour on core 0, where the study's stored space puts the compare's servers,
#           the compare process itself unpinned (the arrangement CI failed in at stop 36: three
#           workers on two cores, two of them pinning their servers to core 0, and every test of
#           the real study's configs there too);
#   own:    the compare process pinned to core 0 (its servers and load client there), the
#           neighbour on core 1 (what `quiet(core=0)` arranges in the suite).
# Neighbours (NEIGHBOUR):
#   tests:  single-core integration tests starting and stopping llama-servers without pause;
#   bursts: a busy loop that works and rests for random spells of 1-8 s (seeded): a neighbour
#           that comes and goes within one compare, as the suite's tests do.
# One line per run: the arrangement and the verdict.
#   scripts/compare_beside.sh ROUNDS LOGDIR STUDY_FOLDER [tests|bursts]
# STUDY_FOLDER: a built real study (the real_study fixture's folder, e.g. after
#   pytest --basetemp=B tests/test_compare.py: B/real-study-built/real).
set -uo pipefail
rounds=$1 logs=$(realpath -m "$2") study=$(realpath "$3") neighbour=${4:-tests}
mkdir -p "$logs"
cd "$(git rev-parse --show-toplevel)"
py=$PWD/.venv/bin/python
tests=(tests/probes/test_recall.py tests/probes/test_served.py tests/probes/test_load.py tests/test_server.py tests/test_trial.py)
stop="$logs/stop" want="$logs/want"
rm -f "$stop" "$logs"/busy*
echo none >"$want"
for core in 0 1; do
    (
        RANDOM=$((7 + core))
        while [ ! -e "$stop" ]; do
            if [ "$(cat "$want")" != "$core" ]; then
                sleep 0.5
            elif [ "$neighbour" = tests ]; then
                touch "$logs/busy$core"
                taskset -c "$core" "$py" -m pytest -q -n 0 -p no:cacheprovider -m integration "${tests[@]}" >>"$logs/neighbour$core.log" 2>&1
                rm -f "$logs/busy$core"
            else
                work=$((1 + RANDOM % 8)) rest=$((1 + RANDOM % 8))
                echo "$(date +%s.%N) busy $work s, then idle $rest s" >>"$logs/neighbour$core.log"
                touch "$logs/busy$core"
                taskset -c "$core" timeout "$work" sh -c 'while :; do :; done'
                rm -f "$logs/busy$core"
                sleep "$rest"
            fi
        done
    ) &
done
# the neighbours end at the end of their current run (each test ends its own servers): never killed mid-test
trap 'touch "$stop"; wait' EXIT
for ((round = 0; round < rounds; round++)); do
    for arrangement in shared own; do
        if [ "$arrangement" = shared ]; then core=0 other=1 pin=(); else core=1 other=0 pin=(taskset -c 0); fi
        echo "$core" >"$want"
        while [ -e "$logs/busy$other" ]; do sleep 0.5; done # the other core's neighbour has ended its run
        sleep 5                                               # and this one's has started
        work=$(mktemp -d)
        cp "$study/study.db" "$work/a.db"
        cp "$study/study.db" "$work/b.db"
        log="$logs/round$round-$arrangement.log"
        (cd "$work" && "${pin[@]}" "$py" -m tuner compare --study "a=sqlite:///$work/a.db" --study "b=sqlite:///$work/b.db" --repeats 2) >"$log" 2>&1
        echo "round $round $arrangement: $(grep -E "picks tie|pick beats" "$log" || tail -1 "$log")"
        rm -rf "$work"
    done
done
