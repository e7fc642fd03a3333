#!/usr/bin/env bash
# README's test command on fresh clones of two commits, interleaved (A B B A A B ...), as CI runs
# it (`CI=true bash .ci/run`): one line per run with the pytest summary and .ci/run's whole time.
#   scripts/suite_ab.sh OLD NEW ROUNDS LOGDIR
# A run takes ~9 minutes on 2 cores; nothing else should run meanwhile (it is the measurement).
set -euo pipefail
old=$1 new=$2 rounds=$3 logs=$4
repo=$(git rev-parse --show-toplevel)
mkdir -p "$logs"
for ((round = 0; round < rounds; round++)); do
    if ((round % 2 == 0)); then order=("$old" "$new"); else order=("$new" "$old"); fi
    for commit in "${order[@]}"; do
        clone=$(mktemp -d /tmp/suite-ab.XXXXXX)
        git clone -q "$repo" "$clone"
        git -C "$clone" checkout -q "$commit"
        log="$logs/round$round-$commit.log"
        start=$(date +%s)
        (cd "$clone" && CI=true bash .ci/run >"$log" 2>&1) || true
        whole=$(($(date +%s) - start))
        echo "round $round $commit: $(grep -E '^=+ .* in [0-9.]+s' "$log" | tail -1 | tr -d '=') ; .ci/run whole ${whole} s"
        rm -rf "$clone"
    done
done
