#!/bin/bash
# Runs ON the H200 (the `device` tool): GPU hygiene sees a foreign process holding GPU memory and
# names its pid, through NVML (pynvml) and through nvidia-smi; once it is gone, nobody is named.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"; exec > >(tee -a "$out/hygiene.log") 2>&1
setsid python3 -c "import torch, time; x = torch.empty(20 * 2**30, dtype=torch.uint8, device='cuda'); print('holding 20 GiB', flush=True); time.sleep(300)" &
holder=$!
for _ in $(seq 60); do nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -q . && break; sleep 1; done
echo "holder pid $holder"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
check() { PYTHONPATH=$PWD python3 -c "
from tuner.host.devices import GpuHygiene, _smi_holders
h = GpuHygiene([0], hold_grace=1)
print('nvml:', [x.describe() for x in h.held([0])])
print('nvidia-smi:', [x.describe() for x in _smi_holders([0])])"; }
check
kill -9 -- -"$holder"; sleep 3
echo "after the holder was killed:"; check
