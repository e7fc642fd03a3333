#!/bin/bash
# Source ON the H200 after scripts/h200-install.sh: joins SmolLM2's GGUF pieces (/tmp/mg0..4, from
# scripts/gguf-parts.sh), checks their sha256 and converts them once to /tmp/smollm2 (bf16
# safetensors, SmolLM2's own tokenizer and chat template).   usage: source scripts/h200-smollm2.sh
for i in 0 1 2 3 4; do [ -d ".gpu/mg/$i" ] && mkdir -p "/tmp/mg$i" && cp ".gpu/mg/$i"/* "/tmp/mg$i/"; done
if [ ! -f /tmp/smollm2/model.safetensors ]; then
  mkdir -p /tmp/gguf && cat /tmp/mg0/smollm2.gguf.0 /tmp/mg1/smollm2.gguf.1 /tmp/mg2/smollm2.gguf.2 /tmp/mg3/smollm2.gguf.3 /tmp/mg4/smollm2.gguf.4 > /tmp/gguf/smollm2.gguf || return 1
  (cd /tmp/gguf && sha256sum -c /tmp/mg0/SHA256SUMS) || return 1
  mkdir -p /tmp/kit && tar xJf /tmp/ge/model-kit.tar.xz -C /tmp/kit 2>/dev/null || tar xJf /tmp/sg/model-kit.tar.xz -C /tmp/kit
  python3 scripts/smollm2_to_hf.py /tmp/gguf/smollm2.gguf /tmp/kit/tokenizer /tmp/smollm2 || return 1
fi
