"""A real multi-node Ray cluster on this machine (Ray's own cluster utilities: a head and two
worker nodes, each a raylet of its own with its own resources): trials run on the node that
holds their partition, their evidence comes back to the driver's runs/, and each node's ledger
is swept by the next executor that connects (a crashed driver's orphans on every node)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import group_members, tiny_space
from tuner.launching.executors import leftovers

pytestmark = pytest.mark.integration
# The tests on the `cluster` fixture run on one xdist worker (pyproject: --dist loadgroup), in a row:
# one 3-node cluster for them all, not one per worker and per return to this module (7-8 s each).
one_cluster = pytest.mark.xdist_group("ray-cluster")


def test_a_local_run_is_local_whatever_ray_current_cluster_or_ray_address_say(
    tmp_path: Path, llama_server: Path, smollm2: Path
) -> None:
    """A `ray start --head` killed instead of stopped leaves /tmp/ray/ray_current_cluster naming it;
    every local `tune run` then died ("When connecting to an existing cluster, num_cpus and num_gpus
    must not be provided"). Without --ray-address the tool starts its own cluster, ignoring the
    stale file and RAY_ADDRESS alike."""
    import sys

    import yaml

    raw = tiny_space(name="local")
    space = tmp_path / "local.yaml"
    space.write_text(yaml.safe_dump(raw))
    current = Path("/tmp/ray/ray_current_cluster")  # where `ray start --head` records its address
    saved = current.read_text() if current.exists() else None
    current.parent.mkdir(parents=True, exist_ok=True)
    current.write_text("127.0.0.1:9")  # a head that is gone
    try:
        for extra in ({}, {"RAY_ADDRESS": "127.0.0.1:9"}):
            out = subprocess.run(
                [sys.executable, "-m", "tuner", "run", "--space", str(space), "--study", f"local{len(extra)}", "--no-remeasure"],
                capture_output=True,
                text=True,
                cwd=tmp_path,
                timeout=300,
                env={
                    **{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
                    **extra,
                    "PYTHONPATH": str(Path(__file__).parents[1]),
                },
            )
            assert out.returncode == 0, extra | {"out": out.stdout[-2000:] + out.stderr[-2000:]}
            assert "COMPLETE" in out.stdout
            assert (
                "Token authentication" not in out.stdout + out.stderr
            )  # Ray's notice about the tool's own cluster: only with -v
    finally:
        if saved is None:
            current.unlink(missing_ok=True)
        else:
            current.write_text(saved)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """Head (no devices) + node A (device 0) + node B (device 1); yields (address, {device: node id})."""
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    os.environ["TUNER_NODE_LEDGERS"] = str(tmp_path_factory.mktemp("node-ledgers"))
    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        a = made.add_node(num_cpus=1, resources={"tuner_device_0": 1})
        b = made.add_node(num_cpus=1, resources={"tuner_device_1": 1})
        made.wait_for_nodes()
        yield made.address, {0: a.node_id, 1: b.node_id}
    finally:
        if ray.is_initialized():
            ray.shutdown()
        made.shutdown()
        os.environ.pop("TUNER_NODE_LEDGERS", None)


def _two_partitions(name: str) -> dict:
    """Two 1-core partitions (devices 0 and 1, one per worker node), two configs enqueued."""
    raw = tiny_space(name=name)
    raw["hardware"] = {"kind": "cpu", "devices": [0, 1], "per_trial": 1}
    raw["parameters"] = {"parallel": {"type": "int", "low": 1, "high": 2}}
    raw["enqueue"] = [{"parallel": 1}, {"parallel": 2}]
    raw["budget"] = {"trials": 2}
    return raw


@one_cluster
def test_trials_run_on_the_node_of_their_partition_and_report_to_the_driver(
    cluster, tmp_path: Path, llama_server: Path, smollm2: Path
) -> None:
    from tuner import objectives
    from tuner.app.prepare import validate
    from tuner.base.artifacts import RunDir
    from tuner.launching.executors import RayExecutor
    from tuner.orchestration.driver import Driver
    from tuner.results.table import launched
    from tuner.trials.study import open_study

    address, nodes = cluster
    raw = _two_partitions("multi")
    space = validate(raw, "multi.yaml")
    objective = objectives.load(space.objectives)
    run_dir = RunDir(tmp_path / "multi")
    run_dir.root.mkdir()
    study = open_study(space, objective, name="multi", storage=run_dir.db_url, source="multi.yaml")
    executor = RayExecutor([0, 1], "cpu", max_parallel=2, address=address, node_key="multi")
    try:
        Driver(space, study, objective, run_dir, executor, trials=2).run()
    finally:
        executor.shutdown()
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"], [t.user_attrs.get("error") for t in trials]
    for t in trials:
        (device,) = t.user_attrs["partition"]
        assert f"ray node {nodes[device][:12]}" in t.user_attrs["node"]  # the node that holds tuner_device_<device>
        here = run_dir.trial(t.number)
        for name in ("command.txt", "server.log", "outcome.json"):
            assert (here / name).is_file(), (here, name)  # written back on the driver, not left on the node
        assert "llama_server" in (here / "server.log").read_text() or "main:" in (here / "server.log").read_text()
    starts = sorted(t.datetime_start for t in trials)
    ends = sorted(t.datetime_complete for t in trials)
    assert starts[1] < ends[0]  # side by side, one per node
    assert all(t.datetime_start <= launched(t) < t.datetime_complete for t in trials)  # asked, then launched, then done


@one_cluster
def test_a_new_executor_stops_orphans_on_every_node(cluster, tmp_path: Path) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from tuner.launching.executors import RayExecutor, node_ledger

    address, nodes = cluster
    ray.init(address=address, namespace="tuner", log_to_driver=False)

    @ray.remote(num_cpus=0)
    def leave_a_server(key: str) -> int:
        """What a driver's crash leaves on a node: Ray ends the job's workers and their direct
        children (the server's leader), but the engine's own children live on in its session."""
        proc = subprocess.Popen(["bash", "-c", "sleep 300 & wait"], start_new_session=True)
        node_ledger(key).add(proc.pid, "/nowhere/trials/0", "bash")
        return proc.pid

    try:
        pid = ray.get(
            leave_a_server.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[1], soft=False)).remote("crashed")
        )
    finally:
        ray.shutdown()
    time.sleep(2)  # the job's worker is gone by now
    left = group_members(pid)
    assert left, "nothing of the server survived its worker: no orphan to sweep"
    executor = RayExecutor([0, 1], "cpu", max_parallel=2, address=address, node_key="crashed")
    try:
        notes = executor.recovered
    finally:
        executor.shutdown()
    assert len(notes) == 1 and nodes[1][:12] in notes[0] and all(str(p) in notes[0] for p in left), notes
    deadline = time.monotonic() + 10
    while group_members(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert group_members(pid) == []


@one_cluster
def test_tune_run_on_the_cluster_from_the_command_line(cluster, tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    """The CLI wiring: --ray-address puts trials on the nodes and warns about SQLite."""
    import sys

    import optuna
    import yaml

    address, nodes = cluster
    raw = _two_partitions("cli-multi")
    space = tmp_path / "cli-multi.yaml"
    space.write_text(yaml.safe_dump(raw))
    out = subprocess.run(
        [sys.executable, "-m", "tuner", "run", "--space", str(space), "--ray-address", address, "--no-remeasure"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "warning: --ray-address with SQLite storage" in out.stdout
    study = optuna.load_study(study_name="cli-multi", storage=f"sqlite:///{tmp_path / 'runs' / 'cli-multi' / 'study.db'}")
    ran = {t.user_attrs["partition"][0]: t.user_attrs["node"] for t in study.get_trials() if t.state.name == "COMPLETE"}
    assert set(ran) == {0, 1} and all(nodes[d][:12] in where for d, where in ran.items()), ran


def _server_logs_on_nodes(study: str, since: float) -> list[Path]:
    """The non-empty server.log files of ``study``'s trials in the nodes' temp folders (the local
    cluster's nodes share this machine's), from folders made since ``since``."""
    import json
    import tempfile

    from tuner.launching.executors import LEFTOVER_PREFIX, MARKER

    logs = []
    for folder in Path(tempfile.gettempdir()).glob(f"{LEFTOVER_PREFIX}*"):
        try:
            fresh = folder.stat().st_mtime >= since - 1 and json.loads((folder / MARKER).read_text()).get("key") == study
            if fresh and (folder / "server.log").stat().st_size > 0:
                logs.append(folder / "server.log")
        except (OSError, ValueError):
            continue
    return logs


@one_cluster
def test_after_a_drivers_kill_9_the_next_driver_from_another_folder_keeps_the_interrupted_trials_evidence(
    cluster, tmp_path: Path, llama_server: Path, smollm2: Path
) -> None:
    """README's cluster path: the driver is killed (-9) while its trials run on the worker nodes;
    a driver started from another folder on the same study takes over, stops the orphans on every
    node, and the interrupted trials' server.log and files (left in their nodes' temp folders) end
    up in its runs/ and in the study's artifact store, attached to the trials it records FAIL."""
    import signal
    import sys

    import optuna
    import yaml
    from optuna.artifacts import get_all_artifact_meta

    address, _ = cluster
    raw = _two_partitions("crash-node")
    # still probing when the driver dies 5 s after both launched; the second driver re-runs both with it
    raw["probes"]["load"].update(duration=12, max_duration=12)
    space = tmp_path / "crash-node.yaml"
    space.write_text(yaml.safe_dump(raw))
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    argv = [
        sys.executable,
        "-m",
        "tuner",
        "run",
        "--space",
        str(space),
        "--ray-address",
        address,
        "--storage",
        storage,
        "--artifacts",
        str(tmp_path / "artifacts"),
        "--no-remeasure",
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    started = time.time()
    first = subprocess.Popen(
        argv, cwd=tmp_path / "a", env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                running = optuna.load_study(study_name="crash-node", storage=storage).get_trials(
                    states=(optuna.trial.TrialState.RUNNING,)
                )
            except KeyError:
                running = []
            if sum("partition" in t.user_attrs for t in running) == 2:
                break
            time.sleep(0.3)
        else:
            raise AssertionError("the first driver did not launch two trials within 120 s")
        # both servers started on their nodes (a trial's partition is set when the driver sends it;
        # beside a busy loop one worker had not launched its server 5 s later, 37d7be9), then probing
        # (the window closes 12 s after the warm-up wave)
        while len(_server_logs_on_nodes("crash-node", since=started)) < 2:
            assert time.monotonic() < deadline, "the two trials' servers did not start on their nodes within 120 s of the driver"
            time.sleep(0.3)
        time.sleep(3)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    second = subprocess.run(argv, cwd=tmp_path / "b", env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "left on this node" in second.stdout, second.stdout
    study = optuna.load_study(study_name="crash-node", storage=storage)
    interrupted = [t for t in study.get_trials() if t.state.name == "FAIL" and "interrupted" in t.user_attrs.get("error", "")]
    assert len(interrupted) == 2, [(t.number, t.state.name, t.user_attrs.get("error")) for t in study.get_trials()]
    for t in interrupted:
        log = tmp_path / "b" / "runs" / "crash-node" / "trials" / str(t.number) / "server.log"
        assert log.is_file() and "--port" in (log.parent / "command.txt").read_text() and log.stat().st_size > 0, log
        assert {"server.log", "command.txt"} <= {m.filename for m in get_all_artifact_meta(t, storage=study._storage)}


def test_a_file_gone_while_a_sweep_reads_a_left_trial_folder_is_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed driver's worker may still remove its trial folder while the next driver sweeps:
    the sweep takes what is still there instead of failing the run (CI: command.txt vanished)."""
    folder = tmp_path / "tuner-trial-x"
    folder.mkdir()
    (folder / ".tuner-trial.json").write_text('{"key": "s", "trial": 3}')
    (folder / "server.log").write_text("ready\n")
    (folder / "command.txt").write_text("llama-server\n")
    real, listed = Path.stat, set()

    def vanishing(self: Path, **kw: object) -> object:
        if self.name == "command.txt" and self in listed:  # there when listed, gone when read
            raise FileNotFoundError(2, "No such file or directory", str(self))
        listed.add(self)
        return real(self, **kw)

    monkeypatch.setattr(Path, "stat", vanishing)
    found = leftovers("s", tmp_path)
    monkeypatch.undo()
    assert found == {3: {"server.log": b"ready\n"}} and not folder.exists()
