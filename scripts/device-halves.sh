#!/bin/bash
# HERE: splits an engine bundle's parts into halves, so that one half (and at most one ~16-MB piece
# more) fits the device's 64-MiB carry beside the 27-MB working tree (scripts/device-stash.sh puts
# them back together on the device).
#   bash scripts/device-halves.sh          # SGLang: parts 0-3 (46 MB each, scripts/gpu-parts.sh) -> .gpu/sg/h{0..3}{a,b}/x
#   bash scripts/device-halves.sh vllm     # vLLM: .gpu/ge (shared/gpu/build-vllm-bundle.sh .gpu/ge, 3 x 45 MB)
#                                          #   -> .gpu/vl/h{0,1,2}{a,b}/x, and .gpu/vl/k: install script, sums, model kit
set -eu
if [ "${1:-sglang}" = vllm ]; then
  mkdir -p .gpu/vl/k
  cp .gpu/ge/install-on-host.sh .gpu/ge/SHA256SUMS .gpu/ge/model-kit.tar.xz .gpu/vl/k/
  (cd .gpu/ge && sha256sum vllm026.tar.xz.part[0-2]) > .gpu/vl/k/PARTS.SHA256
  for i in 0 1 2; do
    part=".gpu/ge/vllm026.tar.xz.part$i"
    half=$(( $(stat -c %s "$part") / 2 ))
    mkdir -p ".gpu/vl/h${i}a" ".gpu/vl/h${i}b"
    head -c "$half" "$part" > ".gpu/vl/h${i}a/x"
    tail -c +"$(( half + 1 ))" "$part" > ".gpu/vl/h${i}b/x"
  done
  exit 0
fi
cd .gpu/sg
for i in 0 1 2 3; do
  mkdir -p "h${i}a" "h${i}b"
  head -c 23068672 "p$i/sglang0517.tar.xz.part0$i" > "h${i}a/x"
  tail -c +23068673 "p$i/sglang0517.tar.xz.part0$i" > "h${i}b/x"
done
