#!/bin/bash
# HERE: splits the SGLang bundle parts 0-3 (46 MB each, from scripts/gpu-parts.sh) into halves under
# .gpu/sg/h{0..3}{a,b}/x, so that one half and one more piece fit the device's 64-MiB carry beside a
# 21-MB working tree (scripts/device-stash.sh puts them back together on the device).
set -eu
cd .gpu/sg
for i in 0 1 2 3; do
  mkdir -p "h${i}a" "h${i}b"
  head -c 23068672 "p$i/sglang0517.tar.xz.part0$i" > "h${i}a/x"
  tail -c +23068673 "p$i/sglang0517.tar.xz.part0$i" > "h${i}b/x"
done
