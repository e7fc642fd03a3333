#!/bin/bash
# Runs ON the H200 (the `device` tool) after the vLLM and dependency parts were copied to /tmp/ge,
# /tmp/gd0, /tmp/gd1 (docs/reliability.md says how). A real `tune run` with the throughput-energy
# objective: every trial gets NVML power, energy, utilization, memory, temperature and clocks per
# load level; the best config is re-measured on fresh servers (tokens per joule repeated).
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"; exec > >(tee -a "$out/telemetry.log") 2>&1
t0=$(date +%s)
source scripts/h200-install.sh vllm || exit 1
echo "installed after $(( $(date +%s) - t0 ))s"; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv
python3 - > /tmp/energy.yaml <<'PY'
import yaml
s = yaml.safe_load(open("search_spaces/h200-vllm.yaml"))
s.update(name="h200-energy", objectives="throughput-energy")
s["parameters"] = {"gpu-memory-utilization": {"type": "categorical", "choices": [0.9]},
                   "max-model-len": {"type": "categorical", "choices": [8192]},
                   "max-num-seqs": {"type": "categorical", "choices": [32, 256]}}
s["enqueue"] = [{"gpu-memory-utilization": 0.9, "max-model-len": 8192, "max-num-seqs": 256},
                {"gpu-memory-utilization": 0.9, "max-model-len": 8192, "max-num-seqs": 32}]
s["probes"]["load"].update(concurrency=[32, 128], target=128, duration="15s", max_duration="20s")
s["budget"] = {"trials": 2, "timeout": "8m"}
s["remeasure"] = {"share": 1.5, "reference_runs": 0, "top": 1, "repeats": 1}
print(yaml.safe_dump(s, sort_keys=False))
PY
python3 -m tuner run --space /tmp/energy.yaml --study h200-energy
echo "tune exit $? after $(( $(date +%s) - t0 ))s"
python3 -m tuner trials --study h200-energy --out "$out/h200-energy-trials.csv"
python3 -m tuner report --study h200-energy --out "$out/h200-energy-report" 2>&1 | tail -2
python3 - <<'PY'
import json, optuna
s = optuna.load_study(study_name="h200-energy", storage="sqlite:///runs/h200-energy/study.db")
for t in s.trials:
    m = t.user_attrs.get("metrics", {})
    keys = [k for k in sorted(m) if k.startswith("telemetry.") and "@" in k]
    print(t.number, t.state.name, t.params.get("max-num-seqs"), t.user_attrs.get("telemetry", {}).get("source"),
          {k: round(m[k], 3) for k in keys})
for k, v in s.user_attrs.items():
    if k.startswith("revalidated.") or k == "noise":
        print(k, json.dumps({kk: vv for kk, vv in v.items() if kk in ("runs", "labels", "values")}))
PY
tar czf "$out/runs-h200-energy.tgz" -C runs h200-energy
