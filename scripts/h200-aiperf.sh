#!/bin/bash
# ON the GPU host (the `device` tool): install aiperf from the parts scripts/aiperf-parts.sh built,
# copied to /tmp/ap0, /tmp/ap1, ... by earlier back-to-back calls, into its own virtualenv, offline.
#   bash scripts/h200-aiperf.sh            # -> /tmp/aip/bin/aiperf (benchmarks/trace_crosscheck.py --aiperf)
#   env PYTHON=python3.12 VENV=/tmp/aip    the interpreter the virtualenv is made from, and where it goes
set -euo pipefail
python=${PYTHON:-python3}; venv=${VENV:-/tmp/aip}; work=${WORK:-/tmp/aiperf-wheels}
parts=$(ls /tmp/ap[0-9]*/aiperf.tar.part* 2>/dev/null | awk -F.part '{print $NF "\t" $0}' | sort -n -k1,1 | cut -f2)
[ -n "$parts" ] || { echo "h200-aiperf: no /tmp/ap*/aiperf.tar.part*: carry .gpu/aiperf/aN to /tmp/apN first" >&2; exit 1; }
want=0
for p in $parts; do  # each part once, 0..N-1 with no gap
  [ "${p##*.part}" = "$want" ] || { echo "h200-aiperf: expected part$want, found $p: a part is missing or doubled" >&2; exit 1; }
  want=$((want + 1))
done
rm -rf "$work" && mkdir -p "$work"
# shellcheck disable=SC2086
cat $parts > "$work/aiperf.tar"
sums=/tmp/ap0/SHA256SUMS
(cd "$work" && sha256sum -c "$sums" >/dev/null) || { echo "h200-aiperf: aiperf.tar does not match $sums" >&2; exit 1; }
tar xf "$work/aiperf.tar" -C "$work"
"$python" -m venv "$venv"
"$venv/bin/pip" install -q --no-index --find-links "$work/wheels" aiperf
rm -rf "$work"
echo "aiperf $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("aiperf"))') in $venv ($("$venv/bin/python" --version))"
