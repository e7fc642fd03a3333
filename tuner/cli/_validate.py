"""`tune validate`: re-run the top configs on fresh servers; the pick then uses mean values.
With ``--confirm``: run the pick once, long, at its SLO answer instead (tuner.orchestration.confirm)."""

from __future__ import annotations

import time

import optuna
import typer

from tuner.app.read import open_existing, stored_objective_set, stored_space
from tuner.base.artifacts import RunDir
from tuner.base.exceptions import ConfigError
from tuner.base.units import format_duration, parse_duration
from tuner.cli._common import echo
from tuner.launching.executors import InlineExecutor
from tuner.objectives import ObjectiveSet
from tuner.orchestration.confirm import STOP_S, Confirmation, answer_of, time_needed
from tuner.orchestration.confirm import confirm as confirm_pick
from tuner.orchestration.validate import Revalidation, revalidate
from tuner.results.confirmation import describe as describe_confirmation
from tuner.results.confirmation import describe_answer, other_host
from tuner.results.pick import objective_metrics, pick
from tuner.space import SearchSpace
from tuner.trials import StudyRecord, record_of
from tuner.trials.lock import StudyLock


def validate(
    study: str = typer.Option(..., "--study", help="study name"),
    storage: str = typer.Option(None, "--storage", help="Optuna storage URL (default: runs/<study>/study.db)"),
    top: int = typer.Option(3, "--top", min=1, help="how many of the best configs"),
    repeats: int = typer.Option(2, "--repeats", min=1, help="fresh servers per config"),
    confirm: bool = typer.Option(False, "--confirm", help="run the pick long at its SLO answer on a fresh server instead"),
    seconds: str = typer.Option("10m", "--seconds", help="with --confirm: how long (default 10m, MLPerf's minimum run)"),
    how: str = typer.Option("knee", "--pick", help="with --confirm: which pick (knee, max-throughput, max-context, ...)"),
    steps: int = typer.Option(
        3, "--steps", min=0, help="with --confirm: a run that does not hold steps down 10 %, this often at most"
    ),
    resume: bool = typer.Option(
        False, "--resume", help="with --confirm: go on from the stored confirmation's runs, a step below its last (cut short)"
    ),
    timeout: str = typer.Option(
        None,
        "--timeout",
        help="with --confirm: the time this command has (a device call, a window): a run that cannot end in it is "
        "not started (before its server starts where even the least it needs is more, else once the server is up), "
        "and the steps down fit in what is left",
    ),
) -> None:
    """Re-run the top configs on fresh servers; store mean and spread on the study."""
    the_study = open_existing(study, storage)
    record = record_of(the_study)  # read once; the runs write through tuner.trials
    objective = stored_objective_set(record)
    with StudyLock(RunDir.for_study(the_study.study_name).root / "run.lock", the_study.study_name) as lock:
        lock.lease(the_study)
        if confirm:
            found = run_confirmation(
                the_study, record, stored_space(record), seconds=_seconds(seconds), how=how, steps=steps, resume=resume,
                timeout=_seconds(timeout, "--timeout") if timeout is not None else None,
            )  # fmt: skip
            for line in describe_confirmation(found.to_dict(), found.trial):
                echo(line)
            searched = record.trial(found.trial)
            if (moved := other_host(searched.host if searched else None, found.to_dict(), found.trial)) is not None:
                echo(f"warning: {moved}")
            return
        results = _revalidate(the_study, stored_space(record), objective, top, repeats)
    echo("")
    names = objective_metrics(record)
    for res in results:
        if not res.runs:
            echo(f"trial {res.trial}: every re-run failed: {res.failures[0]}")
            continue
        spread = res.spread or (None,) * len(names)
        parts = [
            f"{name} {orig:,.1f} -> mean {mean:,.1f} over {len(res.all_runs)} runs (spread {s:.1%}, change {change:+.1%})"
            for name, orig, mean, s, change in zip(names, res.original, res.mean, spread, res.change, strict=True)
        ]
        failed = f"; {len(res.failures)} failed re-run(s)" if res.failures else ""
        echo(f"trial {res.trial}: " + "; ".join(parts) + failed)
    chosen = pick(the_study, "knee")  # read again: the re-runs just written
    echo(f"\npick (knee): {chosen.describe(names)}")


def _revalidate(study: optuna.Study, space: SearchSpace, objective: ObjectiveSet, top: int, repeats: int) -> list[Revalidation]:
    return revalidate(
        study,
        space,
        objective,
        RunDir.for_study(study.study_name),
        InlineExecutor(),
        top=top,
        repeats=repeats,
        on_run=lambda label, r, text: echo(f"{label} run {r + 1}/{repeats}: {text}"),
    )


def _seconds(text: str, option: str = "--seconds") -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ConfigError(f"{option}: {exc}") from None


def run_confirmation(
    study: optuna.Study,
    record: StudyRecord,
    space: SearchSpace,
    *,
    seconds: float,
    how: str,
    steps: int = 3,
    resume: bool = False,
    timeout: float | None = None,
) -> Confirmation:
    """The pick (of ``record``, the study as read) at its SLO answer for ``seconds`` on a fresh
    server, run here (inline), stepping down at most ``steps`` times where it does not hold
    (``resume``: from the stored runs on); what it finds is written to ``study``. ``timeout``: the
    seconds this has: a run that cannot end in them is refused, before the server starts where
    even the least it needs is more (:func:`time_needed`), else once the server is up, by its
    measured start (the first run, and each step)."""
    chosen = pick(record, how)
    answer = answer_of(space, chosen.trial)
    until = None
    if timeout is not None:
        need, reckoned = time_needed(space, chosen.trial, seconds)
        if need > timeout:
            raise ConfigError(
                f"--timeout {format_duration(timeout)}: a {format_duration(seconds)} run of trial {chosen.number} needs at "
                f"least {format_duration(need)} ({reckoned}): give it more time, or --seconds less"
            )
        until = time.time() + timeout - STOP_S  # each run, the first included, only where it ends before it
    go_on = " from the stored runs, a step below the last" if resume else ""
    echo(f"confirm: trial {chosen.number} at {describe_answer(answer)}{go_on} for {format_duration(seconds)} on a fresh server")
    return confirm_pick(
        study, space, RunDir.for_study(study.study_name), InlineExecutor(), chosen,
        seconds=seconds, steps=steps, resume=resume, until=until,
    )  # fmt: skip
