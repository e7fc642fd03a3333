#!/usr/bin/env bash
# `.ci/run` on fresh clones of one tree, one run after another, each beside a busy loop pinned to
# core 1 ("hog") or on the idle machine ("idle"), as issue 47 asks; then README's first command
# (scripts/readme-run.sh) the same way ("readme-idle", "readme-hog"). Appends each run's result,
# times and leftovers to LOG; keeps each run's whole output under DIR.
#   tmux new-session -d -s series "bash scripts/ci-series.sh 9f56d93 /tmp/series hog hog hog idle idle idle readme-idle readme-hog"
set -uo pipefail
commit=${1:?commit}; dir=${2:?output folder}; shift 2
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
mkdir -p "$dir"; log=$dir/series.txt
hog() { taskset -c 1 sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $!; }
n=0
for kind in "$@"; do
  n=$((n + 1)); name=$n-$kind; clone=/tmp/ci-series-$n
  rm -rf "$clone"; git clone -q "$repo" "$clone" && git -C "$clone" checkout -q "$commit" || exit 1
  loop=; case "$kind" in *hog) loop=$(hog) ;; esac
  start=$(date +%s); echo "$name start $(date -u +%FT%TZ) tree $(git -C "$clone" rev-parse --short HEAD) loop ${loop:-none}" >> "$log"
  case "$kind" in
    readme-*) (cd "$clone" && bash scripts/readme-run.sh "$dir/$name-trials.csv") > "$dir/$name.txt" 2>&1 ;;
    *) (cd "$clone" && bash .ci/run) > "$dir/$name.txt" 2>&1 ;;
  esac
  rc=$?; end=$(date +%s)
  [ -n "$loop" ] && kill "$loop"
  { echo "$name rc $rc whole $((end - start)) s"
    grep -E '^=+ .*(passed|failed).* in ' "$dir/$name.txt" | tail -1
    grep -E '^(FAILED|ERROR) ' "$dir/$name.txt"
    grep -E '^(end|llama-server built|installed|warning)' "$dir/$name.txt"
    ps -eo pid,pgid,etimes,cmd | grep -E "llama-server|raylet|gcs_server|postgres|ninja|cc1plus" | grep -v grep || echo "nothing left running"
  } >> "$log"
  rm -rf "$clone"
done
echo "series done $(date -u +%FT%TZ)" >> "$log"
