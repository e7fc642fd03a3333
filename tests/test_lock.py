"""One run per study: a second is refused in one line naming the holder; a killed holder's lock
is gone with it (kill -9 included); a shared storage's lease expires when its heartbeat stops."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import optuna
import pytest

from tuner.trials import connect, read_lease, write_lease
from tuner.trials.lock import StudyLock, StudyLocked

HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tuner.trials.lock import StudyLock
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


def _foreign(**extra: object) -> dict:
    """A lease as another machine's driver writes it (its pid means nothing here)."""
    return {
        "pid": 7,
        "host": "node-b",
        "since": time.time(),
        "beat": time.time(),
        "machine": "other-boot/pid:[1]",
        "token": "t-b",
        **extra,
    }


def test_a_lease_of_another_machine_refuses_until_it_goes_stale_and_says_when(tmp_path: Path) -> None:
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db")
    write_lease(study, _foreign(beat=time.time() - 20))
    with StudyLock(tmp_path / "a.lock", "s", settle=0.01) as lock, pytest.raises(StudyLocked) as refused:
        lock.lease(study)
    assert re.fullmatch(
        r"study 's' is being run by pid 7 on node-b since .* \(heartbeat in the study storage 20s ago; "
        r"if that run is dead its lease expires in 40s\)",
        str(refused.value),
    ), refused.value
    write_lease(study, _foreign(beat=time.time() - 120))
    with StudyLock(tmp_path / "b.lock", "s", heartbeat=0.05, settle=0.01) as lock:
        lock.lease(study)
        first = _lease(study)["beat"]
        time.sleep(0.3)
        assert _lease(study)["beat"] > first, "the heartbeat does not renew the lease"
    assert not _lease(study), "a clean exit leaves its lease behind"


HOLD_LEASE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import optuna
    from tuner.trials.lock import StudyLock
    study = optuna.load_study(study_name="s", storage=sys.argv[2])
    with StudyLock(Path(sys.argv[1]), "s", heartbeat=0.2, settle=0.01) as lock:
        lock.lease(study)
        print("held", flush=True)
        time.sleep(60)
    """
)


def test_a_live_holder_in_another_folder_is_refused_and_a_killed_one_taken_over_at_once(tmp_path: Path) -> None:
    """Same machine, another runs/ folder (so another flock): only the study's lease can refuse.
    The holder's pid is checked, so its kill -9 frees the study without waiting for staleness."""
    storage = f"sqlite:///{tmp_path}/s.db"
    study = optuna.create_study(study_name="s", storage=storage)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LEASE, str(tmp_path / "a" / "run.lock"), storage], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with StudyLock(tmp_path / "b" / "run.lock", "s", settle=0.01) as lock, pytest.raises(StudyLocked) as refused:
            lock.lease(study)
        assert str(refused.value).startswith(f"study 's' is being run by pid {holder.pid} on ")
        assert f"folder {tmp_path / 'a'}" in str(refused.value)
        holder.kill()
        holder.wait(5)
        began = time.monotonic()
        with StudyLock(tmp_path / "b" / "run.lock", "s", settle=0.01) as lock:
            lock.lease(study)
            assert _lease(study)["pid"] == os.getpid()
        assert time.monotonic() - began < 5, "a dead holder on this machine was waited out like a stale one"
    finally:
        holder.kill()
        holder.wait()


def test_a_recycled_pid_is_no_holder(tmp_path: Path) -> None:
    """The lease names this very process's pid but another start time: a reused pid, not the holder."""
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db")
    with StudyLock(tmp_path / "x.lock", "s", settle=0.01) as mine:
        stale = {**mine.holder, "token": "old", "start_ticks": (mine.holder["start_ticks"] or 0) - 1, "beat": time.time()}
    write_lease(study, stale)
    with StudyLock(tmp_path / "y.lock", "s", settle=0.01) as lock:
        lock.lease(study)


