"""`tune status`: the trials table of a study and its best trials so far."""

from __future__ import annotations

import optuna
import pandas as pd
import typer

from tuner.artifacts import RunDir
from tuner.cli._common import echo
from tuner.exceptions import ConfigError
from tuner.table import trials_frame


def status(
    study: str = typer.Option(..., "--study", help="study name"),
    storage: str = typer.Option(None, "--storage", help="Optuna storage URL (default: runs/<study>/study.db)"),
) -> None:
    """Show every trial of a study and the best (Pareto-optimal, feasible) ones."""
    run_dir = RunDir.for_study(study)
    url = storage or run_dir.db_url
    if storage is None and not (run_dir.root / "study.db").is_file():
        raise ConfigError(f"no study {study!r} in {run_dir.root}/ (use --storage for another place)")
    try:
        the_study = optuna.load_study(study_name=study, storage=url)
    except KeyError:
        raise ConfigError(f"study {study!r} not found in {url}") from None
    print_table(the_study)


def print_table(study: optuna.Study) -> None:
    frame = trials_frame(study)
    if frame.empty:
        echo("no trials yet")
        return
    shown = frame.drop(columns=[c for c in ("probe_s", "duration_s") if c in frame], errors="ignore")
    shown.columns = [c.removeprefix("param.") for c in shown.columns]
    with pd.option_context("display.max_columns", None, "display.width", 250, "display.max_colwidth", 60):
        echo(shown.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    best = [t.number for t in study.best_trials]
    counts = frame["state"].value_counts().to_dict()
    echo(f"\ntrials by state: {counts}; best (Pareto front, feasible): {best or 'none yet'}")
