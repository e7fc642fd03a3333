"""The study loop. Only this process talks to Optuna (ask/tell); trials run in an executor.

:func:`record` judges a trial's outcome or exception into a :class:`tuner.trials.Verdict`;
:func:`tuner.trials.tell`, the one caller of ``study.tell``, records it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.base.artifacts import RunDir, write_json
from tuner.base.evidence import Evidence
from tuner.base.exceptions import InfrastructureError, ScreenedOut, TrialTimeout, TunerError
from tuner.base.records import TrialOutcome
from tuner.host.devices import GpuHygiene
from tuner.host.ledger import Ledger
from tuner.host.partitions import Partition
from tuner.launching.executors import Executor
from tuner.launching.scheduler import Job, Scheduler
from tuner.objectives import Evaluation, ObjectiveSet
from tuner.orchestration.deadline import Deadline
from tuner.results.screen import Screen
from tuner.results.table import write_trials_csv
from tuner.space import SearchSpace, suggest, violated_constraints
from tuner.trials import TrialRecord, Verdict, enqueue, mark_launched, read_trials, requeue, running_trial, tell

__all__ = ["PAUSED", "Driver", "TrialReport", "fail_interrupted", "record", "stop_orphans"]

logger = logging.getLogger(__name__)

MAX_INVALID_IN_A_ROW = 200
MAX_WAITING = 2  # asked trials waiting for a partition: the first in line and one that may pass it
PAUSED = "paused"


@dataclass
class _Waiting:
    """An asked trial whose partition is not free yet; ``overtaken``: trials launched before it since."""

    trial: optuna.Trial
    params: dict[str, Any]
    overtaken: int = 0


@dataclass(frozen=True)
class TrialReport:
    """A progress event: one trial finished (the CLI prints these)."""

    number: int
    done: int
    total: int
    params: dict[str, Any]
    state: str
    summary: str
    values: tuple[float, ...] | None
    wall_s: float
    elapsed_s: float
    eta_s: float | None
    names: tuple[str, ...] = ()  # the objectives' metric names, in the order of ``values``


@dataclass
class RunSummary:
    launched: int = 0
    states: dict[str, int] = field(default_factory=dict)
    stop_reason: str = ""
    wall_s: float = 0.0


def record(
    study: optuna.Study,
    trial: optuna.Trial,
    run_dir: RunDir,
    objective: ObjectiveSet,
    *,
    outcome: TrialOutcome | None = None,
    error: BaseException | None = None,
    screened: str | None = None,
) -> tuple[TrialState, str, Evaluation | None]:
    """Tell Optuna how ``trial`` ended (the objective set judges what it measured), keeping the
    evidence on the trial and on disk."""
    evaluation = None
    if error is None and outcome is not None:
        try:
            evaluation = objective.evaluate(outcome)
        except KeyError as exc:
            error = exc
    if evaluation is not None:
        constraints = {str(c): v for c, v in zip(objective.constraints, evaluation.violations, strict=True)}
        verdict = Verdict.of(outcome, values=evaluation.values, constraints=constraints, screened=screened)
    else:
        verdict = Verdict.of(outcome, error, screened=screened)
        evidence = getattr(error, "evidence", None)
        if evidence is not None:
            write_json(run_dir.trial(trial.number) / "evidence.json", evidence.to_dict())
    tell(study, trial, verdict, run_dir=run_dir)
    if verdict.state == TrialState.COMPLETE and evaluation is not None:
        return verdict.state, "ok" if evaluation.feasible else f"violates {', '.join(evaluation.violated)}", evaluation
    return verdict.state, str(verdict.attrs.get("error", "")), None


def stop_orphans(ledger: Ledger) -> list[str]:
    """Servers (and a local Ray cluster's processes) still alive from the ledger are stopped."""
    return [
        f"stopped orphaned processes {', '.join(map(str, pids))} (group {e.pgid}, {e.argv0}) of {e.trial_dir}"
        for e, pids in ledger.stop_orphans()
    ]


def fail_interrupted(
    study: optuna.Study, run_dir: RunDir | None = None, leftovers: dict[int, dict[str, bytes]] | None = None
) -> list[str]:
    """Trials left RUNNING by a dead driver are recorded as FAIL (infrastructure), their params
    re-queued once, and the files they left (here, or on a cluster node: ``leftovers``) written into
    ``run_dir`` and kept in the study's artifact store first. Called only by the study's lease
    holder: a RUNNING trial then has no live driver."""
    from tuner.launching.executors import write_back

    notes = []
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        trial = running_trial(study, frozen)
        if run_dir is not None and (files := (leftovers or {}).get(frozen.number)):
            write_back(run_dir.trial(frozen.number), files)
        ran = bool(TrialRecord.of(frozen).partition)  # else it was asked and waited for its partition
        error = "interrupted: the tuner stopped while this trial ran" if ran else "asked but never launched: the tuner stopped"
        tell(study, trial, Verdict.stopped(error), run_dir=run_dir)
        note = f"trial {frozen.number} was {'interrupted' if ran else 'asked, never launched'}: recorded as FAIL"
        if requeue(study, frozen):
            note += ", params re-queued"
        notes.append(note)
    return notes


class Driver:
    """Runs a study: ask, launch on a free partition, tell, until the budget or time is spent.
    (Recovery from a crashed run, :func:`stop_orphans` then :func:`fail_interrupted`, is the
    caller's, once it holds the study.)"""

    def __init__(
        self,
        space: SearchSpace,
        study: optuna.Study,
        objective: ObjectiveSet,
        run_dir: RunDir,
        executor: Executor,
        *,
        trials: int,
        timeout: float | None = None,
        deadline: Deadline | None = None,
        trial_timeout: float | None = None,
        on_trial: Callable[[TrialReport], None] | None = None,
        on_tick: Callable[[list[tuple[int, Partition, Path]]], None] | None = None,
        ledger: Ledger | None = None,
        hygiene: GpuHygiene | None = None,
        screen: Screen | None = None,
        write_csv: bool = True,
    ) -> None:
        self.space = space
        self.study = study
        self.objective = objective
        self.run_dir = run_dir
        self.executor = executor
        self.trials = trials
        self.timeout = timeout
        self.deadline = deadline  # the whole run's bound: launch only what fits (tuner.orchestration.deadline)
        self.trial_timeout = trial_timeout
        self.on_trial = on_trial or (lambda report: None)
        self.on_tick = on_tick  # every TICK_S while trials run: (number, partition, trial dir) of each
        self._ticked = 0.0
        self.ledger = ledger or Ledger(run_dir.root / "servers")
        # launches, partitions, GPU hygiene, the per-trial limit and stops: shared with the re-measurements
        self.scheduler = Scheduler(space, executor, self.ledger, hygiene=hygiene, time_limit=trial_timeout)
        self.screen = screen
        self.write_csv = write_csv
        self._began = 0.0
        self._pause_at: int | None = None
        self._durations: list[float] = []

    @property
    def stop_requested(self) -> bool:
        return bool(self._stop_requested)

    @property
    def _stop_requested(self) -> str:
        """Why the run stops, if it was asked to: the scheduler holds it (one stop state)."""
        return self.scheduler.stop_reason

    def request_stop(self, reason: str) -> None:
        """Stop dispatching; running trials are stopped and recorded (safe from a signal handler).
        A re-measurement running on this driver's scheduler stops too."""
        self.scheduler.request_stop(reason)

    def finished(self) -> int:
        """Trials that count toward the budget: launched and finished (not invalid combinations,
        not configs the pre-screen skipped). Asked several times per loop turn: the trials only,
        not the study's attrs (:func:`~tuner.trials.read_trials` reads those too)."""
        return sum(TrialRecord.of(t).finished for t in self.study.get_trials(deepcopy=False))

    @property
    def refusals(self) -> list[str]:
        """Partitions refused because some process held their GPUs before a trial."""
        return self.scheduler.refusals

    @property
    def _running(self) -> dict[Future[TrialOutcome], Job]:
        return self.scheduler.running

    def in_flight(self) -> list[Job]:
        """The jobs launched and not yet finished."""
        return list(self.scheduler.running.values())

    def _tick(self) -> None:
        if self.on_tick is None or not self._running or time.monotonic() - self._ticked < TICK_S:
            return
        self._ticked = time.monotonic()
        self.on_tick(_tick_rows(self))

    def run(self, *, pause_at: int | None = None) -> RunSummary:
        """Run until the budget, the timeout or a stop; with ``pause_at``, return once that many
        trials have finished (nothing left running: e.g. to re-measure the reference), to be
        called again. Timeout and ETA count from the first call."""
        self._began = self._began or time.monotonic()
        self._pause_at = pause_at
        began = time.monotonic()
        summary = RunSummary()
        waiting: list[_Waiting] = []  # asked, not launched yet: no partition of their size was free
        invalid_in_a_row = 0
        try:
            while True:
                stop = self._stop_reason(len(self._running))
                while not stop and len(self._running) < self.executor.max_parallel:
                    if self._launch_waiting(waiting):
                        summary.launched += 1
                        stop = self._stop_reason(len(self._running))
                        continue
                    full = len(waiting) >= MAX_WAITING or (waiting and not self._may_overtake(waiting))
                    if full or self._stop_reason(len(self._running) + len(waiting)):
                        break  # wait for a partition to free
                    trial, params = self._ask_valid()
                    if trial is None:
                        invalid_in_a_row += 1
                        if invalid_in_a_row >= MAX_INVALID_IN_A_ROW:
                            stop = (
                                f"{MAX_INVALID_IN_A_ROW} proposals in a row were not launched (constraint breaks, "
                                "repeats, predicted failures): the space looks exhausted"
                            )
                        continue
                    invalid_in_a_row = 0
                    waiting.append(_Waiting(trial, params))
                if not self._running:
                    summary.stop_reason = stop or "; ".join(self.refusals) or "nothing left to run"
                    break
                for future, job in self.scheduler.wait(timeout=0.5):  # and stops a trial past its limit
                    self._finish(future, job, summary)
                self._tick()
                if self._stop_requested:
                    summary.stop_reason = self._stop_requested
                    self._stop_running(summary)
                    break
        except BaseException as exc:
            told = self._abandon(f"interrupted: {type(exc).__name__}")
            waiting[:] = [w for w in waiting if w.trial.number not in told]  # one whose launch it ended is recorded
            raise
        finally:
            for never in waiting:
                tell(self.study, never.trial, Verdict.stopped("asked but never launched: the run stopped"))
            summary.wall_s = time.monotonic() - began
            if self.write_csv:
                write_trials_csv(self.study, self.run_dir.trials_csv)
        return summary

    def _launch_waiting(self, waiting: list[_Waiting]) -> bool:
        """Launch the first waiting trial whose partition is free, in the order they were asked;
        the ones it passes count it. A first in line that may not be passed again is the only one tried."""
        for i, entry in enumerate(waiting if self._may_overtake(waiting) else waiting[:1]):
            if self._launch(entry.trial, entry.params):
                for passed in waiting[:i]:
                    passed.overtaken += 1
                    size = self.scheduler.size(passed.params)
                    logger.info(
                        "trial %d launched before trial %d, which waits for %d devices",
                        entry.trial.number,
                        passed.trial.number,
                        size,
                    )
                del waiting[i]
                return True
        return False

    def _may_overtake(self, waiting: list[_Waiting]) -> bool:
        """Whether a trial asked later may start before the first in line, which waits for a
        larger partition (tp 2 while a tp-1 trial holds one of the two GPUs). Without it a free GPU
        sits idle for a whole trial; with no bound the large trial could wait all night. Each
        trial may be passed ``max_parallel - 1`` times (at most one trial per other partition)."""
        return bool(waiting) and waiting[0].overtaken < self.executor.max_parallel - 1

    def _launch(self, trial: optuna.Trial, params: dict[str, Any]) -> bool:
        def launched(partition: Partition) -> None:
            mark_launched(trial, partition.devices)

        limit = None
        if self.deadline is not None:  # a trial runs no longer than the deadline leaves it
            limit = (self.deadline.trial_limit(self.finished() + len(self._running)), "what budget.deadline left it")
        trial_dir = self.run_dir.trial(trial.number)
        return self.scheduler.launch(trial, params, trial_dir, on_partition=launched, limit=limit) is not None

    def _stop_reason(self, in_flight: int) -> str:
        if self._stop_requested:
            return self._stop_requested
        done = self.finished() + in_flight  # one read of the study's trials per check
        if done >= self.trials:
            return f"budget of {self.trials} trials reached"
        if self._pause_at is not None and done >= self._pause_at:
            return PAUSED
        if self.timeout is not None and time.monotonic() - self._began >= self.timeout:
            return f"timeout of {self.timeout:.0f}s reached"
        if self.deadline is not None and not self.deadline.room_for_trial(done):
            return self.deadline.why_no_room()
        return ""

    def _ask_valid(self) -> tuple[optuna.Trial | None, dict[str, Any]]:
        """Ask for a trial; one that breaks a constraint is pruned at once, never launched."""
        self._requeue_contradicted()
        trial = self.study.ask()
        params = suggest(trial, self.space)
        broken = violated_constraints(self.space, params)
        if not broken:
            if self._repeat(trial, params) or self._screened(trial, params):
                return None, params
            return trial, params
        reason = "; ".join(c.text for c in broken)
        violations = {c.text: c.violation(self.space.values(params)) or 1.0 for c in broken}
        tell(self.study, trial, Verdict.invalid(reason, violations))
        logger.info("trial %d not launched: breaks %s", trial.number, reason)
        return None, params

    def _repeat(self, trial: optuna.Trial, params: dict[str, Any]) -> bool:
        """A config this study already launched is not launched again: its result is copied."""
        for done in read_trials(self.study, states=(TrialState.COMPLETE, TrialState.PRUNED)):
            if done.params == trial.params and done.launched:
                break
        else:
            return False
        tell(self.study, trial, Verdict.copy_of(done))
        logger.info("trial %d not launched: same config as trial %d", trial.number, done.number)
        return True

    def _screened(self, trial: optuna.Trial, params: dict[str, Any]) -> bool:
        """Skip a launch the study's own history says cannot start; record why (PRUNED)."""
        if self.screen is None:
            return False
        prediction = self.screen.predict(self.space.values(params))  # fitted by _requeue_contradicted, before this ask
        if prediction is None:
            return False
        evidence = Evidence(
            argv=(),
            elapsed_s=0.0,
            signature=f"screened:{prediction.signature}",
            reason=prediction.reason,
            details={"predicted": prediction.signature, **prediction.numbers},
        )
        record(
            self.study,
            trial,
            self.run_dir,
            self.objective,
            error=ScreenedOut(prediction.reason, evidence=evidence),
            screened=prediction.signature,
        )
        logger.info("trial %d not launched: predicted %s (%s)", trial.number, prediction.signature, prediction.reason)
        return True

    def _requeue_contradicted(self) -> None:
        """Re-propose, once, the configs skipped on the word of a failure that a later start
        contradicted (the sampler was told they cannot start; it was wrong). Fits the screen to
        the study once per ask: nothing it reads changes before :meth:`_screened` predicts."""
        if self.screen is None:
            return
        trials = read_trials(self.study)
        self.screen.fit(trials, self.space.values)
        wrong = self.screen.contradicted()
        if not wrong:
            return
        done = {t.rescreen_of for t in trials}
        for t in trials:
            source = t.skipped_on
            if source in wrong and t.number not in done:
                enqueue(self.study, t.params, rescreen_of=t.number)
                logger.warning(
                    "trial %d's config re-proposed: it was skipped on the word of trial %d, which trial %d contradicts "
                    "(it started with no more memory)",
                    t.number,
                    source,
                    wrong[source],
                )

    def _stop_running(self, summary: RunSummary, grace: float = 20.0) -> None:
        """Ask running trials to stop (their own teardown runs), then force, then sweep the ledger."""
        for job in self.scheduler.stop(grace).values():
            # A trial that finished before it was stopped (its worker wrote a complete outcome.json,
            # e.g. one that ignored the soft cancel) is recorded as what it measured.
            outcome = _written_outcome(job.trial_dir)
            if outcome is not None:
                record(self.study, job.key, self.run_dir, self.objective, outcome=outcome)
                logger.info("trial %d finished before the stop: recorded from its outcome.json", job.key.number)
            else:
                self._interrupted(job.key, f"interrupted: {summary.stop_reason}")

    def _abandon(self, why: str) -> set[int]:
        """An exception left the loop: every trial in flight, and the one being launched (an inline
        trial that a SIGTERM's SystemExit ended), is recorded as interrupted; their numbers."""
        jobs = self.scheduler.abandon()
        for job in jobs:
            self._interrupted(job.key, why)
        return {job.key.number for job in jobs}

    def _interrupted(self, trial: optuna.Trial, why: str) -> None:
        record(self.study, trial, self.run_dir, self.objective, error=InfrastructureError(why))
        if requeue(self.study, trial):
            logger.info("trial %d was interrupted: its params are queued for the next run", trial.number)

    def _finish(self, future: Future[TrialOutcome], job: Job, summary: RunSummary) -> None:
        trial: optuna.Trial = job.key
        error = future.exception()
        cut = job.timed_out and bool(job.limit_from)  # the run's deadline, not the config, ended it
        if cut:
            error = InfrastructureError(f"stopped after {job.limit or 0:.0f}s, {job.limit_from}")
        elif job.timed_out:
            error = TrialTimeout(
                f"trial outran its {self.trial_timeout:.0f}s limit",
                evidence=Evidence(argv=_argv(job.trial_dir), elapsed_s=time.monotonic() - job.began, signature="trial_timeout"),
            )
        outcome = None if error is not None else future.result()
        if error is not None and not isinstance(error, TunerError):
            logger.error("trial %d: unexpected %s", trial.number, error, exc_info=error)
        state, text, evaluation = record(self.study, trial, self.run_dir, self.objective, outcome=outcome, error=error)
        if cut and requeue(self.study, trial):
            logger.info("trial %d was stopped at the run's deadline: its params are queued for the next run", trial.number)
        wall = time.monotonic() - job.began
        self._durations.append(wall)
        if self.deadline is not None:
            self.deadline.observe(wall)
        summary.states[state.name] = summary.states.get(state.name, 0) + 1
        done = self.finished()
        remaining = max(0, self.trials - done)
        mean = sum(self._durations) / len(self._durations)
        self.on_trial(
            TrialReport(
                number=trial.number,
                done=done,
                total=self.trials,
                params=dict(trial.params),
                state=state.name,
                summary=text,
                values=evaluation.values if evaluation else None,
                wall_s=wall,
                elapsed_s=time.monotonic() - self._began,
                eta_s=mean * remaining / max(1, self.executor.max_parallel),
                names=tuple(self.objective.metric_names),
            )
        )
        if self.write_csv:
            write_trials_csv(self.study, self.run_dir.trials_csv)


TICK_S = 2.0


def _tick_rows(driver: Driver) -> list[tuple[int, Partition, Path]]:
    return [(job.key.number, job.partition, job.trial_dir) for job in driver.in_flight()]


def _written_outcome(trial_dir: Path) -> TrialOutcome | None:
    """The outcome a worker wrote (atomically, after its server was torn down), if any."""
    try:
        return TrialOutcome.from_dict(json.loads((trial_dir / "outcome.json").read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _argv(trial_dir: Any) -> tuple[str, ...]:
    try:
        return ((trial_dir / "command.txt").read_text().strip(),)
    except OSError:
        return ()
