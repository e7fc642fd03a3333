"""Benchmark: trials per hour on one Ray node vs a multi-node cluster, and the scheduling overhead
per trial, measured in one run on this machine.

Both runs tune the same small llama.cpp space (two 1-core partitions, devices 0 and 1) through
`Driver` + `RayExecutor` with ``--ray-address`` semantics: ``one``: a single node that owns both
devices; ``three``: a head without devices and two worker nodes owning one device each (Ray's
cluster utilities: one raylet per node). Trials/hour is finished trials over the driver's wall
time; the overhead of a trial is from the driver's launch (its datetime_start) to its server's
launch on the node (timings.started_at): Ray scheduling, worker start, the node-local directory.
On one machine more nodes add no cores, so the ratio prices the cluster machinery itself.

    python benchmarks/cluster.py [trials per run, default 6]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.conftest import tiny_space
from tuner import objectives
from tuner.app.prepare import validate
from tuner.base.artifacts import RunDir
from tuner.launching.executors import RayExecutor
from tuner.orchestration.driver import Driver
from tuner.serving.server import end_servers_on_sigterm
from tuner.trials import read_trials
from tuner.trials.study import open_study


def _space(trials: int):
    raw = tiny_space(name="cluster-bench")
    raw["hardware"] = {"kind": "cpu", "devices": [0, 1], "per_trial": 1}
    raw["parameters"] = {"parallel": {"type": "int", "low": 1, "high": 4}, "batch-size": {"type": "int", "low": 64, "high": 2048}}
    raw["budget"] = {"trials": trials}
    raw["sampler"] = {"name": "random", "seed": 0}
    return validate(raw, "cluster-bench.yaml")


def run(layout: str, trials: int, root: Path) -> dict[str, float]:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": False,
            **({"resources": {"tuner_device_0": 1, "tuner_device_1": 1}} if layout == "one" else {}),
        },
    )
    try:
        if layout == "three":
            cluster.add_node(num_cpus=1, resources={"tuner_device_0": 1})
            cluster.add_node(num_cpus=1, resources={"tuner_device_1": 1})
        cluster.wait_for_nodes()
        space = _space(trials)
        objective = objectives.load(space.objectives)
        run_dir = RunDir(root / layout)
        run_dir.root.mkdir(parents=True)
        study = open_study(space, objective, name=layout, storage=run_dir.db_url, source="cluster-bench.yaml")
        executor = RayExecutor([0, 1], "cpu", max_parallel=2, address=cluster.address, node_key=f"bench-{layout}")
        began = time.monotonic()
        try:
            Driver(space, study, objective, run_dir, executor, trials=trials).run()
        finally:
            executor.shutdown()
        wall = time.monotonic() - began
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
    # launched trials only: a repeated config is copied, a screened one never starts
    done = [t for t in read_trials(study) if t.timings and t.duplicate_of is None]
    overheads = [t.timings["started_at"] - t.datetime_start.timestamp() for t in done]
    nodes = {t.node for t in done}
    return {
        "trials": len(done),
        "wall_s": wall,
        "per_hour": len(done) / wall * 3600,
        "nodes": len(nodes),
        "overhead_mean_s": statistics.fmean(overheads) if overheads else float("nan"),
        "overhead_max_s": max(overheads) if overheads else float("nan"),
    }


def main(trials: int = 6) -> dict[str, dict[str, float]]:
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("TUNER_NODE_LEDGERS", str(Path(tmp) / "ledgers"))
        for layout in ("one", "three"):
            results[layout] = r = run(layout, trials, Path(tmp))
            print(
                f"{layout:>5} node(s): {r['trials']} trials on {r['nodes']} node(s) in {r['wall_s']:.1f}s = "
                f"{r['per_hour']:,.0f} trials/hour; "
                f"scheduling overhead per trial {r['overhead_mean_s']:.2f}s mean, {r['overhead_max_s']:.2f}s max",
                flush=True,
            )
    print(f"ratio trials/hour three nodes vs one: {results['three']['per_hour'] / results['one']['per_hour']:.2f}")
    return results


if __name__ == "__main__":
    end_servers_on_sigterm()
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
