"""The ``tune`` command line. A thin layer: the library never prints; this module does."""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import sys
import traceback

import typer

from tuner.serving.server import end_servers_on_sigterm

try:  # Typer >= 0.20 vendors Click and raises its own copies of Click's exceptions
    click_errors = importlib.import_module("typer._click.exceptions")
except ImportError:  # pragma: no cover - older Typer on top of Click
    click_errors = importlib.import_module("click.exceptions")

from tuner.app.read import storage_error_text
from tuner.base.credentials import mask
from tuner.base.exceptions import ConfigError, ProvisionError, TunerError
from tuner.cli import _compare, _diagnose, _engines, _export, _limits, _pareto, _report, _run, _status, _validate, _workload
from tuner.cli._common import set_verbosity

__all__ = ["app", "main"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Find the best serving configuration of an LLM inference engine by measuring real servers.",
    pretty_exceptions_enable=False,
)


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", help="print tuner's version and exit", is_eager=True),
) -> None:
    """Find the best serving configuration of an LLM inference engine by measuring real servers."""
    if version:
        typer.echo(f"tuner {_version()}")
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    # SIGTERM (`timeout`, systemd, a job scheduler) unwinds every `with` that holds a server, so
    # `tune validate` ends its engine's group as Ctrl-C does; `tune run` installs its own handlers
    end_servers_on_sigterm()


def _version() -> str:
    try:
        return importlib.metadata.version("tuner")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree without installing
        return "unknown (not installed)"


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
app.add_typer(_workload.app, name="workload")


def main() -> None:
    """Entry point: one-line errors, exit 2 for bad input, 3 for provisioning, 1 otherwise."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    set_verbosity(0)  # the libraries' own INFO lines (Optuna's "A new study created in memory") only with -v
    for handler in logging.getLogger().handlers:
        handler.addFilter(_MaskCredentials())
    try:
        code = app(standalone_mode=False)  # Click's usage errors come here: one plain line, never a box
    except click_errors.NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        sys.exit(0)
    except click_errors.UsageError as exc:
        where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        typer.echo(mask(f"error: {exc.format_message()}{where}"), err=True)
        sys.exit(2)
    except click_errors.ClickException as exc:
        typer.echo(mask(f"error: {exc.format_message()}"), err=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("error: interrupted", err=True)
        sys.exit(130)
    except ConfigError as exc:
        typer.echo(mask(f"error: {exc}"), err=True)
        sys.exit(2)
    except ProvisionError as exc:
        typer.echo(mask(f"error: {exc}"), err=True)
        sys.exit(3)
    except TunerError as exc:
        typer.echo(mask(f"error: {exc}"), err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        typer.echo("error: interrupted", err=True)
        sys.exit(130)
    except OSError as exc:  # a read-only or full runs/, a missing file: one line, the traceback at -vv
        logging.getLogger(__name__).debug("", exc_info=exc)
        where = f": {exc.filename}" if exc.filename else ""
        typer.echo(mask(f"error: {exc.strerror or exc}{where}"), err=True)
        sys.exit(1)
    except Exception as exc:
        if not _is_storage_error(exc):
            typer.echo(mask(traceback.format_exc()), err=True, nl=False)  # a bug's traceback, still without passwords
            sys.exit(1)
        logging.getLogger(__name__).debug("", exc_info=exc)
        typer.echo(mask(f"error: the study storage failed: {storage_error_text(exc)}"), err=True)
        sys.exit(1)
    if isinstance(code, int) and code:
        sys.exit(code)


class _MaskCredentials(logging.Filter):
    """Every log line leaves with URL passwords masked (a storage URL in a library's message)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        masked = mask(text)
        if masked != text:
            record.msg, record.args = masked, None
        return True


def _is_storage_error(exc: BaseException) -> bool:
    """SQLAlchemy's and Optuna's storage errors (a corrupted or read-only study.db, an
    unreachable PostgreSQL)."""
    return any(cls.__module__.startswith(("sqlalchemy", "optuna.exceptions")) for cls in type(exc).__mro__)
