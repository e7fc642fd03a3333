#!/bin/bash
# Runs ON the H200 device machine (the `device` tool), in a copy of this repo, after the engine
# bundle parts and .gpu/deps/tunerdeps.tar.xz were copied to /tmp by earlier calls.
# usage: scripts/h200.sh vllm|sglang     -> a real `tune run` of search_spaces/h200-<engine>.yaml,
# then the gpu-marked tests over what it produced; everything worth keeping goes to $OUT.
set -uo pipefail
engine=${1:?vllm or sglang}
out=${OUT:-/tmp/out}; mkdir -p "$out"
exec > >(tee "$out/h200-$engine.log") 2>&1
t0=$(date +%s)
python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count())'
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
mkdir -p /tmp/site2 && python3 -c "import tarfile; tarfile.open('/tmp/tunerdeps.tar.xz','r:xz').extractall('/tmp/site2', filter='tar')"
if [ "$engine" = vllm ]; then
  bash /tmp/ge/install-on-host.sh /tmp/ge > /tmp/install.log 2>&1 || { tail -20 /tmp/install.log; exit 1; }
  export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
else
  bash scripts/sglang-install.sh /tmp/sg > /tmp/install.log 2>&1 || { tail -20 /tmp/install.log; exit 1; }
  source /tmp/site/_bundle/env.sh
fi
export PYTHONPATH=$PWD:$PYTHONPATH:/tmp/site2 PYTHONUNBUFFERED=1
echo "installed after $(( $(date +%s) - t0 ))s"
python3 -m tuner run --space "h200-$engine" --study "h200-$engine" ${EXECUTOR:+--executor $EXECUTOR}
rc=$?
echo "tune exit $rc after $(( $(date +%s) - t0 ))s"
python3 -m tuner status --study "h200-$engine"
python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider 2>&1 | tail -15
tar czf "$out/runs-h200-$engine.tgz" --exclude=servers -C runs "h200-$engine"
nvidia-smi --query-gpu=memory.used --format=csv
exit $rc
