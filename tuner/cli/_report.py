"""`tune report`: a self-contained HTML page and its markdown twin for a study."""

from __future__ import annotations

from pathlib import Path

import typer

from tuner.app.read import read_record, run_dir_of, stored_space
from tuner.cli._common import echo
from tuner.results.report import build_report


def report(
    study: str = typer.Option(..., "--study", help="study name"),
    storage: str = typer.Option(None, "--storage", help="Optuna storage URL (default: runs/<study>/study.db)"),
    out: Path = typer.Option(None, "--out", help="file prefix (default runs/<study>/report)"),
) -> None:
    """Trials by state, time split, failures by signature, the front, the chosen config."""
    record = read_record(study, storage)
    result = build_report(record, stored_space(record), run_dir=run_dir_of(study, storage))
    prefix = out or Path("runs") / study / "report"
    prefix.parent.mkdir(parents=True, exist_ok=True)
    prefix.with_suffix(".html").write_text(result.html)
    prefix.with_suffix(".md").write_text(result.markdown)
    echo(f"wrote {prefix.with_suffix('.html')} and {prefix.with_suffix('.md')}")