def test_a_holder_whose_lease_was_taken_stops(tmp_path: Path) -> None:
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db")
    lost: list[str] = []
    with StudyLock(tmp_path / "a.lock", "s", heartbeat=0.05, settle=0.01, on_lost=lost.append) as lock:
        lock.lease(study)
        write_lease(study, _foreign())  # another host took it over while this one stalled
        deadline = time.monotonic() + 5
        while not lost and time.monotonic() < deadline:
            time.sleep(0.05)
    assert lost and "taken over by pid 7 on node-b" in lost[0]
    assert _lease(study)["token"] == "t-b", "the run that lost the study cleared the new holder's lease"


def _lease(study: optuna.Study) -> dict | None:
    found = read_lease(study)
    return dict(found) if found is not None else None


@pytest.mark.integration
def test_a_study_on_postgresql_is_shared_by_two_drivers_and_locked_across_machines(
    postgres: str, tmp_path: Path, llama_server: Path, smollm2: Path
) -> None:
    """Two drivers (two machines: each its own runs/ and lock file) on one study in a real
    PostgreSQL: while one runs, the other is refused by the lease in the storage, naming it;
    afterwards the second sees the first's trial and the budget counts it."""
    from tests.conftest import tiny_space
    from tuner import objectives
    from tuner.app.prepare import validate
    from tuner.base.artifacts import RunDir
    from tuner.launching.executors import InlineExecutor
    from tuner.orchestration.driver import Driver
    from tuner.trials.study import open_study

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
        lock.holder.update(host=host, machine=host)  # the second driver runs on another machine
        machines[host] = (run_dir, lock)
    (dir_a, lock_a), (dir_b, lock_b) = machines.values()
    with lock_a:
        study_a = open_study(space, objective, name="shared", storage=postgres, source="shared.yaml")
        lock_a.lease(study_a)
        with lock_b:  # its own flock (another machine's file): only the storage can refuse it
            study_b = open_study(space, objective, name="shared", storage=postgres, source="shared.yaml")
            with pytest.raises(StudyLocked, match=r"pid \d+ on node-a since .*heartbeat in the study storage"):
                lock_b.lease(study_b)
        Driver(space, study_a, objective, dir_a, InlineExecutor(), trials=1).run()
    with lock_b:
        study_b = open_study(space, objective, name="shared", storage=postgres, source="shared.yaml")
        lock_b.lease(study_b)
        assert [t.state.name for t in study_b.get_trials()] == [
            "COMPLETE",
            "WAITING",
        ]  # node-a's trial and the queue, seen from node-b
        Driver(space, study_b, objective, dir_b, InlineExecutor(), trials=2).run()
    trials = optuna.load_study(study_name="shared", storage=postgres).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"] and [t.params for t in trials] == [
        {"parallel": 1},
        {"parallel": 2},
    ]
    assert (dir_a.trial(0) / "outcome.json").is_file() and (dir_b.trial(1) / "outcome.json").is_file()


def _unshare_uts() -> list[str] | None:
    """argv prefix that runs a command under another hostname (a new UTS namespace), or None."""
    probe = subprocess.run(["unshare", "--uts", "sh", "-c", "hostname tuner-other && hostname"], capture_output=True, text=True)
    if probe.returncode != 0 or probe.stdout.strip() != "tuner-other":
        return None
    return ["unshare", "--uts", "sh", "-c", 'hostname tuner-other && exec "$@"', "sh"]


