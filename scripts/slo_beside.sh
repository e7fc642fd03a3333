#!/usr/bin/env bash
# The two real-server SLO tests, ROUNDS times each, pinned to core 1 (their servers and load client
# inherit it), while single-core tests start and stop llama-servers on core 0 without pause: what
# `quiet(one_core=True)` puts beside them in the suite. One line per run: passed or failed.
#   scripts/slo_beside.sh ROUNDS LOGDIR [--unpinned]
# --unpinned: the SLO tests free on both cores (their servers and client too), the neighbours still
# on core 0: the arrangement of ci32, before a one_core quiet test was pinned (the control).
set -uo pipefail
rounds=$1 logs=$2
pin=(taskset -c 1)
[ "${3:-}" = --unpinned ] && pin=()
mkdir -p "$logs"
cd "$(git rev-parse --show-toplevel)"
py=.venv/bin/python
neighbours=(tests/probes/test_recall.py tests/probes/test_served.py tests/probes/test_load.py tests/test_server.py tests/test_trial.py)
stop="$logs/stop"
rm -f "$stop"
(
    while [ ! -e "$stop" ]; do
        taskset -c 0 "$py" -m pytest -q -n 0 -p no:cacheprovider -m integration "${neighbours[@]}" >>"$logs/neighbour.log" 2>&1
    done
) &
# the neighbours end at the end of their current run (each test ends its own servers): never killed mid-test
trap 'touch "$stop"; wait' EXIT
for ((round = 0; round < rounds; round++)); do
    for test in test_the_answer_holds_the_slo_and_one_more_client_breaks_it_on_a_real_llama_server test_the_open_loop_answer_on_a_real_llama_server; do
        log="$logs/round$round-$test.log"
        "${pin[@]}" "$py" -m pytest -q -n 0 -p no:cacheprovider "tests/probes/test_slo.py::$test" >"$log" 2>&1
        echo "round $round $test: $(tail -1 "$log")"
    done
done
