#!/bin/bash
# Here (not on the GPU host, which is offline): aiperf 0.13.0 and every wheel it needs, for the
# host's CPython 3.12 on manylinux x86_64, packed into parts of at most 45 MiB (with the ~11 MiB working tree, under one call's 64 MiB) (.gpu/aiperf/a0, a1, ...),
# one `device` call each, as the tuner's own dependencies travel (scripts/gpu-parts.sh). On the host,
# after the parts are in /tmp/ap0, /tmp/ap1, ... (back-to-back calls: `mkdir -p /tmp/apN && cp .gpu/aiperf/aN/* /tmp/apN/`):
#   bash scripts/h200-aiperf.sh      # -> /tmp/aip/bin/aiperf, in its own virtualenv (its pins are not ours)
# usage: bash scripts/aiperf-parts.sh [OUT=.gpu/aiperf]    (needs PyPI; about 230 MB of wheels)
set -euo pipefail
out=${1:-.gpu/aiperf}
version=${AIPERF_VERSION:-0.13.0}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
plat="--only-binary=:all: --python-version 3.12 --implementation cp"
for n in 17 27 28 31 34 35; do plat="$plat --platform manylinux_2_${n}_x86_64"; done
plat="$plat --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
python3 -m pip download -q $plat -d "$work/wheels" "aiperf==$version"
# wheels are zip files already: a plain tar, split; the checksum is the whole archive's
tar cf "$work/aiperf.tar" -C "$work" wheels
(cd "$work" && sha256sum aiperf.tar > SHA256SUMS && split -b 45M -d -a 1 aiperf.tar aiperf.tar.part)
rm -rf "$out"
i=0
for p in "$work"/aiperf.tar.part*; do
  mkdir -p "$out/a$i"; mv "$p" "$out/a$i/"; cp "$work/SHA256SUMS" "$out/a$i/"; i=$((i + 1))
done
echo "aiperf $version: $(ls "$work/wheels" | wc -l) wheels in $i parts"
du -sh "$out"/a*
