"""The space scripts/h200-reliability.sh tunes: the engine's h200 space cut down to two enqueued
configs (a good one, and a memory fraction too small for the 8B weights) with a load probe long
enough to be killed in the middle of. Prints YAML."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

engine = sys.argv[1]
space = yaml.safe_load((Path(__file__).resolve().parents[1] / "search_spaces" / f"h200-{engine}.yaml").read_text())
if engine == "vllm":
    good = {"gpu-memory-utilization": 0.90, "max-model-len": 8192, "max-num-seqs": 256}
    small = {"gpu-memory-utilization": 0.05, "max-model-len": 8192, "max-num-seqs": 256}
else:
    space["server"]["flags"]["disable-cuda-graph"] = True  # a start in about a minute
    good = {"mem-fraction-static": 0.85, "context-length": 8192, "max-running-requests": 256}
    small = {"mem-fraction-static": 0.05, "context-length": 8192, "max-running-requests": 256}
    space.pop("constraints", None)
space["name"] = f"rel-{engine}"
space["parameters"] = {k: {"type": "categorical", "choices": sorted({good[k], small[k]})} for k in good}
space["enqueue"] = [good, small]
space["probes"]["load"].update(concurrency=[64], target=64, duration="20s", max_duration="20s")
space["budget"] = {"trials": 2, "timeout": "8m"}
space["remeasure"] = {"enabled": False}
print(yaml.safe_dump(space, sort_keys=False))
