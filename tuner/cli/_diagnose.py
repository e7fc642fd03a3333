"""`tune diagnose`: classify a saved server log with the same signatures `tune run` uses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from tuner import engines
from tuner.base.exceptions import ConfigError
from tuner.cli._common import echo


def diagnose(
    engine: str = typer.Option(..., "--engine", "-e", help="engine whose signatures to apply"),
    log: str = typer.Option("-", "--log", "-l", help="log file, or - for standard input"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    path: str = typer.Argument(None, help="log file (same as --log)", show_default=False),
) -> None:
    """Name the failure in a server log: signature, matched lines, capacity lines found."""
    adapter = engines.get(engine)
    source = path or log
    if source == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(source).read_text(errors="replace")
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read log: {exc.strerror}") from None
    match = adapter.classify(text)
    capacity = adapter.capacity(text, None, None)
    result = {
        "engine": engine,
        "signature": match.signature.name if match else None,
        "category": match.signature.category if match else None,
        "lines": [{"number": line.number, "text": line.text} for line in match.lines] if match else [],
        "details": match.details if match else {},
        "capacity": capacity.to_dict(),
    }
    if as_json:
        echo(json.dumps(result, indent=2))
        return
    echo(f"signature: {result['signature'] or 'none (no known failure in this log)'}")
    if match:
        echo(f"category:  {result['category']}")
        for line in match.lines:
            echo(f"  {line.number:>6}: {line.text.strip()[:200]}")
        for key, value in match.details.items():
            echo(f"  {key} = {value}")
    found = {
        k: v
        for k, v in capacity.to_dict().items()
        if k in ("kv_tokens", "max_running_requests", "context_per_request") and v is not None
    }
    echo("capacity:  " + (", ".join(f"{k}={v}" for k, v in found.items()) if found else "no capacity lines found"))
