"""One run per study: a second is refused in one line naming the holder; a killed holder's lock
is gone with it (kill -9 included); a shared storage's lease expires when its heartbeat stops."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import pytest

from tuner import lock as lock_module
from tuner.lock import LEASE_ATTR, StudyLock, StudyLocked

HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tuner.lock import StudyLock
    with StudyLock(Path(sys.argv[1]), "s"):
        print("held", flush=True)
        time.sleep(60)
    """
)


def test_a_second_run_is_refused_naming_the_holder_and_a_killed_holder_frees_it(tmp_path: Path) -> None:
    path = tmp_path / "run.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StudyLocked, match=rf"study 's' is being run by pid {holder.pid} on \S+ since "):
            StudyLock(path, "s").acquire()
        holder.kill()  # SIGKILL: no cleanup runs; the kernel drops the flock
        holder.wait(5)
        with StudyLock(path, "s"):
            pass
    finally:
        holder.kill()
        holder.wait()


def test_a_shared_storage_lease_refuses_another_host_until_it_goes_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The RDB lease (PostgreSQL in a cluster) on a SQLite file, told it is shared."""
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db")
    monkeypatch.setattr(lock_module, "storage_url", lambda study: "postgresql://db/tuner")
    study._storage.set_study_system_attr(study._study_id, LEASE_ATTR, {"pid": 7, "host": "node-b", "since": time.time(), "beat": time.time()})
    with StudyLock(tmp_path / "a.lock", "s") as lock, pytest.raises(StudyLocked, match="pid 7 on node-b .*heartbeat"):
        lock.lease(study)
    study._storage.set_study_system_attr(study._study_id, LEASE_ATTR, {"pid": 7, "host": "node-b", "since": 0, "beat": time.time() - 120})
    with StudyLock(tmp_path / "b.lock", "s", heartbeat=0.05) as lock:
        lock.lease(study)
        first = _lease(study)["beat"]
        time.sleep(0.3)
        assert _lease(study)["beat"] > first, "the heartbeat does not renew the lease"
    assert _lease(study) is None, "a clean exit leaves its lease behind"


def _lease(study: optuna.Study) -> dict | None:
    return study._storage.get_study_system_attrs(study._study_id).get(LEASE_ATTR)


@pytest.mark.integration
def test_a_study_on_postgresql_is_shared_by_two_drivers_and_locked_across_machines(postgres: str, tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    """Two drivers (two machines: each its own runs/ and lock file) on one study in a real
    PostgreSQL: while one runs, the other is refused by the lease in the storage, naming it;
    afterwards the second sees the first's trial and the budget counts it."""
    from tests.conftest import tiny_space
    from tuner import objectives
    from tuner.artifacts import RunDir
    from tuner.driver import Driver
    from tuner.executors import InlineExecutor
    from tuner.space import validate
    from tuner.study import open_study

    raw = tiny_space(name="shared")
    raw["parameters"] = {"parallel": {"type": "int", "low": 1, "high": 2}}
    raw["enqueue"] = [{"parallel": 1}, {"parallel": 2}]
    space = validate(raw, "shared.yaml")
    objective = objectives.load(space.objectives)
    machines = {}
    for host in ("node-a", "node-b"):
        run_dir = RunDir(tmp_path / host / "shared")
        run_dir.root.mkdir(parents=True)
        lock = StudyLock(run_dir.root / "run.lock", "shared")
        lock.holder["host"] = host  # the second driver runs on another machine
        machines[host] = (run_dir, lock)
    (dir_a, lock_a), (dir_b, lock_b) = machines.values()
    with lock_a:
        study_a = open_study(space, objective, name="shared", storage=postgres, source="shared.yaml")
        lock_a.lease(study_a)
        with lock_b:  # its own flock (another machine's file): only the storage can refuse it
            study_b = open_study(space, objective, name="shared", storage=postgres, source="shared.yaml")
            with pytest.raises(StudyLocked, match=rf"pid \d+ on node-a since .*heartbeat in the study storage"):
                lock_b.lease(study_b)
        Driver(space, study_a, objective, dir_a, InlineExecutor(), trials=1).run()
    with lock_b:
        study_b = open_study(space, objective, name="shared", storage=postgres, source="shared.yaml")
        lock_b.lease(study_b)
        assert [t.state.name for t in study_b.get_trials()] == ["COMPLETE", "WAITING"]  # node-a's trial and the queue, seen from node-b
        Driver(space, study_b, objective, dir_b, InlineExecutor(), trials=2).run()
    trials = optuna.load_study(study_name="shared", storage=postgres).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"] and [t.params for t in trials] == [{"parallel": 1}, {"parallel": 2}]
    assert (dir_a.trial(0) / "outcome.json").is_file() and (dir_b.trial(1) / "outcome.json").is_file()
