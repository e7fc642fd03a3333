"""`tune validate`: re-run the top configs on fresh servers; the pick then uses mean values."""

from __future__ import annotations

import typer

from tuner.artifacts import RunDir
from tuner.cli._common import echo, open_existing, stored_objective_set, stored_space
from tuner.executors import InlineExecutor
from tuner.lock import StudyLock
from tuner.pick import objective_metrics, pick
from tuner.validate import revalidate


def validate(
    study: str = typer.Option(..., "--study", help="study name"),
    storage: str = typer.Option(None, "--storage", help="Optuna storage URL (default: runs/<study>/study.db)"),
    top: int = typer.Option(3, "--top", min=1, help="how many of the best configs"),
    repeats: int = typer.Option(2, "--repeats", min=1, help="fresh servers per config"),
) -> None:
    """Re-run the top configs on fresh servers; store mean and spread on the study."""
    the_study = open_existing(study, storage)
    objective = stored_objective_set(the_study)
    with StudyLock(RunDir.for_study(the_study.study_name).root / "run.lock", the_study.study_name) as lock:
        lock.lease(the_study)
        results = _revalidate(the_study, objective, top, repeats)
    echo("")
    names = objective_metrics(the_study)
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
    chosen = pick(the_study, "knee")
    echo(f"\npick (knee): {chosen.describe(names)}")


def _revalidate(study, objective, top: int, repeats: int):
    return revalidate(
        study,
        stored_space(study),
        objective,
        RunDir.for_study(study.study_name),
        InlineExecutor(),
        top=top,
        repeats=repeats,
        on_run=lambda label, r, text: echo(f"{label} run {r + 1}/{repeats}: {text}"),
    )
