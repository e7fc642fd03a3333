#!/bin/bash
# Source ON the H200 (the `device` tool): installs the engine bundle (vLLM parts in /tmp/ge,
# SGLang parts in /tmp/sg) and the tuner's dependency parts (/tmp/gd0, /tmp/gd1, ...) once per warm
# machine, then exports the environment the engine and `tune` need.   usage: source scripts/h200-install.sh vllm|sglang
engine=${1:?vllm or sglang}
if [ ! -f "/tmp/site/.installed-$engine" ]; then
  if [ "$engine" = vllm ]; then bash /tmp/ge/install-on-host.sh /tmp/ge > /tmp/install.log 2>&1
  else bash scripts/sglang-install.sh /tmp/sg > /tmp/install.log 2>&1; fi || { tail -20 /tmp/install.log; return 1; }
  [ -f /tmp/site2/.installed ] || { TARGET=/tmp/site2 bash /tmp/gd0/install-deps.sh /tmp/gd[0-9] > /tmp/deps.log 2>&1 && touch /tmp/site2/.installed; } || { tail -20 /tmp/deps.log; return 1; }
  touch "/tmp/site/.installed-$engine"
fi
if [ "$engine" = vllm ]; then
  export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
else
  source /tmp/site/_bundle/env.sh
fi
export PYTHONPATH=$PWD:/tmp/site:/tmp/site2 PYTHONUNBUFFERED=1
