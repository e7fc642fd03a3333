"""Benchmark: time from a real engine's fatal log line to the trial being recorded as PRUNED.

Runs N real llama-server starts whose KV cache cannot fit under a 1 GiB memory cap, through the
same driver as `tune run`, and measures (moment the trial is told to Optuna) - (moment the reader
saw the fatal line). Prints the median; the target is <= 2 s.

    python benchmarks/fatal_to_pruned.py [N]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import optuna

from tuner import objectives
from tuner.app.prepare import validate
from tuner.base.artifacts import RunDir
from tuner.launching.executors import InlineExecutor
from tuner.orchestration.driver import Driver, TrialReport
from tuner.serving.server import end_servers_on_sigterm
from tuner.trials import enqueue, read_trials
from tuner.trials.study import open_study

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.conftest import tiny_space


def main(n: int) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    raw = tiny_space()
    raw["parameters"] = {
        "ctx-size": {"type": "categorical", "choices": [65536, 131072]},
        "seed": {"type": "int", "low": 0, "high": 10**6},
    }
    raw["budget"] = {"trials": n}
    space = validate(raw, "bench.yaml")
    objective = objectives.load(space.objectives)
    told: dict[int, float] = {}

    def on_trial(report: TrialReport) -> None:
        told[report.number] = time.time()

    with tempfile.TemporaryDirectory() as tmp:
        study = open_study(space, objective, name="bench", storage=f"sqlite:///{tmp}/db.sqlite", source="bench.yaml")
        for i in range(n):
            enqueue(study, {"ctx-size": 65536, "seed": i})
        Driver(space, study, objective, RunDir(Path(tmp)), InlineExecutor(), trials=n, on_trial=on_trial).run()
        delays = []
        for t in read_trials(study):
            details = t.details
            assert t.state.name == "PRUNED" and t.signature == "kv_cache_oom", t
            delays.append(told[t.number] - details["fatal_seen_at"])
    print(f"failing starts: {n}; fatal line -> PRUNED: " + ", ".join(f"{d:.3f}s" for d in delays))
    print(
        f"median {statistics.median(delays):.3f}s, max {max(delays):.3f}s (target <= 2 s): ratio to target "
        f"{statistics.median(delays) / 2.0:.3f}"
    )


if __name__ == "__main__":
    end_servers_on_sigterm()  # `timeout` must not leave a server behind
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