@pytest.mark.integration
@pytest.mark.parametrize("where", ["sqlite", "postgresql"])
def test_a_second_driver_from_another_folder_is_refused_and_the_first_finishes_unharmed(
    where: str, tmp_path: Path, llama_server: Path, smollm2: Path, request: pytest.FixtureRequest
) -> None:
    """README's second driver: `tune run` from another folder on the same study storage while the
    first runs, from this host and then under another hostname (a container on the same machine).
    Each is refused in one line naming the first; the first's trials all finish, none FAIL, its
    server untouched."""
    import yaml

    from tests.conftest import tiny_space

    storage = f"sqlite:///{tmp_path}/two-drivers.db" if where == "sqlite" else request.getfixturevalue("postgres")
    other_host = _unshare_uts()
    if other_host is None:
        warnings.warn("unshare --uts is not available (needs root): the second driver ran under this hostname only", stacklevel=1)
    study_name = f"two-drivers-{where}"
    raw = tiny_space(name=study_name)
    raw["parameters"] = {"parallel": {"type": "int", "low": 1, "high": 2}}
    raw["enqueue"] = [{"parallel": 1}, {"parallel": 2}]
    raw["probes"]["load"].update(duration=4, max_duration=4)
    raw["budget"] = {"trials": 2}
    space = tmp_path / "two-drivers.yaml"
    space.write_text(yaml.safe_dump(raw))
    argv = [
        sys.executable,
        "-m",
        "tuner",
        "run",
        "--space",
        str(space),
        "--study",
        study_name,
        "--storage",
        storage,
        "--no-remeasure",
    ]
    for folder in "abc":
        (tmp_path / folder).mkdir()
    seconds: list[tuple[list[str], subprocess.Popen[str]]] = []
    first = subprocess.Popen(
        argv, cwd=tmp_path / "a", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                running = optuna.load_study(study_name=study_name, storage=connect(storage)).get_trials(
                    states=(optuna.trial.TrialState.RUNNING,)
                )
            except KeyError:  # not created yet
                running = []
            if any("partition" in t.user_attrs for t in running):
                break
            assert first.poll() is None, first.communicate()[0]
            time.sleep(0.2)
        else:
            raise AssertionError("the first driver launched no trial within 120 s")
        # both second drivers at once, each from its own folder: one after the other, on a busy
        # machine the first driver once finished its trials before the second was even refused
        for prefix, folder in zip(([], *([other_host] if other_host else [])), (tmp_path / "b", tmp_path / "c"), strict=False):
            pipe = subprocess.PIPE
            second = subprocess.Popen(prefix + argv, cwd=folder, stdout=pipe, stderr=pipe, text=True, start_new_session=True)
            seconds.append((prefix, second))
        for prefix, second in seconds:
            stdout, stderr = second.communicate(timeout=120)
            lines = stderr.strip().splitlines()
            assert second.returncode == 1 and len(lines) == 1, (prefix, stdout + stderr)
            assert lines[0].startswith(f"error: study '{study_name}' is being run by pid {first.pid} on "), lines
        assert first.poll() is None, "the first driver ended before the second was refused: the test proves nothing"
        out, _ = first.communicate(timeout=180)
        assert first.returncode == 0, out
    finally:
        for process in (first, *(second for _, second in seconds)):
            if process.poll() is None:  # a second driver not refused runs trials too: its whole session
                os.killpg(process.pid, 9)
                process.wait()
    trials = optuna.load_study(study_name=study_name, storage=storage).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"], [(t.state.name, t.user_attrs.get("error")) for t in trials]
    for folder in "bc":
        assert not (tmp_path / folder / "runs" / study_name / "trials").exists(), "a refused driver started trials"


def test_running_trials_of_a_gone_driver_are_shown_stale(tmp_path: Path) -> None:
    from tuner.trials.lock import stale_running

    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db")
    study.ask()
    assert stale_running(study).startswith("stale: trial(s) 0 show RUNNING but their driver is gone (no driver holds the study)")
    with StudyLock(tmp_path / "a.lock", "s", settle=0.01) as lock:
        lock.lease(study)
        assert stale_running(study) == ""  # a live holder: its trials really run
    write_lease(study, _foreign(beat=time.time() - 300))
    assert "pid 7 on node-b" in stale_running(study) and "last heartbeat 300s ago" in stale_running(study)
