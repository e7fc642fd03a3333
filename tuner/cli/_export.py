"""`tune export` (the chosen config as command / YAML / systemd unit / JSON) and `tune trials`."""

from __future__ import annotations

from pathlib import Path

import typer

from tuner.app.read import open_existing, read_record, run_dir_of, stored_space
from tuner.base.exceptions import ConfigError
from tuner.cli._common import echo
from tuner.results.confirmation import uncorrected_failure
from tuner.results.export import FORMATS, build_export
from tuner.results.pick import pick
from tuner.results.table import trials_frame


def export(
    study: str = typer.Option(..., "--study", help="study name"),
    storage: str = typer.Option(None, "--storage", help="Optuna storage URL (default: runs/<study>/study.db)"),
    choose: str = typer.Option("knee", "--pick", help="knee | max-throughput | max-context | trial:N"),
    min_context: float = typer.Option(None, "--min-context", help="only trials whose context objective reaches this"),
    fmt: str = typer.Option("cmd", "--format", "-f", help="cmd | yaml | systemd | json"),
    port: int = typer.Option(8000, "--port", help="port the exported server listens on"),
    out: Path = typer.Option(None, "--out", "-o", help="write here instead of standard output"),
    force: bool = typer.Option(False, "--force", help="export a pick whose SLO answer broke its confirmation, uncorrected"),
) -> None:
    """Export the chosen trial's serve config, rendered by the same adapter `tune run` used."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
    record = read_record(study, storage)
    chosen = pick(record, choose, min_context=min_context)
    if uncorrected_failure(chosen.trial.confirmed) and not force:
        raise ConfigError(
            f"trial {chosen.number}'s SLO answer did not hold its confirmation run and no load below it held: "
            f"`tune validate --study {study} --confirm` steps it down, or --force exports it anyway"
        )
    result = build_export(record, stored_space(record), chosen, port=port, run_dir=run_dir_of(study, storage))
    for warning in result.warnings():
        typer.echo(f"warning: {warning}", err=True)
    text = result.render(fmt)
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        echo(f"trial {chosen.number} exported as {fmt} to {out}")


def trials(
    study: str = typer.Option(..., "--study", help="study name"),
    storage: str = typer.Option(None, "--storage", help="Optuna storage URL (default: runs/<study>/study.db)"),
    fmt: str = typer.Option("csv", "--format", "-f", help="csv | parquet | json"),
    out: Path = typer.Option(None, "--out", "-o", help="file to write (parquet needs one); default standard output"),
) -> None:
    """Every trial with params, every metric (per level, latencies, telemetry), timings, datetimes,
    state and failure signature."""
    frame = trials_frame(open_existing(study, storage), every_metric=True)
    if fmt == "csv":
        text = frame.to_csv(index=False)
    elif fmt == "json":
        text = frame.to_json(orient="records", indent=2) + "\n"
    elif fmt == "parquet":
        if out is None:
            raise ConfigError("--format parquet needs --out FILE")
        frame.to_parquet(out, index=False)
        echo(f"{len(frame)} trials written to {out}")
        return
    else:
        raise ConfigError(f"--format: {fmt!r} is not one of csv, parquet, json")
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
