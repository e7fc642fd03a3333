#!/bin/bash
# ON the device, one call per carry (the 64-MiB carry holds the working tree, 26 MiB on 2026-12-07,
# and one ~23-MB half part or one 19-MB .gpu/mg part: one file a call, 11 calls, then the install with
# .gpu/sg/h3b and .gpu/sg/p4; with scripts/device-slim.sh on, 6 MiB of tree and two halves or three
# .gpu/mg parts a call): copies whatever parts this call carried into /tmp, where the install call
# finds them (/tmp stays while the machine is warm). The halves come from scripts/device-halves.sh.
#   bash scripts/device-stash.sh            # after each carry; JOIN=1 on the last: joins the halves
# vLLM (shared/gpu/build-vllm-bundle.sh .gpu/ge, then scripts/device-halves.sh vllm): .gpu/vl/k (the
# install script, sums, model kit: 0.5 MB) and six ~22-MB halves .gpu/vl/h{0,1,2}{a,b}, one a carry
# (the sixth with .gpu/deps/d0); JOIN_VLLM=1 on the last puts the three parts together in /tmp/ge,
# where `source scripts/h200-install.sh vllm` finds them.
set -u
mkdir -p /tmp/h /tmp/sg /tmp/vh /tmp/ge
for d in .gpu/vl/h*; do [ -f "$d/x" ] && cp "$d/x" "/tmp/vh/$(basename "$d")"; done
[ -d .gpu/vl/k ] && cp .gpu/vl/k/* /tmp/ge/
for d in .gpu/sg/h*; do [ -f "$d/x" ] && cp "$d/x" "/tmp/h/$(basename "$d")"; done
for f in .gpu/sg/p0/model-kit.tar.xz .gpu/sg/p0/SHA256SUMS .gpu/sg/p4/sglang0517.tar.xz.part04; do
  [ -f "$f" ] && cp "$f" /tmp/sg/
done
for i in 0 1 2 3 4; do [ -d ".gpu/mg/$i" ] && mkdir -p "/tmp/mg$i" && cp ".gpu/mg/$i"/* "/tmp/mg$i/"; done
[ -d .gpu/deps/d0 ] && mkdir -p /tmp/gd0 && cp .gpu/deps/d0/* /tmp/gd0/
if [ -n "${JOIN:-}" ]; then
  for i in 0 1 2 3; do cat "/tmp/h/h${i}a" "/tmp/h/h${i}b" > "/tmp/sg/sglang0517.tar.xz.part0$i" || exit 1; done
  (cd /tmp/sg && grep part SHA256SUMS | sha256sum -c --quiet) || exit 1
fi
if [ -n "${JOIN_VLLM:-}" ]; then
  for i in 0 1 2; do cat "/tmp/vh/h${i}a" "/tmp/vh/h${i}b" > "/tmp/ge/vllm026.tar.xz.part$i" || exit 1; done
  (cd /tmp/ge && sha256sum -c --quiet PARTS.SHA256) || exit 1
fi
ls /tmp/h /tmp/sg /tmp/vh /tmp/ge /tmp | tr '\n' ' '; echo
