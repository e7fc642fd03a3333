"""Small helpers shared by the CLI commands."""

from __future__ import annotations

import logging
import sys

import typer

__all__ = ["echo", "progress_bar", "set_verbosity"]


def echo(text: str = "") -> None:
    typer.echo(text)


def set_verbosity(verbose: int) -> None:
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.getLogger("tuner").setLevel(level)


def progress_bar(fraction: float, line: str) -> None:
    """A one-line progress indication for long provisioning steps (stderr, rewritten in place)."""
    width = 30
    filled = int(width * min(max(fraction, 0.0), 1.0))
    bar = "#" * filled + "-" * (width - filled)
    end = "\n" if fraction >= 1.0 else ""
    sys.stderr.write(f"\r[{bar}] {fraction:5.1%} {line[:70]:<70}{end}")
    sys.stderr.flush()
