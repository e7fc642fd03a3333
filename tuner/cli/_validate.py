"""`tune validate`: re-run the top configs on fresh servers; the pick then uses mean values."""

from __future__ import annotations

import typer

from tuner.artifacts import RunDir
from tuner.cli._common import echo, open_existing, stored_space
from tuner.objectives import ObjectiveSet
from tuner.validate import revalidate


def validate(
    study: str = typer.Option(..., "--study", help="study name"),
    storage: str = typer.Option(None, "--storage", help="Optuna storage URL (default: runs/<study>/study.db)"),
    top: int = typer.Option(3, "--top", min=1, help="how many of the best configs"),
    repeats: int = typer.Option(2, "--repeats", min=1, help="fresh servers per config"),
) -> None:
    """Re-run the top configs on fresh servers; store mean and spread on the study."""
    the_study = open_existing(study, storage)
    objective = ObjectiveSet.model_validate(the_study.user_attrs["tuner.objectives"])
    names = the_study.metric_names or objective.metric_names
    results = revalidate(
        the_study,
        stored_space(the_study),
        objective,
        RunDir.for_study(study),
        top=top,
        repeats=repeats,
        on_run=lambda n, r, text: echo(f"trial {n} run {r + 1}/{repeats}: {text}"),
    )
    echo("")
    for res in results:
        if not res.runs:
            echo(f"trial {res.trial}: every re-run failed: {res.failures[0]}")
            continue
        parts = [
            f"{name} {orig:,.1f} -> {mean:,.1f} (spread {spread:.1%}, change {change:+.1%})"
            for name, orig, mean, spread, change in zip(names, res.original, res.mean, res.spread, res.change, strict=True)
        ]
        failed = f"; {len(res.failures)} failed re-run(s)" if res.failures else ""
        echo(f"trial {res.trial}: " + "; ".join(parts) + failed)
