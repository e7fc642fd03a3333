"""`tune status`: the trials table of a study and its best trials so far."""

from __future__ import annotations

import optuna
import pandas as pd
import typer

from tuner.cli._common import echo, open_existing
from tuner.table import trials_frame


def status(
    study: str = typer.Option(..., "--study", help="study name"),
    storage: str = typer.Option(None, "--storage", help="Optuna storage URL (default: runs/<study>/study.db)"),
) -> None:
    """Show every trial of a study and the best (Pareto-optimal, feasible) ones."""
    print_table(open_existing(study, storage))


def print_table(study: optuna.Study) -> None:
    frame = trials_frame(study)
    if frame.empty:
        echo("no trials yet")
        return
    shown = frame.drop(columns=[c for c in ("probe_s", "duration_s") if c in frame], errors="ignore")
    for column in [c for c in shown.columns if c.startswith("param.")]:
        shown[column] = shown[column].map(lambda v: "" if v is None or v != v else str(v))  # as proposed, unrounded
    shown.columns = [c.removeprefix("param.") for c in shown.columns]
    with pd.option_context("display.max_columns", None, "display.width", 250, "display.max_colwidth", 60):
        echo(shown.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    best = [t.number for t in study.best_trials]
    counts = frame["state"].value_counts().to_dict()
    echo(f"\ntrials by state: {counts}; best (Pareto front, feasible): {best or 'none yet'}")
