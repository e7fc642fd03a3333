"""Benchmark: trials per hour with 1 partition vs 2 on the same trials, and tuner overhead.

The N configs are distinct (batch-size differs): a config the study already launched is copied,
not launched again, so N identical configs would measure one launch.

The same N configs (enqueued, so both runs do identical work) run through the driver and Ray
exactly as `tune run` does: once as one 2-core partition, once as two 1-core partitions
(llama-server -t 1 in both). Prints trials/hour for each, their ratio (aim >= 1.8 on 2 cores),
and the tuner's overhead in the serial run = (wall - sum of server lifetimes) / wall (aim <= 3 %).

    python benchmarks/partitions.py [N]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.conftest import tiny_space
from tuner import objectives
from tuner.app.prepare import validate
from tuner.base.artifacts import RunDir
from tuner.launching.executors import RayExecutor
from tuner.orchestration.driver import Driver
from tuner.serving.server import end_servers_on_sigterm
from tuner.trials import enqueue
from tuner.trials.study import open_study


def run(per_trial: int, n: int, tmp: Path) -> dict[str, float]:
    raw = tiny_space()
    raw["hardware"] = {"kind": "cpu", "devices": [0, 1], "per_trial": per_trial}
    raw["parameters"] = {
        "ctx-size": {"type": "categorical", "choices": [2048, 4096]},
        "parallel": {"type": "int", "low": 1, "high": 2},
        "batch-size": {"type": "int", "low": 256, "high": 256 + 32 * n, "step": 32},  # n distinct configs:
    }  # a repeated config is copied, not launched, so identical trials would not measure anything
    raw["remeasure"] = {"enabled": False}
    raw["probes"]["load"].update(concurrency=[2], prompt_tokens=64, output_tokens=48, duration=3, max_duration=3)
    space = validate(raw, "bench.yaml")
    objective = objectives.load(space.objectives)
    name = f"p{per_trial}"
    study = open_study(space, objective, name=name, storage=f"sqlite:///{tmp}/{name}.db", source="bench.yaml")
    for i in range(n):
        enqueue(study, {"ctx-size": (2048, 4096)[i % 2], "parallel": 1 + (i // 2) % 2, "batch-size": 256 + 32 * i})
    run_dir = RunDir(tmp / name)
    executor = RayExecutor([0, 1], "cpu", max_parallel=2 // per_trial)
    try:
        began = time.monotonic()
        summary = Driver(space, study, objective, run_dir, executor, trials=n).run()
        wall = time.monotonic() - began
    finally:
        executor.shutdown()
    lifetimes = []
    for t in study.get_trials():
        timings = json.loads((run_dir.trial(t.number) / "outcome.json").read_text())["timings"]
        lifetimes.append(timings["ended_at"] - timings["started_at"])
    assert summary.states == {"COMPLETE": n}, summary.states
    return {
        "wall": wall,
        "trials_per_hour": n / wall * 3600,
        "server_s": sum(lifetimes),
        "overhead": (wall - sum(lifetimes)) / wall,
    }


def main(n: int) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        one = run(2, n, Path(tmp))
        two = run(1, n, Path(tmp))
    print(f"{n} identical trials; wall measured from the first ask to the last tell (Ray start excluded)")
    print(
        f"1 partition (2 cores): {one['wall']:.1f}s wall, {one['trials_per_hour']:.0f} trials/hour, servers alive "
        f"{one['server_s']:.1f}s"
    )
    print(
        f"2 partitions (1 core): {two['wall']:.1f}s wall, {two['trials_per_hour']:.0f} trials/hour, servers alive "
        f"{two['server_s']:.1f}s"
    )
    print(f"ratio 2 vs 1 partitions: {two['trials_per_hour'] / one['trials_per_hour']:.2f} (aim >= 1.8)")
    print(f"tuner overhead, serial run: {one['overhead']:.1%} (aim <= 3 %)")


if __name__ == "__main__":
    end_servers_on_sigterm()  # `timeout` must not leave a server behind
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
