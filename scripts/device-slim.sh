#!/bin/bash
# HERE, around the back-to-back `device` calls that carry engine parts: keeps the committed data that
# the device never reads (docs/data/goodput/, the fronts page, tests/fixtures/gpu/: 20 of the 26 MiB
# that travelled on 2026-12-07) out of what travels with every call, so that one call carries two
# ~21-MiB vLLM halves or three 19-MiB GGUF pieces (64 MiB a call, working tree included): 5 carry
# calls instead of 11, each one of them held device time.
#   bash scripts/device-slim.sh on [KEEP...]   # KEEP: files under those folders that the device reads
#                                              # (the study.db a phase resumes from: DB=...)
#   bash scripts/device-slim.sh off            # after the last call: the index and .git/info/exclude as they were
#   bash scripts/device-slim.sh                # the MiB that travel now
# While on, the files stay on disk, out of git's index and ignored: a commit then would delete them,
# so `on` refuses while anything is staged and installs a pre-commit hook that refuses until `off`.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
paths=(docs/data/goodput docs/h200-smollm2-fronts.html tests/fixtures/gpu)
exclude=$(git rev-parse --git-path info/exclude) hook=$(git rev-parse --git-path hooks/pre-commit) mark='# device-slim'
travels() {
  git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {printf "%.1f MiB travel\n", s / 1048576}'
}
case "${1:-}" in
  on)
    shift
    grep -qx "$mark" "$exclude" 2>/dev/null && { echo "device-slim: already on ($exclude)" >&2; exit 1; }
    git diff --cached --quiet || { echo "device-slim: something is staged; commit or unstage it first" >&2; exit 1; }
    [ -e "$hook" ] && { echo "device-slim: $hook exists; it would be replaced" >&2; exit 1; }
    mkdir -p "$(dirname "$exclude")" "$(dirname "$hook")"
    { echo "$mark"; for p in "${paths[@]}"; do echo "/$p"; done; echo "$mark end"; } >> "$exclude"
    printf '#!/bin/sh\n%s\necho "scripts/device-slim.sh is on: run it with off before committing" >&2\nexit 1\n' "$mark" > "$hook"
    chmod +x "$hook"
    git rm -r -q --cached "${paths[@]}"
    for k in "$@"; do git add -f "$k"; done  # back in the index as committed: KEEP travels
    ;;
  off)
    if [ -f "$exclude" ]; then sed -i "/^$mark\$/,/^$mark end\$/d" "$exclude"; fi
    if [ -f "$hook" ] && grep -qx "$mark" "$hook"; then rm "$hook"; fi
    git reset -q
    ;;
  '') ;;
  *) echo "usage: bash scripts/device-slim.sh [on [KEEP...] | off]" >&2; exit 2 ;;
esac
travels
