"""Parsing of human sizes ("1.5GiB") and durations ("8h", "15m")."""

from __future__ import annotations

import re

__all__ = ["parse_bytes", "parse_duration", "format_duration"]

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_SIZE_FACTORS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)?\s*$")
_DURATION_FACTORS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_bytes(value: str | int | float) -> int:
    """``"1.5GiB"`` -> 1610612736. Plain numbers are bytes."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"size must be >= 0, got {value}")
        return int(value)
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"not a size: {value!r} (use e.g. 512MiB, 2GiB, 1.5GB)")
    number, unit = match.groups()
    return int(float(number) * _SIZE_FACTORS[(unit or "b").lower()])


def parse_duration(value: str | int | float) -> float:
    """``"8h"`` -> 28800.0 seconds. Plain numbers are seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"duration must be >= 0, got {value}")
        return float(value)
    match = _DURATION.match(str(value))
    if not match:
        raise ValueError(f"not a duration: {value!r} (use e.g. 90s, 15m, 8h)")
    number, unit = match.groups()
    return float(number) * _DURATION_FACTORS[unit or "s"]


def format_duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
