"""The re-measurements launch through the search's scheduler: a run past the per-trial limit is
stopped, a stop requested meanwhile (a signal, a lost lease) stops what runs, and a partition whose
GPUs some process holds is refused. The executor here is a fault injector: its runs never end on
their own, which no real engine does on demand."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from tests.conftest import tiny_space
from tuner import objectives
from tuner.app.prepare import validate
from tuner.base.artifacts import RunDir
from tuner.base.exceptions import InfrastructureError
from tuner.host.ledger import Ledger
from tuner.launching.scheduler import Scheduler
from tuner.orchestration.validate import remeasure


class Hang:
    """Runs that end only when cancelled; records how."""

    max_parallel = 2

    def __init__(self) -> None:
        self.cancels: list[bool] = []
        self.submitted: list[Path] = []

    def submit(self, space: Any, params: Any, trial_dir: Path, partition: Any, ledger: Any = None) -> Future:
        self.submitted.append(trial_dir)
        return Future()

    def cancel(self, future: Future, *, force: bool) -> None:
        """A soft cancel lets the run tear its server down (it ends); a forced one ends it at once."""
        self.cancels.append(force)
        if not future.done():
            future.set_exception(InfrastructureError("cancelled"))


def _setup(tmp_path: Path) -> tuple[Any, Any, RunDir, Ledger]:
    raw = tiny_space()
    raw["hardware"] = {"kind": "cpu", "devices": [0, 1], "per_trial": 1}
    space = validate(raw, "t.yaml")
    return space, objectives.load(space.objectives), RunDir(tmp_path / "run"), Ledger(tmp_path / "servers")


def test_a_remeasure_run_past_the_trial_limit_is_stopped_and_recorded(tmp_path: Path) -> None:
    space, objective, run_dir, ledger = _setup(tmp_path)
    executor = Hang()
    scheduler = Scheduler(space, executor, ledger, time_limit=0.2)
    began = time.monotonic()
    state = remeasure(space, objective, run_dir, scheduler, [("a", {"ctx-size": 2048})], repeats=1)
    assert time.monotonic() - began < 10
    assert state["a"].failures == ["outran its 0s limit: stopped"] and not state["a"].values
    assert executor.cancels == [True] and not scheduler.running


def test_a_stop_requested_during_a_remeasure_stops_the_runs_in_flight(tmp_path: Path) -> None:
    space, objective, run_dir, ledger = _setup(tmp_path)
    executor = Hang()
    scheduler = Scheduler(space, executor, ledger)
    threading.Timer(0.3, scheduler.request_stop, args=("stopped by SIGTERM",)).start()
    seen: list[str] = []
    state = remeasure(
        space,
        objective,
        run_dir,
        scheduler,
        [("a", {"ctx-size": 2048}), ("b", {"ctx-size": 4096})],
        repeats=2,
        on_run=lambda label, r, text: seen.append(f"{label}{r}: {text}"),
    )
    assert len(executor.submitted) == 2, "the second round must not start after the stop"
    assert state["a"].failures == state["b"].failures == ["stopped: stopped by SIGTERM"]
    assert sorted(seen) == ["a0: stopped: stopped by SIGTERM", "b0: stopped: stopped by SIGTERM"]
    assert executor.cancels == [False, False], "each run is asked to stop (its own teardown), none needed forcing"
    assert not scheduler.running and scheduler.pool.acquire(2) is not None, "the partitions came back"


class Held:
    available = True

    class Holder:
        def describe(self) -> str:
            return "pid 4242 (python) 8,000 MiB"

    def held(self, devices: Any) -> list[Any]:
        return [self.Holder()]

    def settle(self, devices: Any) -> dict[int, float]:
        return {}


def test_a_remeasure_on_a_held_partition_is_refused_and_says_by_whom(tmp_path: Path) -> None:
    space, objective, run_dir, ledger = _setup(tmp_path)
    executor = Hang()
    scheduler = Scheduler(space, executor, ledger, hygiene=Held())  # type: ignore[arg-type]
    state = remeasure(space, objective, run_dir, scheduler, [("a", {"ctx-size": 2048})], repeats=1)
    assert not executor.submitted
    (failure,) = state["a"].failures
    assert failure.startswith("not launched: ") and "pid 4242 (python) 8,000 MiB" in failure


def test_abandon_hands_back_every_job_in_flight_and_frees_their_partitions(tmp_path: Path) -> None:
    """An exception in the driver's loop: the jobs running and the one being launched come back
    for the driver to record, both partitions are free again, nothing runs."""
    space, _, _, ledger = _setup(tmp_path)
    scheduler = Scheduler(space, Hang(), ledger)
    first = scheduler.launch("a", {"ctx-size": 2048}, tmp_path / "a")
    assert first is not None and scheduler.launch("b", {"ctx-size": 2048}, tmp_path / "b") is not None
    assert scheduler.launch("c", {"ctx-size": 2048}, tmp_path / "c") is None  # both partitions taken
    jobs = scheduler.abandon()
    assert sorted(job.key for job in jobs) == ["a", "b"] and not scheduler.running and scheduler.launching is None
    assert scheduler.launch("c", {"ctx-size": 2048}, tmp_path / "c") is not None  # a partition is free again
