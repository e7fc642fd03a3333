"""Benchmark: GPU-time used when trial sizes are mixed (tp 1 and 2), with and without letting a
smaller trial pass a larger one that waits for its partition, measured in one run on this machine.

The same eight configs, in the same order, of a llama.cpp space on two 1-core devices whose trial
size is a parameter (``threads`` 1 or 2, as ``tp`` on the x2 night), run through `Driver` +
`RayExecutor` twice per round: ``in order``: each trial waits for every one asked before it (the
driver before 9ef6d6e: while a 2-device trial waits, the free device idles); ``may pass``: a trial
asked later starts on the free device (tuner.orchestration.driver.Driver._may_overtake). Utilization is
device-seconds busy (each trial from its launch to its end, times its devices) over devices times
wall; wall is from the first launch to the last end.

    python benchmarks/packing.py [rounds, default 2]
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.conftest import tiny_space
from tuner import objectives
from tuner.app.prepare import validate
from tuner.base.artifacts import RunDir
from tuner.launching.executors import RayExecutor
from tuner.orchestration.driver import Driver
from tuner.results.table import launched
from tuner.serving.server import end_servers_on_sigterm
from tuner.trials import read_trials
from tuner.trials.study import open_study

SIZES = (1, 2, 1, 2, 1, 1, 2, 1)


def _space():
    raw = tiny_space(name="packing-bench")
    raw["server"]["flags"].pop("threads")
    contexts = [2048 + 256 * i for i in range(len(SIZES))]  # distinct configs: none is a copied repeat
    raw["parameters"] = {
        "threads": {"type": "categorical", "choices": [1, 2]},
        "ctx-size": {"type": "categorical", "choices": contexts},
    }
    raw["hardware"] = {"kind": "cpu", "devices": [0, 1], "per_trial": "threads"}
    raw["enqueue"] = [{"threads": s, "ctx-size": c} for s, c in zip(SIZES, contexts, strict=True)]
    raw["budget"] = {"trials": len(SIZES)}
    raw["probes"]["load"].update(duration=3, max_duration=4)
    return validate(raw, "packing-bench.yaml")


def run(policy: str, root: Path) -> dict[str, float]:
    space = _space()
    objective = objectives.load(space.objectives)
    run_dir = RunDir(root / policy.replace(" ", "-"))
    run_dir.root.mkdir(parents=True)
    study = open_study(space, objective, name="packing", storage=run_dir.db_url, source="packing-bench.yaml")
    executor = RayExecutor([0, 1], "cpu", max_parallel=2)
    in_order = mock.patch.object(Driver, "_may_overtake", lambda self, waiting: False)
    try:
        with in_order if policy == "in order" else contextlib.nullcontext():
            Driver(space, study, objective, run_dir, executor, trials=len(SIZES)).run()
    finally:
        executor.shutdown()
    ran = [t for t in read_trials(study) if launched(t) is not None and t.datetime_complete]
    assert len(ran) == len(SIZES), [t.error for t in read_trials(study)]
    busy = sum((t.datetime_complete - launched(t)).total_seconds() * len(t.partition) for t in ran)
    wall = (max(t.datetime_complete for t in ran) - min(launched(t) for t in ran)).total_seconds()
    return {"wall_s": wall, "utilization": busy / (2 * wall)}


def main(rounds: int = 2) -> None:
    found: dict[str, list[dict[str, float]]] = {"in order": [], "may pass": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):  # interleaved: drift on this shared machine hits both alike
            for policy in found:
                r = run(policy, Path(tmp) / f"round{i}")
                found[policy].append(r)
                print(
                    f"round {i + 1} {policy:>8}: {len(SIZES)} trials in {r['wall_s']:.1f} s, devices busy {r['utilization']:.0%}",
                    flush=True,
                )
    for policy, runs in found.items():
        walls, utils = [r["wall_s"] for r in runs], [r["utilization"] for r in runs]
        spread = f" (sd {statistics.stdev(walls):.1f} s, {statistics.stdev(utils):.0%})" if len(runs) > 1 else ""
        print(
            f"{policy:>8}: mean wall {statistics.fmean(walls):.1f} s, devices busy {statistics.fmean(utils):.0%}{spread}, "
            f"n={len(runs)}"
        )
    ratio = statistics.fmean(r["wall_s"] for r in found["in order"]) / statistics.fmean(r["wall_s"] for r in found["may pass"])
    print(f"ratio wall in order / may pass: {ratio:.2f}")


if __name__ == "__main__":
    end_servers_on_sigterm()
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
