"""The ``tune`` command line. A thin layer: the library never prints; this module does."""

from __future__ import annotations

import logging
import sys

import typer

try:  # Typer >= 0.20 vendors Click and raises its own copies of Click's exceptions
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older Typer on top of Click
    from click import exceptions as click_errors

from tuner.cli import _compare, _diagnose, _engines, _export, _limits, _pareto, _report, _run, _status, _validate
from tuner.cli._common import storage_error_text
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
app.command("compare")(_compare.compare)
app.command("pareto")(_pareto.pareto)
app.command("report")(_report.report)
app.add_typer(_engines.app, name="engines")


def main() -> None:
    """Entry point: one-line errors, exit 2 for bad input, 3 for provisioning, 1 otherwise."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        code = app(standalone_mode=False)  # Click's usage errors come here: one plain line, never a box
    except click_errors.NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        sys.exit(0)
    except click_errors.UsageError as exc:
        where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        typer.echo(f"error: {exc.format_message()}{where}", err=True)
        sys.exit(2)
    except click_errors.ClickException as exc:
        typer.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("error: interrupted", err=True)
        sys.exit(130)
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
    except OSError as exc:  # a read-only or full runs/, a missing file: one line, the traceback at -vv
        logging.getLogger(__name__).debug("", exc_info=exc)
        where = f": {exc.filename}" if exc.filename else ""
        typer.echo(f"error: {exc.strerror or exc}{where}", err=True)
        sys.exit(1)
    except Exception as exc:
        if not _is_storage_error(exc):
            raise
        logging.getLogger(__name__).debug("", exc_info=exc)
        typer.echo(f"error: the study storage failed: {storage_error_text(exc)}", err=True)
        sys.exit(1)
    if isinstance(code, int) and code:
        sys.exit(code)


def _is_storage_error(exc: BaseException) -> bool:
    """SQLAlchemy's and Optuna's storage errors (a corrupted or read-only study.db, an
    unreachable PostgreSQL)."""
    return any(cls.__module__.startswith(("sqlalchemy", "optuna.exceptions")) for cls in type(exc).__mro__)
