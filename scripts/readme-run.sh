#!/usr/bin/env bash
# README's first command on a fresh clone of this checkout's HEAD, timed, with an empty TUNER_CACHE
# (llama-server is built from the sdist; pip's own cache may be warm). Prints the start, the install
# and the end with their seconds; copies the study's trials.csv to $1 when given.
#   tmux new-session -d -x 100 -y 50 "script -q -f -c 'bash scripts/readme-run.sh /tmp/r1-trials.csv' /tmp/r1.log"
set -uo pipefail
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
dir=$(mktemp -d /tmp/fresh-XXXX)
git clone -q "$repo" "$dir" && cd "$dir" || exit 1
TUNER_CACHE=$(mktemp -d /tmp/tuner-cache-XXXX)
export TUNER_CACHE
echo "start $(date -u +%FT%TZ) $(git rev-parse --short HEAD) nproc $(nproc) columns $(tput cols 2>/dev/null || echo -)"
start=$(date +%s)
python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' 2>&1 | grep -v "is ignored" || true
echo "installed after $(($(date +%s) - start))s"
.venv/bin/tune run
rc=$?
echo "end $(date -u +%FT%TZ) rc $rc after $(($(date +%s) - start))s"
built=$(stat -c %Y "$TUNER_CACHE"/llamacpp/*/llama-server 2>/dev/null || echo "$start")
echo "llama-server built $((built - start))s after the start"
[ -n "${1:-}" ] && cp runs/cpu-llamacpp/trials.csv "$1"
rm -rf "$TUNER_CACHE"
exit $rc
