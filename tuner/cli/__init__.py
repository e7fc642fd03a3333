"""The ``tune`` command line. A thin layer: the library never prints; this module does."""

from __future__ import annotations

import logging
import sys

import typer

from tuner.cli import _diagnose, _engines, _export, _limits, _pareto, _report, _run, _status, _validate
from tuner.exceptions import ConfigError, ProvisionError, TunerError

__all__ = ["app", "main"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Find the best serving configuration of an LLM inference engine by measuring real servers.",
    pretty_exceptions_enable=False,
)
app.command("run")(_run.run)
app.command("status")(_status.status)
app.command("diagnose")(_diagnose.diagnose)
app.command("limits")(_limits.limits)
app.command("export")(_export.export)
app.command("trials")(_export.trials)
app.command("validate")(_validate.validate)
app.command("pareto")(_pareto.pareto)
app.command("report")(_report.report)
app.add_typer(_engines.app, name="engines")


def main() -> None:
    """Entry point: one-line errors, exit 2 for bad input, 3 for provisioning, 1 otherwise."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        app()
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except ProvisionError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(3)
    except TunerError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        typer.echo("error: interrupted", err=True)
        sys.exit(130)
