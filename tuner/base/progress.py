"""Live phases of running trials, for a status line while a start takes minutes.

The worker writes ``trials/<n>/phase.json`` as it goes (``report``: launching, ready, load level
C=..., recall rung, served context, stopping); while the engine starts, the phase comes from the
server's own log lines (the adapter's ``startup_phases``: loading weights, capturing graphs, ...).
``describe`` turns both into one labelled line for the driver to show."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

__all__ = ["bind", "describe", "report"]

PHASE_FILE = "phase.json"
TAIL_BYTES = 64 * 1024
_trial_dir: ContextVar[Path | None] = ContextVar("tuner_trial_dir", default=None)


@contextmanager
def bind(trial_dir: Path) -> Iterator[None]:
    """Phases reported inside go to ``trial_dir`` (one trial per worker thread or process)."""
    token = _trial_dir.set(trial_dir)
    try:
        yield
    finally:
        _trial_dir.reset(token)


def report(label: str) -> None:
    """The phase the current trial is in now (no-op outside :func:`bind`); never raises."""
    trial_dir = _trial_dir.get()
    if trial_dir is None:
        return
    try:
        tmp = trial_dir / f".{PHASE_FILE}.tmp"
        tmp.write_text(json.dumps({"label": label, "at": time.time()}))
        os.replace(tmp, trial_dir / PHASE_FILE)
    except OSError:
        pass


def describe(trial_dir: Path, startup_phases: tuple[tuple[str, str], ...] = ()) -> str:
    """``label (for 12s)``: the worker's phase; while launching, the last startup phase the
    engine's log shows. ``starting`` before anything was written (or on another node)."""
    try:
        phase = json.loads((trial_dir / PHASE_FILE).read_text())
    except (OSError, ValueError):
        return "starting"
    label, since = phase.get("label", "starting"), phase.get("at", time.time())
    if label == "launching":
        engine = _last_startup_phase(trial_dir / "server.log", startup_phases)
        if engine:
            label = f"launching: {engine}"
    return f"{label} (for {time.time() - since:.0f}s)"


def _last_startup_phase(log: Path, phases: tuple[tuple[str, str], ...]) -> str | None:
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - TAIL_BYTES))
            tail = f.read().decode(errors="replace")
    except OSError:
        return None
    found, at = None, -1
    for pattern, label in phases:
        for m in re.finditer(pattern, tail):
            if m.start() > at:
                found, at = label, m.start()
    return found
