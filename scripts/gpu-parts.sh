#!/bin/bash
# Here (not on the GPU host): build what the vLLM H200 runs carry, in the .gpu/ layout that
# scripts/h200-real.sh and scripts/h200-install.sh expect (each folder small enough for one
# `device` call next to the 9 MB working tree):
#   .gpu/v0 .gpu/v1 .gpu/v2   vLLM 0.26 bundle parts (+ SHA256SUMS, model kit, installer in v0) -> /tmp/ge
#   .gpu/deps/d0 d1 d2        the tuner's own dependencies (cp312 wheels), ~31 MiB each          -> /tmp/gd0, /tmp/gd1, /tmp/gd2
#   .gpu/mg/0..4              SmolLM2's GGUF in five pieces (scripts/gguf-parts.sh)                 -> /tmp/mg0..4
#   NO_RAY=1: the deps without Ray, in one part (.gpu/deps/d0): a single-GPU command run with --executor inline
#   ENGINE=sglang: .gpu/sg/p0..p4 instead of .gpu/v*: the SGLang 0.5.17 bundle (scripts/build-sglang-parts.sh) -> /tmp/sg
# usage: [ENGINE=vllm|sglang] bash scripts/gpu-parts.sh [SHARED=../shared]   (about 5 minutes on 2 cores; SGLang's JIT
# kernels 4 more; needs PyPI)
set -euo pipefail
shared=${1:-../shared}
if [ "${ENGINE:-vllm}" = sglang ]; then
  bash scripts/build-sglang-parts.sh "$shared/gpu"
else
  rm -rf .gpu/v .gpu/v0 .gpu/v1 .gpu/v2
  bash "$shared/gpu/build-vllm-bundle.sh" .gpu/v
  for p in 0 1 2; do mkdir -p ".gpu/v$p" && mv ".gpu/v/vllm026.tar.xz.part$p" ".gpu/v$p/"; done
  mv .gpu/v/* .gpu/v0/ && rmdir .gpu/v
fi
rm -rf .gpu/deps
bash "$shared/gpu/deps/build-deps.sh" .gpu/deps
# its 60 MiB parts plus the ~11 MiB working tree exceed one call's 64 MiB: three parts instead
work=$(mktemp -d); cat .gpu/deps/d*/tunerdeps.tar.xz.part* > "$work/tunerdeps.tar.xz"
cp .gpu/deps/d0/install-deps.sh .gpu/deps/d0/SHA256SUMS "$work/"; (cd "$work" && sha256sum -c SHA256SUMS)
rm -rf .gpu/deps/d*; (cd "$work" && split -n 3 -d -a 1 tunerdeps.tar.xz tunerdeps.tar.xz.part)
for i in 0 1 2; do mkdir -p ".gpu/deps/d$i" && mv "$work/tunerdeps.tar.xz.part$i" ".gpu/deps/d$i/" && cp "$work/SHA256SUMS" ".gpu/deps/d$i/"; done
cp "$work/install-deps.sh" .gpu/deps/d0/; rm -rf "$work"
if [ "${NO_RAY:-0}" = 1 ]; then  # one device command on one GPU runs inline (--executor inline): without Ray's 79 MB the deps are one part
  work=$(mktemp -d); cat .gpu/deps/d*/tunerdeps.tar.xz.part* > "$work/all.tar.xz"; tar xJf "$work/all.tar.xz" -C "$work"
  rm -f "$work"/wheels/ray-*.whl "$work/all.tar.xz"; cp .gpu/deps/d0/install-deps.sh "$work/"; rm -rf .gpu/deps/d*
  (cd "$work" && tar cf - wheels | xz -6 -T2 > tunerdeps.tar.xz && sha256sum tunerdeps.tar.xz > SHA256SUMS && mv tunerdeps.tar.xz tunerdeps.tar.xz.part0)
  mkdir -p .gpu/deps/d0 && mv "$work"/tunerdeps.tar.xz.part0 "$work"/SHA256SUMS "$work"/install-deps.sh .gpu/deps/d0/ && rm -rf "$work"
fi
bash scripts/gguf-parts.sh
du -sh .gpu/*/ .gpu/deps/* .gpu/mg/*
