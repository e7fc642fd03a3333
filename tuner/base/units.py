"""Parsing of human sizes ("1.5GiB") and durations ("8h", "15m")."""

from __future__ import annotations

import re

from pydantic import ByteSize, TypeAdapter, ValidationError

__all__ = ["format_duration", "parse_bytes", "parse_duration"]

_BYTES = TypeAdapter(ByteSize)
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)?\s*$")
_DURATION_FACTORS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_bytes(value: str | int | float) -> int:
    """``"1.5GiB"`` -> 1610612736 (pydantic's ByteSize: KB = 1000, KiB = 1024). Plain numbers are bytes."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"size must be >= 0, got {value}")
        return int(value)
    try:
        return int(_BYTES.validate_python(str(value).strip()))
    except ValidationError:
        raise ValueError(f"not a size: {value!r} (use e.g. 512MiB, 2GiB, 1.5GB)") from None


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
