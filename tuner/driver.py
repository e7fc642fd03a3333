"""The study loop. Only this process talks to Optuna (ask/tell); trials run in an executor.

:func:`record` is the one place where a trial's outcome or exception becomes a trial state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.artifacts import RunDir, write_json
from tuner.exceptions import ConfigInfeasible, InfrastructureError, TunerError
from tuner.executors import Executor
from tuner.objectives import Evaluation, ObjectiveSet
from tuner.records import TrialOutcome
from tuner.space import SearchSpace, suggest, violated_constraints
from tuner.table import write_trials_csv

__all__ = ["Driver", "TrialReport", "record", "state_for"]

logger = logging.getLogger(__name__)

STARTS = "server starts"
MAX_INVALID_IN_A_ROW = 200


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


@dataclass
class RunSummary:
    launched: int = 0
    states: dict[str, int] = field(default_factory=dict)
    stop_reason: str = ""
    wall_s: float = 0.0


def state_for(error: BaseException | None) -> TrialState:
    """Outcome -> Optuna state. A config that cannot start is data for the sampler (PRUNED:
    TPE learns from it); a fault of the machinery or the probes is FAIL (ignored, retried)."""
    if error is None:
        return TrialState.COMPLETE
    if isinstance(error, ConfigInfeasible):
        return TrialState.PRUNED
    return TrialState.FAIL


def record(
    study: optuna.Study,
    trial: optuna.Trial,
    run_dir: RunDir,
    objective: ObjectiveSet,
    *,
    outcome: TrialOutcome | None = None,
    error: BaseException | None = None,
) -> tuple[TrialState, str, Evaluation | None]:
    """Tell Optuna how ``trial`` ended, keeping the evidence on the trial and on disk."""
    evaluation = None
    if error is None and outcome is not None:
        try:
            evaluation = objective.evaluate(outcome)
        except KeyError as exc:
            error = exc
    state = state_for(error)
    trial_dir = run_dir.trial(trial.number)
    if outcome is not None:
        trial.set_user_attr("metrics", outcome.metrics())
        trial.set_user_attr("capacity", outcome.capacity.to_dict())
        trial.set_user_attr("timings", outcome.timings.__dict__)
    if state == TrialState.COMPLETE and evaluation is not None:
        for constraint, violation in zip(objective.constraints, evaluation.violations, strict=True):
            trial.set_constraint(str(constraint), violation)
        trial.set_constraint(STARTS, 0.0)
        study.tell(trial, list(evaluation.values))
        summary = "ok" if evaluation.feasible else f"violates {', '.join(evaluation.violated)}"
        return state, summary, evaluation
    summary = _describe(error)
    trial.set_user_attr("error", summary)
    evidence = getattr(error, "evidence", None)
    if evidence is not None:
        trial.set_user_attr("signature", evidence.signature)
        trial.set_user_attr("evidence", evidence.to_dict())
        write_json(trial_dir / "evidence.json", evidence.to_dict())
    if state == TrialState.PRUNED:
        trial.set_constraint(STARTS, 1.0)
    study.tell(trial, state=state)
    return state, summary, None


def _describe(error: BaseException | None) -> str:
    evidence = getattr(error, "evidence", None)
    if evidence is not None:
        return evidence.describe()
    return f"{type(error).__name__}: {error}"


class Driver:
    """Runs a study: ask, launch on a free partition, tell, until the budget or time is spent."""

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
        on_trial: Callable[[TrialReport], None] | None = None,
    ) -> None:
        self.space = space
        self.study = study
        self.objective = objective
        self.run_dir = run_dir
        self.executor = executor
        self.trials = trials
        self.timeout = timeout
        self.on_trial = on_trial or (lambda report: None)
        self._began = 0.0
        self._durations: list[float] = []

    def finished(self) -> int:
        """Trials that count toward the budget: launched and finished (not invalid combinations)."""
        return sum(
            1
            for t in self.study.get_trials(deepcopy=False)
            if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and "invalid_combination" not in t.user_attrs
        )

    def run(self) -> RunSummary:
        self._began = time.monotonic()
        summary = RunSummary()
        running: dict[Future[TrialOutcome], tuple[optuna.Trial, Any, float]] = {}
        free = list(self.executor.partitions)
        invalid_in_a_row = 0
        launching: optuna.Trial | None = None
        try:
            while True:
                stop = self._stop_reason(len(running))
                while not stop and free:
                    trial, params = self._ask_valid()
                    if trial is None:
                        invalid_in_a_row += 1
                        if invalid_in_a_row >= MAX_INVALID_IN_A_ROW:
                            stop = f"{MAX_INVALID_IN_A_ROW} proposals in a row broke the space's constraints"
                        continue
                    invalid_in_a_row = 0
                    partition = free.pop(0)
                    launching, began = trial, time.monotonic()
                    future = self.executor.submit(self.space, params, self.run_dir.trial(trial.number), partition)
                    running[future] = (trial, partition, began)
                    launching = None
                    summary.launched += 1
                    stop = self._stop_reason(len(running))
                if not running:
                    summary.stop_reason = stop or "nothing left to run"
                    break
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for future in done:
                    trial, partition, began = running.pop(future)
                    free.append(partition)
                    self._finish(trial, future, began, summary)
        except BaseException as exc:
            unfinished = [t for t, _, _ in running.values()] + ([launching] if launching is not None else [])
            for trial in unfinished:
                error = InfrastructureError(f"interrupted: {type(exc).__name__}")
                record(self.study, trial, self.run_dir, self.objective, error=error)
            raise
        finally:
            summary.wall_s = time.monotonic() - self._began
            write_trials_csv(self.study, self.run_dir.trials_csv)
        return summary

    def _stop_reason(self, in_flight: int) -> str:
        if self.finished() + in_flight >= self.trials:
            return f"budget of {self.trials} trials reached"
        if self.timeout is not None and time.monotonic() - self._began >= self.timeout:
            return f"timeout of {self.timeout:.0f}s reached"
        return ""

    def _ask_valid(self) -> tuple[optuna.Trial | None, dict[str, Any]]:
        """Ask for a trial; one that breaks a constraint is pruned at once, never launched."""
        trial = self.study.ask()
        params = suggest(trial, self.space)
        broken = violated_constraints(self.space, params)
        if not broken:
            return trial, params
        reason = "; ".join(c.text for c in broken)
        trial.set_user_attr("invalid_combination", reason)
        for c in broken:
            trial.set_constraint(c.text, c.violation({**self.space.server.flags, **params}) or 1.0)
        self.study.tell(trial, state=TrialState.PRUNED)
        logger.info("trial %d not launched: breaks %s", trial.number, reason)
        return None, params

    def _finish(self, trial: optuna.Trial, future: Future[TrialOutcome], began: float, summary: RunSummary) -> None:
        error = future.exception()
        outcome = None if error is not None else future.result()
        if error is not None and not isinstance(error, TunerError):
            logger.error("trial %d: unexpected %s", trial.number, error, exc_info=error)
        state, text, evaluation = record(self.study, trial, self.run_dir, self.objective, outcome=outcome, error=error)
        wall = time.monotonic() - began
        self._durations.append(wall)
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
                eta_s=mean * remaining / max(1, len(self.executor.partitions)),
            )
        )
        write_trials_csv(self.study, self.run_dir.trials_csv)
