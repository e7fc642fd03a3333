#!/bin/bash
# HERE (no GPU): build the SGLang 0.5.17 bundle for the offline H200 into .gpu/sg/ as five
# carry-able folders .gpu/sg/p0..p4 (p0 also holds SHA256SUMS and the model kit), following
# shared/gpu/README.md: prebuilt sm_90a JIT kernels (nvcc here), then build-sglang-bundle.sh.
# usage: bash scripts/build-sglang-parts.sh [/work/shared/gpu]
set -euo pipefail
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda-13.0} LIBRARY_PATH=${LIBRARY_PATH:-/usr/local/cuda-13.0/lib:/usr/local/cuda-13.0/lib64}
G=$(readlink -f "${1:-/work/shared/gpu}"); R=$(git rev-parse --show-toplevel); O=$R/.gpu/sg
mkdir -p "$O/all" /tmp/sgjit
[ -x /tmp/jitvenv/bin/python ] || { "${PY312:-$(ls -d /root/.pyenv/versions/3.12*/bin | head -1)/python3.12}" -m venv /tmp/jitvenv && /tmp/jitvenv/bin/pip install -q apache-tvm-ffi==0.1.11 msgspec; }
if [ ! -d /tmp/sgjit/cache ]; then
  python3 -m pip download -q --no-deps sglang==0.5.17 -d /tmp/sgjit/whl
  rm -rf /tmp/sgjit/site && mkdir -p /tmp/sgjit/site && unzip -q -o /tmp/sgjit/whl/sglang-0.5.17-*.whl -d /tmp/sgjit/site
  /tmp/jitvenv/bin/python "$G/sglang/tools/build_jit_cache.py" /tmp/sgjit/site /tmp/sgjit/cache.tmp && mv /tmp/sgjit/cache.tmp /tmp/sgjit/cache
fi
PY312_INCLUDE=$(/tmp/jitvenv/bin/python -c "import sysconfig; print(sysconfig.get_paths()[\"include\"])") WORK=/tmp/sgb KEEP_WORK=1 bash "$G/sglang/build-sglang-bundle.sh" "$G/sglang/sglang-0.5.17-requirements.txt" "$O/all" /tmp/sgjit/cache
ls "$O/all"
for i in 0 1 2 3 4; do mkdir -p "$O/p$i"; mv "$O"/all/sglang0517.tar.xz.part0$i "$O/p$i/"; done
cp "$O"/all/SHA256SUMS "$G/model-kit.tar.xz" "$O/p0/"
ls -la "$O"/p*
