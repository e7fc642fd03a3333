"""The trial's own time limit, as the probes see it.

The scheduler ends a trial that outruns ``budget.trial_timeout`` and records it as timed out:
what its probes measured goes with it. A probe whose next step is long (an SLO hold of minutes)
asks :func:`left` first and runs only what ends before the limit, so that a trial short of time
keeps what it found. The trial binds the limit (:func:`limit`) around its server's life; outside
it, or without a limit, :func:`left` is None."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["left", "limit"]

_until: ContextVar[float | None] = ContextVar("tuner_trial_until", default=None)


@contextmanager
def limit(seconds: float | None) -> Iterator[None]:
    """Inside, :func:`left` counts down from ``seconds`` (None: no limit)."""
    token = _until.set(None if seconds is None else time.monotonic() + seconds)
    try:
        yield
    finally:
        _until.reset(token)


def left() -> float | None:
    """Seconds until the bound limit (never below 0); None where none is bound."""
    until = _until.get()
    return None if until is None else max(0.0, until - time.monotonic())
